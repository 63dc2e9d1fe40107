"""oja_rule (Nested Learning, arXiv:2512.24695, Sec. 5, eqs. 66-67): reference == recurrent == chunk with gradients
(fixed shapes and hypothesis), chunk size invariance, eq. (66) as one gradient step on eq. (67) by autograd, the
transposed decoupled gated delta rule, and bad input naming the argument."""

from functools import partial

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given
from hypothesis import strategies as st

from helpers import DTYPES, assert_all_close, assert_forms_agree, random_log_gate, random_qkv, run_with_grads
from regmem.ops import decoupled_gated_delta_rule, oja_rule

SHAPES = [
    pytest.param((2, 37, 3, 16, 8, 16), id="B2-T37-H3-K16-V8-C16"),
    pytest.param((1, 64, 2, 8, 12, 32), id="B1-T64-H2-K8-V12-C32"),
    pytest.param((1, 1, 1, 4, 3, 64), id="B1-T1-H1-K4-V3-C64"),
]
STRENGTHS = [pytest.param(0.0, id="g0"), pytest.param(1.0, id="g1"), pytest.param(20.0, id="g20")]


def oja_inputs(B, T, H, K, V, *, strength=1.0, dtype=torch.float64, with_state=True, seed=0):
    """Unit-norm values and beta in [0, 1] keep the value-side transition contractive; gates in [-strength, 0]."""
    q, k, v = random_qkv(B, T, H, K, V, dtype=dtype, seed=seed)
    gen = torch.Generator().manual_seed(seed + 1)
    inputs = {"q": q, "k": k, "v": F.normalize(v, dim=-1),
              "g": random_log_gate((B, T, H), strength, dtype=dtype, seed=seed + 2),
              "beta": torch.rand(B, T, H, generator=gen, dtype=dtype)}
    if with_state:
        inputs["initial_state"] = torch.randn(B, H, K, V, generator=gen, dtype=dtype)
    return inputs


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("strength", STRENGTHS)
def test_oja_forms_match_reference_with_grads(shape, dtype, strength):
    B, T, H, K, V, C = shape
    assert_forms_agree(oja_rule, oja_inputs(B, T, H, K, V, strength=strength, dtype=dtype), chunk_size=C)


@given(B=st.integers(1, 2), T=st.integers(1, 70), H=st.integers(1, 2), K=st.integers(1, 9), V=st.integers(1, 9),
       chunk_size=st.sampled_from([8, 16, 64]), strength=st.sampled_from([0.0, 0.05, 1.0, 20.0]),
       with_state=st.booleans())
def test_chunk_matches_reference_property(B, T, H, K, V, chunk_size, strength, with_state):
    inputs = oja_inputs(B, T, H, K, V, strength=strength, with_state=with_state)
    expected = run_with_grads(partial(oja_rule, mode="reference"), inputs)
    actual = run_with_grads(partial(oja_rule, mode="chunk", chunk_size=chunk_size), inputs)
    assert_all_close(actual, expected, f"chunk C={chunk_size} vs reference")


@pytest.mark.parametrize("chunk_size", [16, 32, 64])
def test_chunk_size_does_not_change_the_result(chunk_size):
    inputs = oja_inputs(1, 100, 2, 6, 5, strength=0.5)
    expected = run_with_grads(partial(oja_rule, mode="chunk", chunk_size=8), inputs)
    actual = run_with_grads(partial(oja_rule, mode="chunk", chunk_size=chunk_size), inputs)
    assert_all_close(actual, expected, f"C={chunk_size} vs C=8")


def test_each_step_is_one_gradient_step_on_eq_67_after_the_decay():
    """M_t = alpha_t M_{t-1} - eta_t grad L(M_{t-1}), L(M) = -<M k, v> + 1/2 ||M^T v||^2 (paper layout M = S^T)."""
    inputs = oja_inputs(1, 6, 1, 4, 3, strength=1.0)
    q, k, v, g, beta, S = (inputs[n] for n in ("q", "k", "v", "g", "beta", "initial_state"))
    M = S[0, 0].T.clone()  # [V, K]
    for t in range(6):
        k_t, v_t = k[0, t, 0], v[0, t, 0]
        M_leaf = M.clone().requires_grad_()
        loss = -(M_leaf @ k_t) @ v_t + 0.5 * (M_leaf.T @ v_t).pow(2).sum()
        (grad,) = torch.autograd.grad(loss, M_leaf)
        M = torch.exp(g[0, t, 0]) * M - beta[0, t, 0] * grad
        _, S_t = oja_rule(*(x[:, : t + 1] for x in (q, k, v, g, beta)), initial_state=S, mode="recurrent",
                          output_final_state=True)
        torch.testing.assert_close(S_t[0, 0], M.T, rtol=1e-12, atol=1e-12)


def test_zero_step_only_decays_the_state():
    inputs = oja_inputs(2, 9, 2, 5, 4)
    inputs["beta"] = torch.zeros_like(inputs["beta"])
    _, S = oja_rule(**inputs, output_final_state=True)
    decay = torch.exp(inputs["g"].sum(dim=1))[..., None, None]  # [B, H, 1, 1]
    torch.testing.assert_close(S, decay * inputs["initial_state"], rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("mode", ["reference", "chunk"])
def test_state_is_the_transposed_decoupled_delta_rule_with_keys_and_values_exchanged(mode):
    """Oja's M_t = alpha M_{t-1} + beta v (k - M^T v)^T is the decoupled gated delta rule on M with key v, value k."""
    inputs = oja_inputs(2, 29, 2, 6, 4, strength=0.5)
    _, S = oja_rule(**inputs, mode=mode, chunk_size=8, output_final_state=True)
    lam = 1 - torch.exp(inputs["g"])
    q_v = torch.randn(2, 29, 2, 4, dtype=torch.float64)  # a query in value space; only the state is compared
    _, M = decoupled_gated_delta_rule(q_v, inputs["v"], inputs["k"], inputs["beta"], lam,
                                      initial_state=inputs["initial_state"].transpose(-1, -2), mode=mode,
                                      chunk_size=8, output_final_state=True)
    torch.testing.assert_close(S, M.transpose(-1, -2), rtol=1e-10, atol=1e-10)


def test_unit_step_on_unit_value_erases_the_value_direction():
    """Oja's rule with beta |v|^2 = 1 and no decay sets S v = k: the memory maps the value back to its key."""
    inputs = oja_inputs(1, 1, 1, 5, 4)
    inputs["beta"] = torch.ones_like(inputs["beta"])
    inputs["g"] = torch.zeros_like(inputs["g"])
    _, S = oja_rule(**inputs, output_final_state=True)
    torch.testing.assert_close(S[0, 0] @ inputs["v"][0, 0, 0], inputs["k"][0, 0, 0], rtol=1e-12, atol=1e-12)


B, T, H, K, V = 2, 10, 3, 4, 5
BAD = {
    "q rank 3": ({"q": torch.randn(B, T, H)}, "q"),
    "v mismatched T": ({"v": torch.randn(B, T + 1, H, V)}, "v"),
    "g diagonal": ({"g": -torch.rand(B, T, H, K)}, "g"),
    "g positive": ({"g": torch.rand(B, T, H)}, "g"),
    "beta negative": ({"beta": -torch.rand(B, T, H)}, "beta"),
    "beta integer": ({"beta": torch.ones(B, T, H, dtype=torch.int64)}, "beta"),
    "initial_state wrong shape": ({"initial_state": torch.zeros(B, H, V, K)}, "initial_state"),
    "cu_seqlens with B > 1": ({"cu_seqlens": torch.tensor([0, 4, T])}, "cu_seqlens"),
    "scale a tensor": ({"scale": torch.tensor(1.0)}, "scale"),
}


@pytest.mark.parametrize("case", list(BAD))
def test_bad_input_raises_value_error_naming_the_argument(case):
    override, name = BAD[case]
    args = {"q": torch.randn(B, T, H, K), "k": torch.randn(B, T, H, K), "v": torch.randn(B, T, H, V),
            "g": -torch.rand(B, T, H), "beta": torch.rand(B, T, H), **override}
    with pytest.raises(ValueError, match=name):
        positional = [args.pop(n) for n in ("q", "k", "v", "g", "beta")]
        oja_rule(*positional, **args)
