"""The test-time-regression identities of multi_step_gd (arXiv:2501.12352, eqs. 18-24): one step of size 1 is linear
attention (eq. 24); many small steps reach the min-norm least-squares memory; two steps in closed form."""

import pytest
import torch
from test_multi_step_gd_forms import gd_inputs

from helpers import assert_close, random_qkv
from regmem.ops import GDStats, linear_attn, multi_step_gd

MODES = ["reference", "recurrent", "chunk"]


@pytest.mark.parametrize("mode", MODES)
def test_one_unit_step_is_linear_attention(mode):
    """I = 1, beta = 1: S_t^(1) = C_t = sum_{s<=t} k_s v_s^T (eq. 24), with the initial C_0 as linear attention's
    initial state; R plays no part."""
    x = gd_inputs(2, 45, 2, 6, 4, 1)
    beta = torch.ones(2, 45, 2, 1, dtype=torch.float64)
    o, state = multi_step_gd(x["q"], x["k"], x["v"], beta, scale=0.3, mode=mode, chunk_size=16,
                             initial_state=x["initial_state"], output_final_state=True)
    o_la, C = linear_attn(x["q"], x["k"], x["v"], scale=0.3, initial_state=x["initial_state"].C,
                          output_final_state=True, chunk_size=16)
    assert_close(o, o_la, "o vs linear attention")
    assert_close(state.C, C, "state.C vs linear attention state")


@pytest.mark.parametrize("mode", MODES)
def test_many_small_steps_reach_the_min_norm_least_squares_memory(mode):
    """With 0 < beta < 2 / lambda_max(R_t) the iterates from 0 converge to the min-norm LS memory
    argmin ||K_t S - V_t|| (rank-deficient prefixes t < K included). Here beta_t = 1 / lambda_max(R_t) and
    I = 200 on well-conditioned keys: the error factor max (1 - lambda_min+ / lambda_max)^200 is below 1e-13."""
    T, K, V, I = 8, 3, 2, 200
    gen = torch.Generator().manual_seed(0)
    basis = torch.linalg.qr(torch.randn(K, K, dtype=torch.float64, generator=gen))[0]
    keys = basis[:, torch.arange(T) % K].T + 0.2 * torch.randn(T, K, dtype=torch.float64, generator=gen)  # [T, K]
    q, _, v = random_qkv(1, T, 1, K, V, seed=3)
    lam_max = torch.stack([torch.linalg.eigvalsh(keys[: t + 1].T @ keys[: t + 1])[-1] for t in range(T)])  # [T]
    beta = (1.0 / lam_max).reshape(1, T, 1, 1).expand(1, T, 1, I)
    o, _ = multi_step_gd(q, keys.reshape(1, T, 1, K), v, beta, scale=1.0, mode=mode, chunk_size=16)
    for t in range(T):
        S = torch.linalg.lstsq(keys[: t + 1], v[0, : t + 1, 0], driver="gelsd").solution  # [K, V], min-norm
        torch.testing.assert_close(o[0, t, 0], S.T @ q[0, t, 0], rtol=1e-9, atol=1e-9, msg=f"t={t}")


@pytest.mark.parametrize("mode", MODES)
def test_two_steps_in_closed_form(mode):
    """I = 2 from 0: S^(2) = (beta1 + beta2) C_t - beta1 beta2 R_t C_t."""
    x = gd_inputs(1, 30, 2, 5, 3, 2)
    R0, C0 = x["initial_state"]
    o, _ = multi_step_gd(**x, scale=1.0, mode=mode, chunk_size=16)
    R = R0.unsqueeze(1) + torch.einsum("bshj,bshk->bshjk", x["k"], x["k"]).cumsum(dim=1)  # [B, T, H, K, K]
    C = C0.unsqueeze(1) + torch.einsum("bshk,bshv->bshkv", x["k"], x["v"]).cumsum(dim=1)  # [B, T, H, K, V]
    b1, b2 = (x["beta"][..., i, None, None] for i in range(2))  # [B, T, H, 1, 1]
    S = (b1 + b2) * C - b1 * b2 * (R @ C)  # [B, T, H, K, V]
    assert_close(o, torch.einsum("bthkv,bthk->bthv", S, x["q"]), "o")


def test_zero_steps_sizes_read_nothing():
    """beta = 0: S^(I) = 0 whatever the statistics, and the state still accumulates them."""
    x = gd_inputs(1, 20, 2, 4, 3, 3)
    o, state = multi_step_gd(x["q"], x["k"], x["v"], torch.zeros_like(x["beta"]), output_final_state=True)
    assert_close(o, torch.zeros_like(o), "o")
    assert_close(state.R, torch.einsum("bshj,bshk->bhjk", x["k"], x["k"]), "state.R")


def test_default_scale_is_inverse_sqrt_key_dim():
    x = gd_inputs(1, 20, 2, 4, 3, 2, with_state=False)
    K = x["q"].shape[-1]
    args = (x["k"], x["v"], x["beta"])
    assert_close(multi_step_gd(x["q"], *args)[0], multi_step_gd(x["q"] * K**-0.5, *args, scale=1.0)[0], "o")


def test_heads_are_independent_memories():
    x = gd_inputs(2, 25, 3, 4, 3, 2, with_state=False)
    o, _ = multi_step_gd(**x)
    for h in range(3):
        o_h, _ = multi_step_gd(**{n: t[:, :, h:h + 1] for n, t in x.items()})
        assert_close(o[:, :, h:h + 1], o_h, f"head {h}")


def test_outputs_are_causal():
    x = gd_inputs(1, 40, 2, 4, 3, 2, with_state=False)
    o, _ = multi_step_gd(**x, chunk_size=16)
    later = dict(x, k=x["k"].clone(), v=x["v"].clone())
    later["k"][:, 25:] += 1.0
    later["v"][:, 25:] -= 3.0
    o2, _ = multi_step_gd(**later, chunk_size=16)
    assert_close(o2[:, :25], o[:, :25], "prefix")
    assert (o2[:, 25:] - o[:, 25:]).abs().max() > 1e-3


def test_state_is_the_sufficient_statistics():
    """GDStats after a call are R = sum k k^T and C = sum k v^T on top of the initial ones."""
    x = gd_inputs(2, 33, 2, 4, 3, 1)
    _, state = multi_step_gd(**x, output_final_state=True, chunk_size=16)
    R0, C0 = x["initial_state"]
    assert isinstance(state, GDStats)
    assert_close(state.R, R0 + torch.einsum("bshj,bshk->bhjk", x["k"], x["k"]), "R")
    assert_close(state.C, C0 + torch.einsum("bshk,bshv->bhkv", x["k"], x["v"]), "C")
