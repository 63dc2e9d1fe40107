"""The test-time-regression identities of this family (arXiv:2501.12352) and its special cases."""

import pytest
import torch

from helpers import assert_close, random_log_gate, random_qkv
from regmem.ops import gated_linear_attn, linear_attn
from regmem.ops.common import segsum

T, K, V = 12, 6, 4


def _one_gd_step_outputs(q, k, v, weights):
    """y_t = M_t q_t with M_t = 0 - grad of L_t(M) = 1/2 sum_{i<=t} w[t, i] ||v_i - M k_i||^2 at M = 0.

    q, k: [T, K]; v: [T, V]; weights: [T, T] (zero for i > t) or [T, T, K] per key channel."""
    M = torch.zeros(T, V, K, dtype=q.dtype, requires_grad=True)  # one memory per prefix t
    if weights.ndim == 3:  # per-channel weights act on the keys: k_i -> w[t, i] ⊙ k_i
        keys = weights * k.unsqueeze(0)  # [T, T, K]
        residual = v.unsqueeze(0) - torch.einsum("tvk,tik->tiv", M, keys)  # [T(t), T(i), V]
        loss = 0.5 * residual.pow(2).sum(-1).masked_fill(weights[..., 0] == 0, 0.0).sum()
    else:
        residual = v.unsqueeze(0) - torch.einsum("tvk,ik->tiv", M, k)  # [T(t), T(i), V]
        loss = 0.5 * (weights * residual.pow(2).sum(-1)).sum()
    (grad,) = torch.autograd.grad(loss, M)
    return torch.einsum("tvk,tk->tv", -grad, q)  # [T, V]


def _single_head():
    q, k, v = random_qkv(1, T, 1, K, V)
    return q, k, v, q[0, :, 0], k[0, :, 0], v[0, :, 0]


@pytest.mark.parametrize("mode", ["reference", "recurrent", "chunk"])
def test_linear_attention_is_one_gradient_step_on_least_squares(mode):
    """Eq. (24): one full-batch GD step from 0 with beta = 1 on uniform LS is linear attention."""
    q, k, v, q1, k1, v1 = _single_head()
    weights = torch.ones(T, T, dtype=q.dtype).tril()
    expected = _one_gd_step_outputs(q1, k1, v1, weights)
    o, _ = linear_attn(q, k, v, scale=1.0, mode=mode, chunk_size=8)
    assert_close(o[0, :, 0], expected, "linear attention vs GD step")


@pytest.mark.parametrize("mode", ["reference", "recurrent", "chunk"])
def test_gated_linear_attention_is_one_gradient_step_on_weighted_least_squares(mode):
    """Eq. (16): with gamma_i^(t) = prod_{j=i+1}^t exp(g_j) the GD step is gated linear attention."""
    q, k, v, q1, k1, v1 = _single_head()
    g = random_log_gate((1, T, 1), 1.0)
    weights = torch.exp(segsum(g[0, :, 0]))  # [T, T], gamma_i^(t), zero above the diagonal
    expected = _one_gd_step_outputs(q1, k1, v1, weights)
    o, _ = gated_linear_attn(q, k, v, g, scale=1.0, mode=mode, chunk_size=8)
    assert_close(o[0, :, 0], expected, "gated linear attention vs weighted GD step")


def test_diagonal_gate_is_a_gradient_step_with_decayed_keys_not_a_weighted_least_squares_step():
    """The paper derives scalar gates only (Vignette 2). A diagonal gate (GLA) is the GD step on LS with
    keys decayed per channel, k_i -> (prod_j alpha_j) ⊙ k_i; no choice of scalar weights reproduces it."""
    q, k, v, q1, k1, v1 = _single_head()
    g = random_log_gate((1, T, 1, K), 2.0)
    o, _ = gated_linear_attn(q, k, v, g, scale=1.0)
    per_channel = torch.exp(segsum(g[0, :, 0].T)).permute(1, 2, 0)  # [T(t), T(i), K]
    assert_close(o[0, :, 0], _one_gd_step_outputs(q1, k1, v1, per_channel), "GLA vs decayed-key GD step")
    mean_channel = torch.exp(segsum(g[0, :, 0].mean(-1)))  # the closest scalar weights, [T, T]
    scalar_step = _one_gd_step_outputs(q1, k1, v1, mean_channel)
    assert (o[0, :, 0] - scalar_step).abs().max() > 1e-2


def test_linear_attention_equals_least_squares_with_orthonormal_keys():
    """Vignette 1: with orthonormal keys (t <= K) linear attention is the exact LS memory."""
    q, _, v, _, _, v1 = _single_head()
    keys = torch.linalg.qr(torch.randn(K, K, dtype=torch.float64, generator=torch.Generator().manual_seed(2)))[0]
    k = keys[:, :K].T.reshape(1, K, 1, K)  # [1, T=K, 1, K], rows orthonormal
    o, _ = linear_attn(q[:, :K], k, v[:, :K], scale=1.0)
    for t in range(K):
        M = torch.linalg.lstsq(k[0, : t + 1, 0], v1[: t + 1]).solution.T  # [V, K], min-norm LS solution
        assert_close(o[0, t, 0], M @ q[0, t, 0], f"t={t}")


def test_normalized_linear_attention_is_nadaraya_watson_regression():
    """normalize=True is the local-constant (Nadaraya-Watson) regressor with kernel phi(q).phi(k) (eq. 50)."""
    q, k, v, q1, k1, v1 = _single_head()
    o, _ = linear_attn(q, k, v, feature_map="elu_plus_one", normalize=True)
    phi = lambda x: torch.nn.functional.elu(x) + 1  # noqa: E731
    w = (phi(q1) @ phi(k1).T).tril()  # [T, T] kernel weights s(k_i, q_t)
    assert_close(o[0, :, 0], (w @ v1) / w.sum(-1, keepdim=True), "normalised LA vs NW estimator")


def test_zero_gate_equals_linear_attention():
    q, k, v = random_qkv(2, 30, 2, K, V)
    for g in (torch.zeros(2, 30, 2), torch.zeros(2, 30, 2, K)):
        o, S = gated_linear_attn(q, k, v, g, output_final_state=True, chunk_size=16)
        o_la, S_la = linear_attn(q, k, v, output_final_state=True, chunk_size=16)
        assert_close(o, o_la, "o")
        assert_close(S, S_la, "state")


@pytest.mark.parametrize("gate_shape", [(1, 40, 2), (1, 40, 2, K)])
def test_total_decay_keeps_only_the_current_token(gate_shape):
    q, k, v = random_qkv(1, 40, 2, K, V)
    g = torch.full(gate_shape, -200.0, dtype=torch.float64, requires_grad=True)
    o, _ = gated_linear_attn(q, k, v, g, scale=1.0, initial_state=torch.ones(1, 2, K, V, dtype=torch.float64))
    assert_close(o, (q * k).sum(-1, keepdim=True) * v, "o")
    (grad,) = torch.autograd.grad(o.sum(), g)
    assert torch.isfinite(grad).all()


def test_state_stays_put_without_keys_or_decay():
    q, _, v = random_qkv(1, 20, 2, K, V)
    S0 = torch.randn(1, 2, K, V, dtype=torch.float64)
    o, S = gated_linear_attn(q, torch.zeros_like(q), v, torch.zeros(1, 20, 2), initial_state=S0,
                             output_final_state=True)
    assert_close(S, S0, "state")
    assert_close(o, torch.einsum("bthk,bhkv->bthv", q, S0) * K**-0.5, "o reads the initial state")


def test_default_scale_is_inverse_sqrt_key_dim():
    q, k, v = random_qkv(1, 20, 2, K, V)
    assert_close(linear_attn(q, k, v)[0], linear_attn(q * K**-0.5, k, v, scale=1.0)[0], "o")


def test_heads_are_independent_memories():
    """Sec. 3: H heads equal H single-head calls."""
    q, k, v = random_qkv(2, 25, 3, K, V)
    g = random_log_gate((2, 25, 3, K), 1.0)
    o, _ = gated_linear_attn(q, k, v, g)
    for h in range(3):
        o_h, _ = gated_linear_attn(q[:, :, h:h + 1], k[:, :, h:h + 1], v[:, :, h:h + 1], g[:, :, h:h + 1])
        assert_close(o[:, :, h:h + 1], o_h, f"head {h}")


def test_outputs_are_causal():
    """Causality: changing tokens after t leaves outputs up to t unchanged."""
    q, k, v = random_qkv(1, 40, 2, K, V)
    g = random_log_gate((1, 40, 2), 1.0)
    o, _ = gated_linear_attn(q, k, v, g, chunk_size=16)
    k2, v2 = k.clone(), v.clone()
    k2[:, 25:] += 1.0
    v2[:, 25:] -= 3.0
    o2, _ = gated_linear_attn(q, k2, v2, g, chunk_size=16)
    assert_close(o2[:, :25], o[:, :25], "prefix")
    assert (o2[:, 25:] - o[:, 25:]).abs().max() > 1e-3
