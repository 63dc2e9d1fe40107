"""The test-time-regression identities of the delta-rule family (arXiv:2501.12352, eqs. 26-41) and its special
cases, each against an independent literal computation in the paper's orientation M = S^T: [V, K]."""

from functools import partial

import pytest
import torch

from helpers import assert_all_close, assert_close, random_log_gate, random_qkv, run_with_grads
from regmem.ops import (
    decoupled_gated_delta_rule,
    delta_product,
    delta_rule,
    delta_rule_multistep,
    gated_delta_rule,
    leaky_lms,
    linear_attn,
    longhorn,
    nlms,
)

B, T, H, K, V = 2, 20, 2, 6, 4
MODES = ["reference", "recurrent", "chunk"]


def _qkv(seed=0):
    q, k, v = random_qkv(B, T, H, K, V, seed=seed)
    return q, torch.nn.functional.normalize(k, dim=-1), v


def _uniform(*shape, low=0.0, high=1.0, seed=3):
    return low + (high - low) * torch.rand(*shape, generator=torch.Generator().manual_seed(seed),
                                           dtype=torch.float64)


def _run_memory(update, q, k, v, M0, *tokens):
    """Runs M_t = update(M_{t-1}, k_t, v_t, *token_t) on [B, H, V, K] memories; returns (y_t = M_t q_t, M_T^T)."""
    M, outputs = M0.transpose(-1, -2), []
    for t in range(q.shape[1]):
        M = update(M, k[:, t], v[:, t], *(x[:, t] for x in tokens))
        outputs.append(torch.einsum("bhvk,bhk->bhv", M, q[:, t]))
    return torch.stack(outputs, dim=1), M.transpose(-1, -2)


def _leaky_lms_step(M, k, v, beta, lam):
    """TTR eq. (37): M_t = (1 - beta lam) M_{t-1} + beta (v - M_{t-1} k) k^T."""
    residual = v - torch.einsum("bhvk,bhk->bhv", M, k)  # [B, H, V]
    return (1 - beta * lam)[..., None, None] * M + beta[..., None, None] * residual.unsqueeze(-1) * k.unsqueeze(-2)


@pytest.mark.parametrize("mode", MODES)
def test_leaky_lms_equals_the_literal_leaky_lms_recurrence(mode):
    """Eq. (34)-(37): leaky_lms (run as Gated DeltaNet by eq. 38-41) is eq. (37) step by step."""
    q, k, v = _qkv()
    beta, lam = _uniform(B, T, H, high=1.5), _uniform(B, T, H, high=0.6, seed=4)
    S0 = torch.randn(B, H, K, V, dtype=torch.float64)
    o, S = leaky_lms(q, k, v, beta, lam, scale=1.0, initial_state=S0, output_final_state=True, mode=mode,
                     chunk_size=8)
    o_ref, S_ref = _run_memory(_leaky_lms_step, q, k, v, S0, beta, lam)
    assert_close(o, o_ref, "o")
    assert_close(S, S_ref, "state")


@pytest.mark.parametrize("mode", MODES)
def test_gated_delta_rule_is_leaky_lms_under_the_ttr_map_and_its_inverse(mode):
    """Eq. (38)-(41): Gated DeltaNet (alpha, eta, v') equals Leaky LMS with
    (lam, beta, v) = ((1 - alpha) / (alpha eta), alpha eta, v' / alpha), and the forward map round-trips."""
    q, k, v_prime = _qkv()
    g = random_log_gate((B, T, H), 1.0, zero_fraction=0.0)
    alpha, eta = torch.exp(g), _uniform(B, T, H, low=0.1, high=2.0)
    S0 = torch.randn(B, H, K, V, dtype=torch.float64)
    o, S = gated_delta_rule(q, k, v_prime, g, eta, scale=1.0, initial_state=S0, output_final_state=True,
                            mode=mode, chunk_size=8)
    lam, beta, v = (1 - alpha) / (alpha * eta), alpha * eta, v_prime / alpha.unsqueeze(-1)
    o_ref, S_ref = _run_memory(_leaky_lms_step, q, k, v, S0, beta, lam)
    assert_close(o, o_ref, "o vs literal leaky LMS")
    assert_close(S, S_ref, "state vs literal leaky LMS")
    o_leaky, S_leaky = leaky_lms(q, k, v, beta, lam, scale=1.0, initial_state=S0, output_final_state=True,
                                 mode=mode, chunk_size=8)
    assert_close(o_leaky, o, "leaky_lms(inverse map) vs gated_delta_rule")
    assert_close(S_leaky, S, "state")
    # forward map of the recovered (beta, lam, v): alpha = 1 - beta lam, eta = beta / alpha, v' = alpha v
    assert_close(1 - beta * lam, alpha, "alpha")
    assert_close(beta / (1 - beta * lam), eta, "eta")
    assert_close((1 - beta * lam).unsqueeze(-1) * v, v_prime, "v'")


@pytest.mark.parametrize("mode", MODES)
def test_decoupled_weight_decay_equals_its_literal_recurrence(mode):
    """After eq. (41): M_t = (1 - lam_t) M_{t-1} + beta_t (v_t - M_{t-1} k_t) k_t^T with lam independent of beta."""
    q, k, v = _qkv()
    beta, lam = _uniform(B, T, H, high=2.0), _uniform(B, T, H, high=0.95, seed=4)
    S0 = torch.randn(B, H, K, V, dtype=torch.float64)
    o, S = decoupled_gated_delta_rule(q, k, v, beta, lam, scale=1.0, initial_state=S0, output_final_state=True,
                                      mode=mode, chunk_size=8)

    def decoupled_step(M, k, v, beta, lam):
        residual = v - torch.einsum("bhvk,bhk->bhv", M, k)  # [B, H, V]
        return (1 - lam)[..., None, None] * M + beta[..., None, None] * residual.unsqueeze(-1) * k.unsqueeze(-2)

    o_ref, S_ref = _run_memory(decoupled_step, q, k, v, S0, beta, lam)
    assert_close(o, o_ref, "o")
    assert_close(S, S_ref, "state")


@pytest.mark.parametrize("mode", MODES)
def test_nlms_recalls_the_newest_pair_exactly(mode):
    """Eq. (33): beta = 1 / ||k||^2 gives M_t k_t = v_t (read out with q = k_t, scale 1)."""
    _, k, v = _qkv()
    k = k * _uniform(B, T, H, 1, low=0.3, high=3.0)  # keys of any norm
    o, _ = nlms(k, k, v, eps=0.0, scale=1.0, initial_state=torch.randn(B, H, K, V, dtype=torch.float64),
                mode=mode, chunk_size=8)
    assert_close(o, v, "M_t k_t vs v_t")
    o_eps, _ = nlms(k, k, v, scale=1.0, mode=mode, chunk_size=8)  # eps = 1e-6: recalled up to ~eps / ||k||^2
    assert (o_eps - v).abs().max() < 1e-4


@pytest.mark.parametrize("mode", MODES)
def test_longhorn_step_is_the_minimiser_of_its_proximal_objective(mode):
    """Eq. (30)-(31): M_t = argmin 1/2 ||M - M_{t-1}||^2 + delta/2 ||v_t - M k_t||^2, solved as the
    linear system M (I + delta k k^T) = M_{t-1} + delta v k^T by torch.linalg.solve."""
    q, k, v = _qkv()
    k = k * _uniform(B, T, H, 1, low=0.5, high=2.0)
    delta = _uniform(B, T, H, high=5.0)
    S0 = torch.randn(B, H, K, V, dtype=torch.float64)
    o, S = longhorn(q, k, v, delta, scale=1.0, initial_state=S0, output_final_state=True, mode=mode, chunk_size=8)

    def proximal_step(M, k, v, d):
        d = d[..., None, None]
        system = torch.eye(K, dtype=M.dtype) + d * k.unsqueeze(-1) * k.unsqueeze(-2)  # [B, H, K, K], symmetric
        rhs = M + d * v.unsqueeze(-1) * k.unsqueeze(-2)  # [B, H, V, K]
        return torch.linalg.solve(system, rhs.transpose(-1, -2)).transpose(-1, -2)  # M = rhs system^{-1}

    o_ref, S_ref = _run_memory(proximal_step, q, k, v, S0, delta)
    assert_close(o, o_ref, "o")
    assert_close(S, S_ref, "state")


def test_longhorn_with_zero_delta_leaves_the_state_unchanged():
    q, k, v = _qkv()
    S0 = torch.randn(B, H, K, V, dtype=torch.float64)
    for mode in MODES:
        o, S = longhorn(q, k, v, torch.zeros(B, T, H, dtype=torch.float64), initial_state=S0,
                        output_final_state=True, mode=mode, chunk_size=8)
        assert_close(S, S0, f"{mode} state")
        assert_close(o, torch.einsum("bthk,bhkv->bthv", q, S0) * K**-0.5, f"{mode} o reads the initial state")


@pytest.mark.parametrize("mode", MODES)
def test_several_steps_on_one_pair_equal_one_step_with_the_closed_form_beta(mode):
    """Vignette 3, after eq. (29): I delta steps on the same (k, v) (DeltaProduct with the pair repeated) equal one step
    with 1 - beta_eff ||k||^2 = prod_i (1 - beta_i ||k||^2); outputs, state and every gradient."""
    q, k, v = _qkv()
    k = k * _uniform(B, T, H, 1, low=0.5, high=1.2)
    inputs = {"q": q, "k": k, "v": v, "betas": _uniform(B, T, H, 3, high=1.3),
              "initial_state": torch.randn(B, H, K, V, dtype=torch.float64)}

    def repeated_pair(q, k, v, betas, **options):
        n = betas.shape[-1]
        return delta_product(q, k.unsqueeze(3).expand(-1, -1, -1, n, -1), v.unsqueeze(3).expand(-1, -1, -1, n, -1),
                             betas, **options)

    expected = run_with_grads(partial(repeated_pair, mode="reference"), inputs)
    actual = run_with_grads(partial(delta_rule_multistep, mode=mode, chunk_size=8), inputs)
    assert_all_close(actual, expected, "multistep vs repeated DeltaProduct")


@pytest.mark.parametrize("mode", MODES)
def test_delta_product_is_a_product_of_householder_steps(mode):
    """DeltaProduct (arXiv:2502.10297): per token the gate once, then n_h delta steps with distinct (k, v, beta),
    read out after the last, against the literal per-token loop."""
    q, _, _ = _qkv()
    n_h = 3
    gen = torch.Generator().manual_seed(5)
    k = torch.nn.functional.normalize(torch.randn(B, T, H, n_h, K, generator=gen, dtype=torch.float64), dim=-1)
    v = torch.randn(B, T, H, n_h, V, generator=gen, dtype=torch.float64)
    beta = _uniform(B, T, H, n_h, high=2.0)
    g = random_log_gate((B, T, H), 1.0)
    S0 = torch.randn(B, H, K, V, dtype=torch.float64)
    o, S = delta_product(q, k, v, beta, g=g, scale=1.0, initial_state=S0, output_final_state=True, mode=mode,
                         chunk_size=8)

    def token_step(M, k, v, beta, g):
        M = torch.exp(g)[..., None, None] * M
        for j in range(n_h):
            householder = torch.eye(K, dtype=M.dtype) - beta[..., j, None, None] * torch.einsum(
                "bhk,bhl->bhkl", k[:, :, j], k[:, :, j])
            M = M @ householder + beta[..., j, None, None] * torch.einsum("bhv,bhk->bhvk", v[:, :, j], k[:, :, j])
        return M

    o_ref, S_ref = _run_memory(token_step, q, k, v, S0, beta, g)
    assert_close(o, o_ref, "o")
    assert_close(S, S_ref, "state")


def test_delta_product_with_one_step_is_the_gated_delta_rule():
    q, k, v = _qkv()
    beta, g = _uniform(B, T, H, high=2.0), random_log_gate((B, T, H), 1.0)
    o, S = delta_product(q, k.unsqueeze(3), v.unsqueeze(3), beta.unsqueeze(-1), g=g, output_final_state=True,
                         chunk_size=8)
    o_ref, S_ref = gated_delta_rule(q, k, v, g, beta, output_final_state=True, chunk_size=8)
    assert_close(o, o_ref, "o")
    assert_close(S, S_ref, "state")


@pytest.mark.parametrize("mode", MODES)
def test_delta_rule_with_unit_beta_and_orthonormal_keys_is_linear_attention(mode):
    """From M_0 = 0 with beta = 1 and orthonormal keys (t <= K) DeltaNet equals linear attention."""
    q, _, v = _qkv()
    basis = torch.linalg.qr(torch.randn(B, H, K, K, dtype=torch.float64,
                                        generator=torch.Generator().manual_seed(2)))[0]  # [B, H, K, K]
    k = basis.permute(0, 3, 1, 2)  # [B, T=K, H, K], the K columns of each basis as keys
    q, v = q[:, :K], v[:, :K]
    o, S = delta_rule(q, k, v, torch.ones(B, K, H, dtype=torch.float64), output_final_state=True, mode=mode,
                      chunk_size=4)
    o_la, S_la = linear_attn(q, k, v, output_final_state=True)
    assert_close(o, o_la, "o")
    assert_close(S, S_la, "state")


@pytest.mark.parametrize("mode", MODES)
def test_delta_rule_is_one_sgd_step_on_the_newest_pair(mode):
    """Eq. (26)-(29): M_t = M_{t-1} - beta_t grad_M 1/2 ||v_t - M k_t||^2 at M_{t-1} (autograd)."""
    q, k, v = _qkv()
    beta = _uniform(B, T, H, high=2.0)
    S0 = torch.randn(B, H, K, V, dtype=torch.float64)
    o, S = delta_rule(q, k, v, beta, scale=1.0, initial_state=S0, output_final_state=True, mode=mode, chunk_size=8)

    def sgd_step(M, k, v, beta):
        M = M.detach().requires_grad_()
        loss = 0.5 * (v - torch.einsum("bhvk,bhk->bhv", M, k)).pow(2).sum()  # sum over (B, H) of independent losses
        (grad,) = torch.autograd.grad(loss, M)
        return M.detach() - beta[..., None, None] * grad

    o_ref, S_ref = _run_memory(sgd_step, q, k, v, S0, beta)
    assert_close(o, o_ref, "o")
    assert_close(S, S_ref, "state")


def test_zero_gate_is_the_delta_rule():
    """Gated DeltaNet with alpha = 1 reduces to DeltaNet, for scalar and diagonal gates."""
    q, k, v = _qkv()
    beta = _uniform(B, T, H, high=2.0)
    o_ref, S_ref = delta_rule(q, k, v, beta, output_final_state=True, chunk_size=8)
    for g in (torch.zeros(B, T, H, dtype=torch.float64), torch.zeros(B, T, H, K, dtype=torch.float64)):
        o, S = gated_delta_rule(q, k, v, g, beta, output_final_state=True, chunk_size=8)
        assert_close(o, o_ref, "o")
        assert_close(S, S_ref, "state")


@pytest.mark.parametrize("gate_shape", [(B, 40, H), (B, 40, H, K)])
@pytest.mark.parametrize("mode", MODES)
def test_total_decay_keeps_only_the_current_token(gate_shape, mode):
    """g = -200 (retention e^-200 = 0 in float64) forgets everything before the token: S_t = beta_t k_t v_t^T."""
    q, k, v = random_qkv(B, 40, H, K, V)
    beta = _uniform(B, 40, H, high=2.0)
    g = torch.full(gate_shape, -200.0, dtype=torch.float64, requires_grad=True)
    o, _ = gated_delta_rule(q, k, v, g, beta, scale=1.0, initial_state=torch.ones(B, H, K, V, dtype=torch.float64),
                            mode=mode, chunk_size=16)
    assert_close(o, beta.unsqueeze(-1) * (q * k).sum(-1, keepdim=True) * v, "o")
    (grad,) = torch.autograd.grad(o.sum(), g)
    assert torch.isfinite(grad).all()


def test_default_scale_is_inverse_sqrt_key_dim():
    q, k, v = _qkv()
    beta = _uniform(B, T, H)
    assert_close(delta_rule(q, k, v, beta)[0], delta_rule(q * K**-0.5, k, v, beta, scale=1.0)[0], "o")


def test_outputs_are_causal():
    """Causality: changing tokens after t leaves outputs up to t unchanged."""
    q, k, v = random_qkv(1, 40, 2, K, V)
    beta, g = _uniform(1, 40, 2, high=2.0), random_log_gate((1, 40, 2, K), 1.0)
    o, _ = gated_delta_rule(q, k, v, g, beta, chunk_size=16)
    k2, v2 = k.clone(), v.clone()
    k2[:, 25:] += 1.0
    v2[:, 25:] -= 3.0
    o2, _ = gated_delta_rule(q, k2, v2, g, beta, chunk_size=16)
    assert_close(o2[:, :25], o[:, :25], "prefix")
    assert (o2[:, 25:] - o[:, 25:]).abs().max() > 1e-3
