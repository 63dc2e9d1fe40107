"""Special cases of momentum_delta_rule that reduce to known rules (arXiv:2501.12352, eqs. 29, 37, 41), and its reading
as SGD with momentum and decoupled weight decay on the per-token regression loss."""

import pytest
import torch
from test_momentum_delta_forms import titans_inputs

from helpers import assert_close
from regmem.ops import MomentumState, momentum_delta_rule

MODES = ["reference", "recurrent", "chunk"]
B, T, H, K, V = 2, 45, 2, 6, 4


def _gated_delta_by_hand(q, k, v, g, beta, S0):
    """Decoupled gated delta rule (suggested after eq. (41): eq. (37) with lambda decoupled), written out:
    S_t = exp(g_t) S_{t-1} + beta_t k_t (v_t - S_{t-1}^T k_t)^T, o_t = S_t^T q_t (q unscaled here)."""
    S, outputs = S0.clone(), []
    for t in range(q.shape[1]):
        error = v[:, t] - torch.einsum("bhk,bhkv->bhv", k[:, t], S)
        S = torch.exp(g[:, t])[..., None, None] * S + beta[:, t][..., None, None] * torch.einsum(
            "bhk,bhv->bhkv", k[:, t], error
        )
        outputs.append(torch.einsum("bhk,bhkv->bhv", q[:, t], S))
    return torch.stack(outputs, dim=1), S


@pytest.mark.parametrize("mode", MODES)
def test_without_momentum_is_the_decoupled_gated_delta_rule(mode):
    """eta -> 0 (log_mu = -50, eta ~ 2e-22): P_t = beta_t k_t e_t^T, so S_t = gamma_t S_{t-1} + beta_t k_t e_t^T."""
    x = titans_inputs(B, T, H, K, V, strength=1.0)
    log_mu = torch.full((B, T, H), -50.0, dtype=torch.float64)
    S0 = x["initial_state"].S
    o, state = momentum_delta_rule(x["q"], x["k"], x["v"], x["g"], x["beta"], log_mu, scale=1.0, mode=mode,
                                   chunk_size=16, initial_state=MomentumState(S0, torch.zeros_like(S0)),
                                   output_final_state=True)
    o_hand, S_hand = _gated_delta_by_hand(x["q"], x["k"], x["v"], x["g"], x["beta"], S0)
    assert_close(o, o_hand, "o")
    assert_close(state.S, S_hand, "state.S")


@pytest.mark.parametrize("mode", MODES)
def test_without_momentum_or_decay_is_the_delta_rule(mode):
    """eta -> 0 and alpha = 0 (g = 0): S_t = S_{t-1} + beta_t k_t (v_t - S_{t-1}^T k_t)^T (eq. 29)."""
    x = titans_inputs(B, T, H, K, V)
    g = torch.zeros(B, T, H, dtype=torch.float64)
    log_mu = torch.full((B, T, H), -50.0, dtype=torch.float64)
    o, state = momentum_delta_rule(x["q"], x["k"], x["v"], g, x["beta"], log_mu, scale=1.0, mode=mode,
                                   chunk_size=16, output_final_state=True)
    o_hand, S_hand = _gated_delta_by_hand(x["q"], x["k"], x["v"], g, x["beta"], torch.zeros(B, H, K, V).double())
    assert_close(o, o_hand, "o")
    assert_close(state.S, S_hand, "state.S")


@pytest.mark.parametrize("mode", MODES)
def test_zero_step_size_leaves_the_memory_decaying_only(mode):
    """beta = 0 and P_0 = 0: P stays 0 and S_t = prod_{j<=t} exp(g_j) S_0."""
    x = titans_inputs(B, T, H, K, V, strength=0.3)
    S0 = x["initial_state"].S
    o, state = momentum_delta_rule(x["q"], x["k"], x["v"], x["g"], torch.zeros(B, T, H, dtype=torch.float64),
                                   x["log_mu"], scale=1.0, mode=mode, chunk_size=16, output_final_state=True,
                                   initial_state=MomentumState(S0, torch.zeros_like(S0)))
    retained = torch.exp(x["g"].cumsum(dim=1))  # [B, T, H]
    assert_close(o, retained.unsqueeze(-1) * torch.einsum("bthk,bhkv->bthv", x["q"], S0), "o")
    assert_close(state.S, retained[:, -1, :, None, None] * S0, "state.S")
    assert_close(state.P, torch.zeros_like(S0), "state.P")


@pytest.mark.parametrize("mode", MODES)
def test_zero_step_size_spends_the_initial_momentum(mode):
    """beta = 0, g = 0: P_t = prod_{j<=t} eta_j P_0 and S_T = S_0 + sum_t P_t (the heavy ball coasting)."""
    x = titans_inputs(1, T, H, K, V, strength=0.3)
    g, beta = torch.zeros(1, T, H, dtype=torch.float64), torch.zeros(1, T, H, dtype=torch.float64)
    _, state = momentum_delta_rule(x["q"], x["k"], x["v"], g, beta, x["log_mu"], mode=mode, chunk_size=16,
                                   initial_state=x["initial_state"], output_final_state=True)
    momentum = torch.exp(x["log_mu"].cumsum(dim=1))  # [1, T, H], prod_{j<=t} eta_j
    S0, P0 = x["initial_state"]
    assert_close(state.P, momentum[:, -1, :, None, None] * P0, "state.P")
    assert_close(state.S, S0 + momentum.sum(dim=1)[..., None, None] * P0, "state.S")


@pytest.mark.parametrize("mode", MODES)
def test_is_sgd_with_momentum_and_decoupled_weight_decay(mode):
    """Titans (arXiv:2501.00663, Sec. 3.1) with a constant step size theta is torch.optim.SGD(momentum=eta_t) on
    l_t(M) = 1/2 ||M k_t - v_t||^2, one step per token, with the memory decayed by 1 - alpha_t before each step
    (decoupled weight decay); y_t = M_t q_t."""
    x = titans_inputs(1, 30, 1, K, V, strength=1.0)
    theta = 0.7
    beta = torch.full((1, 30, 1), theta, dtype=torch.float64)
    o, _ = momentum_delta_rule(x["q"], x["k"], x["v"], x["g"], beta, x["log_mu"], scale=1.0, mode=mode,
                               chunk_size=16)
    M = torch.zeros(V, K, dtype=torch.float64, requires_grad=True)
    opt = torch.optim.SGD([M], lr=theta, momentum=0.5, dampening=0.0)
    expected = []
    for t in range(30):
        k_t, v_t, q_t = x["k"][0, t, 0], x["v"][0, t, 0], x["q"][0, t, 0]
        opt.zero_grad()
        (0.5 * (M @ k_t - v_t).pow(2).sum()).backward()  # the gradient at M_{t-1}
        opt.param_groups[0]["momentum"] = torch.exp(x["log_mu"][0, t, 0]).item()
        with torch.no_grad():
            M.mul_(torch.exp(x["g"][0, t, 0]))  # M <- (1 - alpha_t) M
        opt.step()  # buf = eta_t buf + grad; M <- M - theta buf
        expected.append((M @ q_t).detach())
    assert_close(o[0, :, 0], torch.stack(expected), "o vs torch.optim.SGD")


def test_default_scale_is_inverse_sqrt_key_dim():
    x = titans_inputs(1, 20, 2, K, V)
    args = (x["k"], x["v"], x["g"], x["beta"], x["log_mu"])
    assert_close(momentum_delta_rule(x["q"], *args)[0], momentum_delta_rule(x["q"] * K**-0.5, *args, scale=1.0)[0],
                 "o")


def test_heads_are_independent_memories():
    x = titans_inputs(2, 25, 3, K, V, with_state=False)
    o, _ = momentum_delta_rule(**x)
    for h in range(3):
        o_h, _ = momentum_delta_rule(**{n: t[:, :, h:h + 1] for n, t in x.items()})
        assert_close(o[:, :, h:h + 1], o_h, f"head {h}")


def test_outputs_are_causal():
    x = titans_inputs(1, 40, 2, K, V, with_state=False)
    o, _ = momentum_delta_rule(**x, chunk_size=16)
    later = dict(x, k=x["k"].clone(), v=x["v"].clone(), beta=x["beta"].clone())
    later["v"][:, 25:] -= 3.0
    later["beta"][:, 25:] = 0.9
    o2, _ = momentum_delta_rule(**later, chunk_size=16)
    assert_close(o2[:, :25], o[:, :25], "prefix")
    assert (o2[:, 25:] - o[:, 25:]).abs().max() > 1e-3


@pytest.mark.parametrize("mode", MODES)
def test_masked_tokens_leave_state_and_outputs_of_real_tokens_unchanged(mode):
    """token_mask False with g = log_mu = beta = 0: the token leaves (S, P) unchanged even with momentum P != 0,
    so a run with tokens masked out in the middle and at the end equals the run on the real tokens alone."""
    x = titans_inputs(2, 21, H, K, V, strength=0.5)
    real = torch.ones(2, 21, dtype=torch.bool)
    real[0, 5:9] = False
    real[:, 17:] = False
    pad = {n: x[n].masked_fill(~real.unsqueeze(-1), 0.0) for n in ("g", "beta", "log_mu")}
    o, state = momentum_delta_rule(**(x | pad), mode=mode, chunk_size=8, token_mask=real, output_final_state=True)
    for b in range(2):
        alone = {n: (t[b:b + 1, real[b]] if n != "initial_state" else MomentumState(t.S[b:b + 1], t.P[b:b + 1]))
                 for n, t in x.items()}
        o_b, state_b = momentum_delta_rule(**alone, mode=mode, chunk_size=8, output_final_state=True)
        assert_close(o[b:b + 1, real[b]], o_b, f"row {b}: o")
        assert_close(state.S[b:b + 1], state_b.S, f"row {b}: S")
        assert_close(state.P[b:b + 1], state_b.P, f"row {b}: P")
    _, unmasked = momentum_delta_rule(**(x | pad), mode=mode, chunk_size=8, output_final_state=True)
    assert (unmasked.S - state.S).abs().max() > 1e-3, "without the mask padding adds the momentum to S"
