"""The update framework S_t = A_t S_{t-1} B_t + C_t of arXiv:2505.19488 (Sec. 2.2, eqs. 35-36, Table 2, App. B):
every row of Table 2 is one gradient step on its objective (the corrected ones where the paper errs), the boxed
general objective needs symmetric A and B, and the presets agree with regmem's own ops (whose state is S^T)."""

import pytest
import torch

from regmem.analysis.kernels import exp_feature_map
from regmem.analysis.update_framework import (
    MemoryStep,
    boxed_formula,
    deltanet_momentum_steps,
    deltanet_steps,
    gated_linear_attention_steps,
    gated_softmax_steps,
    general_objective,
    gla_objective,
    linear_attention_steps,
    normalized_softmax_objective,
    normalized_softmax_steps,
    paper_gated_softmax_objective,
    step_objective,
    unnormalized_softmax_steps,
    unroll,
)
from regmem.ops import delta_rule, gated_linear_attn, linear_attn

T, K, V = 7, 4, 3
TOL = 1e-10  # float64; the identities are exact up to rounding


def _data(seed=0, T=T, K=K, V=V):
    g = torch.Generator().manual_seed(seed)
    keys = torch.randn(T, K, generator=g, dtype=torch.float64) / K**0.5
    values = torch.randn(T, V, generator=g, dtype=torch.float64)
    retention = torch.rand(T, V, generator=g, dtype=torch.float64) * 0.8 + 0.1  # in (0.1, 0.9)
    rate = torch.rand(T, generator=g, dtype=torch.float64) * 0.8 + 0.1
    return keys, values, retention, rate


def _phi(x):
    """The explicit exp feature map of eq. 11, truncated after order 3, at temperature tau = sqrt(K) = 2."""
    return exp_feature_map(x, 3, tau=2.0)


def _presets():
    keys, values, retention, rate = _data()
    features = _phi(keys)  # [T, 1 + K + K^2 + K^3]
    return {
        "linear": linear_attention_steps(keys, values),
        "gla-diagonal": gated_linear_attention_steps(keys, values, retention),
        "gla-scalar": gated_linear_attention_steps(keys, values, rate),
        "deltanet-beta1": deltanet_steps(keys, values),
        "deltanet-beta": deltanet_steps(keys, values, rate),
        "deltanet-momentum": deltanet_momentum_steps(keys, values, rate),
        "softmax-no-norm": unnormalized_softmax_steps(features, values),
        "softmax-norm": normalized_softmax_steps(features, values),
        "gated-softmax": gated_softmax_steps(features, values, retention),
        "gated-softmax-scalar": gated_softmax_steps(features, values, rate),
    }


PRESETS = _presets()


def _descent_error(step: MemoryStep, objective, seed: int) -> float:
    """max |S - dL/dS - (A S B + C)| at a random S."""
    g = torch.Generator().manual_seed(seed)
    S = torch.randn(step.C.shape, generator=g, dtype=torch.float64).requires_grad_()
    (grad,) = torch.autograd.grad(objective(S), S)
    return (S.detach() - grad - step.apply(S.detach())).abs().max().item()


@pytest.mark.parametrize("name", list(PRESETS))
def test_every_row_is_one_gradient_step_on_its_objective(name):
    """Table 2 (App. B.2): S_{t-1} - dL_t/dS_{t-1} = A_t S_{t-1} B_t + C_t at every t, row objectives corrected."""
    for t, step in enumerate(PRESETS[name]):
        assert _descent_error(step, step.objective, seed=t) < TOL


@pytest.mark.parametrize("name", list(PRESETS))
def test_row_objective_has_the_gradient_of_the_boxed_objective(name):
    """Each row's A_t, B_t are symmetric, so eq. (36) applies and differs from the row's objective by a constant."""
    for t, step in enumerate(PRESETS[name]):
        S = torch.randn(step.C.shape, generator=torch.Generator().manual_seed(t), dtype=torch.float64)
        S.requires_grad_()
        (g_row,) = torch.autograd.grad(step.objective(S), S)
        (g_box,) = torch.autograd.grad(step_objective(step)(S), S)
        assert (g_row - g_box).abs().max().item() < TOL


def test_paper_gated_softmax_objective_is_tables_and_eq81s_printed_formula():
    """Table 2 row 7 and eq. 81 print 1/t (1/2 diag(1 - lambda_t) ||S||_F^2 - <S phi(k_t), v_t>), i.e.
    1/t (1/2 tr(S^T diag(1 - lambda_t) S) - v_t^T S phi(k_t)): GLA's objective divided by t, with no separate
    1/(2t) ||S||_F^2 term (so at lambda_t = 1 it is not eq. 80)."""
    keys, values, retention, _ = _data()
    features = _phi(keys)
    for t, (f, v, lam) in enumerate(zip(features, values, retention, strict=True), start=1):
        S = torch.randn(V, f.shape[0], generator=torch.Generator().manual_seed(t), dtype=torch.float64)
        printed = (0.5 * torch.trace(S.T @ torch.diag(1 - lam) @ S) - v @ S @ f) / t
        assert abs(paper_gated_softmax_objective(S, f, v, lam, t) - printed).item() < TOL
        assert abs(paper_gated_softmax_objective(S, f, v, lam, t) - gla_objective(S, f, v, lam) / t).item() < TOL
        ungated = paper_gated_softmax_objective(S, f, v, torch.ones_like(lam), t)
        assert abs(ungated + (v @ S @ f) / t).item() < TOL
        assert abs(ungated - normalized_softmax_objective(S, f, v, t)).item() > 0.1


def test_paper_gated_softmax_objective_is_not_a_gradient_step():
    """Erratum (Table 2 / eq. 81): a step on the printed FoX objective gives (t-1+lambda_t)/t S in place of the
    update's (t-1)/t lambda_t S, off by ((t-2)(1-lambda_t) + 1)/t S: wrong at every t. The corrected objective
    (previous tests) gives the update at every t."""
    keys, values, retention, _ = _data()
    steps = gated_softmax_steps(_phi(keys), values, retention, objective="paper")
    errors = []
    for t, step in enumerate(steps, start=1):
        S = torch.randn(step.C.shape, generator=torch.Generator().manual_seed(t), dtype=torch.float64)
        S.requires_grad_()
        (grad,) = torch.autograd.grad(step.objective(S), S)
        residual = S.detach() - grad - step.apply(S.detach())
        predicted = ((t - 2) * (1 - retention[t - 1]) + 1)[:, None] / t * S.detach()
        assert (residual - predicted).abs().max().item() < TOL
        errors.append(residual.abs().max().item())
    assert min(errors) > 0.05
    assert max(errors) > 0.5


def test_paper_momentum_objective_is_not_a_gradient_step():
    """Erratum (eq. 76): sum_i w_i <S k_t, v_t> in place of sum_i w_i <S k_i, v_i> misses the update for t >= 2."""
    keys, values, _, rate = _data()
    steps = deltanet_momentum_steps(keys, values, rate, objective="paper")
    errors = [_descent_error(step, step.objective, seed=t) for t, step in enumerate(steps)]
    assert errors[0] < TOL  # t = 1: the sum has one term, C_1 = v_1 k_1^T
    assert min(errors[1:]) > 0.05


def test_momentum_write_is_the_decayed_sum():
    """Table 2 row 4: C_t = eta_t C_{t-1} + v_t k_t^T = sum_{i<=t} (prod_{j=i+1}^t eta_j) v_i k_i^T."""
    keys, values, _, rate = _data()
    steps = deltanet_momentum_steps(keys, values, rate)
    for t, step in enumerate(steps):
        weights = torch.stack([rate[i + 1: t + 1].prod() for i in range(t + 1)])  # [t + 1]
        expected = torch.einsum("i,iv,ik->vk", weights, values[: t + 1], keys[: t + 1])
        assert (step.C - expected).abs().max().item() < TOL


def _symmetric(n, g):
    M = torch.randn(n, n, generator=g, dtype=torch.float64)
    return M + M.mT


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_boxed_objective_generates_the_update_for_symmetric_a_b(seed):
    """Eq. (36), App. B.1: for symmetric A, B the gradient of 1/2 tr(S^T S) - 1/2 tr(S^T A S B) - tr(C^T S) is
    S - A S B - C."""
    g = torch.Generator().manual_seed(seed)
    A, B, C = _symmetric(V, g), _symmetric(K, g), torch.randn(V, K, generator=g, dtype=torch.float64)
    step = MemoryStep(A, B, C, general_objective(A, B, C))
    assert _descent_error(step, step.objective, seed=seed) < TOL


def test_boxed_objective_fails_for_non_symmetric_a():
    """Eq. (63): the construction needs self-adjointness. For non-symmetric A the formula's gradient is
    S - (A S B + A^T S B^T)/2 - C, off the update by O(1); `general_objective` refuses such an A."""
    g = torch.Generator().manual_seed(0)
    A = torch.randn(V, V, generator=g, dtype=torch.float64)
    B, C = _symmetric(K, g), torch.randn(V, K, generator=g, dtype=torch.float64)
    step = MemoryStep(A, B, C, lambda S: boxed_formula(S, A, B, C))
    assert _descent_error(step, step.objective, seed=0) > 0.5
    with pytest.raises(ValueError, match="A must be symmetric"):
        general_objective(A, B, C)
    with pytest.raises(ValueError, match="B must be symmetric"):
        general_objective(torch.eye(V, dtype=torch.float64), torch.randn(K, K, generator=g, dtype=torch.float64), C)


def test_unroll_returns_every_state_from_the_initial_one():
    keys, values, _, _ = _data()
    steps = linear_attention_steps(keys, values)
    S0 = torch.randn(V, K, generator=torch.Generator().manual_seed(5), dtype=torch.float64)
    states = unroll(steps, S0)
    assert states.shape == (T + 1, V, K)
    assert torch.equal(states[0], S0)
    assert (states[-1] - S0 - values.mT @ keys).abs().max().item() < TOL  # eq. (1)


def test_bad_inputs_raise_value_error_naming_the_argument():
    keys, values, retention, rate = _data()
    with pytest.raises(ValueError, match="keys must be"):
        linear_attention_steps(keys, values[:-1])
    with pytest.raises(ValueError, match="retention must"):
        gated_linear_attention_steps(keys, values, retention[:, :2])
    with pytest.raises(ValueError, match="retention must lie"):
        gated_linear_attention_steps(keys, values, retention + 1.0)
    with pytest.raises(ValueError, match="beta must"):
        deltanet_steps(keys, values, -rate)
    with pytest.raises(ValueError, match="momentum must"):
        deltanet_momentum_steps(keys, values, rate[:-1])
    with pytest.raises(ValueError, match="objective must"):
        gated_softmax_steps(keys, values, rate, objective="printed")
    with pytest.raises(ValueError, match="steps must"):
        unroll([])
    with pytest.raises(ValueError, match="initial_state must"):
        unroll(linear_attention_steps(keys, values), torch.zeros(K, V, dtype=torch.float64))


# ---------------------------------------------------------------------------------------------------------------
# The presets against regmem's ops. The ops keep S_ops = S^T: [B, H, K, V]; their final state does not depend on q.


def _ops_tokens(keys, values):
    """[T, K], [T, V] -> q, k, v: [1, T, 1, K|V] (q arbitrary: the state does not read it)."""
    q = torch.randn(keys.shape, generator=torch.Generator().manual_seed(9), dtype=torch.float64)
    return q[None, :, None], keys[None, :, None], values[None, :, None]


def _final(steps):
    return unroll(steps)[-1]  # [V, K]


@pytest.mark.parametrize("mode", ["reference", "recurrent", "chunk"])
def test_linear_preset_is_linear_attn(mode):
    keys, values, _, _ = _data(T=19)
    q, k, v = _ops_tokens(keys, values)
    _, S_ops = linear_attn(q, k, v, mode=mode, chunk_size=8, output_final_state=True)  # [1, 1, K, V]
    assert (S_ops[0, 0].mT - _final(linear_attention_steps(keys, values))).abs().max().item() < TOL


@pytest.mark.parametrize("mode", ["reference", "recurrent"])
def test_scalar_gla_preset_is_gated_linear_attn(mode):
    """A scalar retention lambda_t is exp(g_t) of the op: the same on either dimension."""
    keys, values, _, rate = _data(T=19)
    q, k, v = _ops_tokens(keys, values)
    g = rate.log()[None, :, None]  # [1, T, 1], log retention
    _, S_ops = gated_linear_attn(q, k, v, g, mode=mode, output_final_state=True)
    assert (S_ops[0, 0].mT - _final(gated_linear_attention_steps(keys, values, rate))).abs().max().item() < TOL


@pytest.mark.parametrize("mode", ["reference", "recurrent"])
def test_value_gated_gla_preset_is_gated_linear_attn_with_keys_and_values_swapped(mode):
    """The paper's GLA gates the value dimension (A_t = diag(lambda_t)); the op's diagonal gate scales the K rows of
    S_ops. Feeding the op k' = v, v' = k makes its state S_ops' = sum v k^T = S (the paper's memory, [V, K]), whose
    rows are the value dimension, so g = log lambda: [1, T, 1, V] is the paper's gate."""
    keys, values, retention, _ = _data(T=19)
    q = torch.randn(values.shape, generator=torch.Generator().manual_seed(9), dtype=torch.float64)
    g = retention.log()[None, :, None]  # [1, T, 1, V]
    _, S_swapped = gated_linear_attn(q[None, :, None], values[None, :, None], keys[None, :, None], g, mode=mode,
                                     output_final_state=True)  # [1, 1, V, K]
    expected = _final(gated_linear_attention_steps(keys, values, retention))
    assert (S_swapped[0, 0] - expected).abs().max().item() < TOL


def test_key_gated_gla_op_is_the_framework_with_b_diagonal():
    """regmem's diagonal gate on the K rows of S_ops is B_t = diag(lambda_t) in the paper's convention (A_t = I):
    S_ops,t = B^T S_ops,t-1 A^T + C^T. B is symmetric, so eq. (36) still applies."""
    keys, values, _, _ = _data(T=19)
    lam = torch.rand(19, K, generator=torch.Generator().manual_seed(3), dtype=torch.float64) * 0.8 + 0.1
    steps = [MemoryStep(torch.eye(V, dtype=torch.float64), torch.diag(l), torch.outer(v, k),
                        general_objective(torch.eye(V, dtype=torch.float64), torch.diag(l), torch.outer(v, k)))
             for k, v, l in zip(keys, values, lam, strict=True)]
    q, k, v = _ops_tokens(keys, values)
    _, S_ops = gated_linear_attn(q, k, v, lam.log()[None, :, None], mode="reference", output_final_state=True)
    assert (S_ops[0, 0].mT - _final(steps)).abs().max().item() < TOL
    assert _descent_error(steps[-1], steps[-1].objective, seed=0) < TOL


@pytest.mark.parametrize("mode", ["reference", "recurrent", "chunk"])
@pytest.mark.parametrize("unit_beta", [True, False], ids=["beta1", "beta-t"])
def test_deltanet_preset_is_delta_rule(mode, unit_beta):
    """B_t = I - beta_t k_t k_t^T, C_t = beta_t v_t k_t^T (paper, S: [V, K]) is the op's
    S_ops,t = (I - beta_t k_t k_t^T) S_ops,t-1 + beta_t k_t v_t^T."""
    keys, values, _, rate = _data(T=19)
    beta = torch.ones_like(rate) if unit_beta else rate
    q, k, v = _ops_tokens(keys, values)
    _, S_ops = delta_rule(q, k, v, beta[None, :, None], mode=mode, chunk_size=8, output_final_state=True)
    steps = deltanet_steps(keys, values, None if unit_beta else rate)
    assert (S_ops[0, 0].mT - _final(steps)).abs().max().item() < TOL


def test_unnormalized_softmax_preset_is_feature_mapped_linear_attn():
    keys, values, _, _ = _data(T=19)
    q, k, v = _ops_tokens(keys, values)
    _, S_ops = linear_attn(q, k, v, feature_map=_phi, mode="recurrent", output_final_state=True)
    expected = _final(unnormalized_softmax_steps(_phi(keys), values))
    assert (S_ops[0, 0].mT - expected).abs().max().item() < TOL


def test_normalized_softmax_preset_is_the_op_numerator_over_t():
    """Eq. (79): the normalised memory is the op's numerator state sum phi(k) v^T divided by t; the op's key sum z
    over t is the running mean of phi(k)."""
    keys, values, _, _ = _data(T=19)
    q, k, v = _ops_tokens(keys, values)
    _, state = linear_attn(q, k, v, feature_map=_phi, normalize=True, mode="reference", output_final_state=True)
    features = _phi(keys)
    expected = _final(normalized_softmax_steps(features, values))
    assert (state.S[0, 0].mT / 19 - expected).abs().max().item() < TOL
    assert (state.z[0, 0] / 19 - features.mean(0)).abs().max().item() < TOL
