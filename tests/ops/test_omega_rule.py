"""omega_rule (Atlas, arXiv:2505.23735, Sec. 3; Nested Learning, arXiv:2512.24695, eq. 68): reference == recurrent
== chunk with gradients (fixed shapes and hypothesis), chunk size invariance, each step as one gradient step on the
windowed loss by autograd, window 1 as the decoupled gated delta rule, the window cache, and bad input naming the
argument."""

from functools import partial

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st

from helpers import DTYPES, assert_all_close, assert_forms_agree, random_log_gate, random_qkv, run_with_grads
from regmem.ops import OmegaState, decoupled_gated_delta_rule, omega_rule

SHAPES = [
    pytest.param((2, 37, 3, 16, 8, 3, 16), id="B2-T37-H3-K16-V8-c3-C16"),
    pytest.param((1, 64, 2, 8, 12, 4, 32), id="B1-T64-H2-K8-V12-c4-C32"),
    pytest.param((1, 20, 1, 4, 3, 1, 8), id="B1-T20-H1-K4-V3-c1-C8"),
    pytest.param((1, 1, 1, 4, 3, 2, 64), id="B1-T1-H1-K4-V3-c2-C64"),
]
STRENGTHS = [pytest.param(0.0, id="g0"), pytest.param(1.0, id="g1"), pytest.param(20.0, id="g20")]


def omega_inputs(B, T, H, K, V, window, *, strength=1.0, dtype=torch.float64, with_state=True, seed=0):
    """Unit keys, weights in [0, 1] and beta in [0, 1 / window] keep each step contractive."""
    q, k, v = random_qkv(B, T, H, K, V, dtype=dtype, seed=seed)
    gen = torch.Generator().manual_seed(seed + 1)
    inputs = {"q": q, "k": F.normalize(k, dim=-1), "v": v,
              "g": random_log_gate((B, T, H), strength, dtype=dtype, seed=seed + 2),
              "beta": torch.rand(B, T, H, generator=gen, dtype=dtype) / window,
              "gamma": torch.rand(B, T, H, generator=gen, dtype=dtype), "window": window}
    if with_state and window > 1:  # with window 1 the cache is empty and receives no gradient
        c = window - 1
        inputs["initial_state"] = OmegaState(
            torch.randn(B, H, K, V, generator=gen, dtype=dtype),
            F.normalize(torch.randn(B, H, c, K, generator=gen, dtype=dtype), dim=-1),
            torch.randn(B, H, c, V, generator=gen, dtype=dtype), torch.rand(B, H, c, generator=gen, dtype=dtype))
    return inputs


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("strength", STRENGTHS)
def test_omega_forms_match_reference_with_grads(shape, dtype, strength):
    B, T, H, K, V, c, C = shape
    assert_forms_agree(omega_rule, omega_inputs(B, T, H, K, V, c, strength=strength, dtype=dtype), chunk_size=C)


@settings(max_examples=40, deadline=None)
@given(B=st.integers(1, 2), T=st.integers(1, 50), H=st.integers(1, 2), K=st.integers(1, 7), V=st.integers(1, 7),
       window=st.integers(1, 5), chunk_size=st.sampled_from([4, 16, 64]),
       strength=st.sampled_from([0.0, 0.05, 1.0, 20.0]), with_state=st.booleans())
def test_chunk_matches_reference_property(B, T, H, K, V, window, chunk_size, strength, with_state):
    inputs = omega_inputs(B, T, H, K, V, window, strength=strength, with_state=with_state)
    expected = run_with_grads(partial(omega_rule, mode="reference"), inputs)
    actual = run_with_grads(partial(omega_rule, mode="chunk", chunk_size=chunk_size), inputs)
    assert_all_close(actual, expected, f"chunk C={chunk_size} vs reference")


@pytest.mark.parametrize("chunk_size", [16, 32, 64])
def test_chunk_size_does_not_change_the_result(chunk_size):
    inputs = omega_inputs(1, 100, 2, 6, 5, 3, strength=0.5)
    expected = run_with_grads(partial(omega_rule, mode="chunk", chunk_size=8), inputs)
    actual = run_with_grads(partial(omega_rule, mode="chunk", chunk_size=chunk_size), inputs)
    assert_all_close(actual, expected, f"C={chunk_size} vs C=8")


@pytest.mark.parametrize("window", [1, 3, 20])
def test_each_step_is_one_gradient_step_on_the_windowed_loss(window):
    """M_t = alpha_t M_{t-1} - eta_t grad sum_{i=t-c+1}^{t} gamma_i 1/2 ||M k_i - v_i||^2 at M_{t-1}, from a zero
    state (the window of token t < c holds the t tokens seen so far); paper layout M = S^T."""
    T = 8
    inputs = omega_inputs(1, T, 1, 4, 3, window, with_state=False)
    q, k, v, g, beta, gamma = (inputs[n] for n in ("q", "k", "v", "g", "beta", "gamma"))
    M = torch.zeros(3, 4, dtype=torch.float64)
    for t in range(T):
        M_leaf = M.clone().requires_grad_()
        loss = sum(gamma[0, i, 0] * 0.5 * (M_leaf @ k[0, i, 0] - v[0, i, 0]).pow(2).sum()
                   for i in range(max(0, t - window + 1), t + 1))
        (grad,) = torch.autograd.grad(loss, M_leaf)
        M = torch.exp(g[0, t, 0]) * M - beta[0, t, 0] * grad
        _, S_t = omega_rule(*(x[:, : t + 1] for x in (q, k, v, g, beta, gamma)), window=window, mode="chunk",
                            chunk_size=4, output_final_state=True)
        torch.testing.assert_close(S_t.S[0, 0], M.T, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("mode", ["reference", "recurrent", "chunk"])
def test_window_one_is_the_decoupled_gated_delta_rule(mode):
    inputs = omega_inputs(2, 29, 2, 6, 4, 1, strength=0.5)
    S0 = torch.randn(2, 2, 6, 4, dtype=torch.float64)
    c0 = OmegaState(S0, *(torch.zeros(2, 2, 0, *d, dtype=torch.float64) for d in ((6,), (4,), ())))
    o, S = omega_rule(**{**inputs, "initial_state": c0}, mode=mode, chunk_size=8, output_final_state=True)
    lam = 1 - torch.exp(inputs["g"])
    o_delta, S_delta = decoupled_gated_delta_rule(inputs["q"], inputs["k"], inputs["v"],
                                                  inputs["beta"] * inputs["gamma"], lam, initial_state=S0,
                                                  mode=mode, chunk_size=8, output_final_state=True)
    torch.testing.assert_close(o, o_delta, rtol=1e-10, atol=1e-10)
    torch.testing.assert_close(S.S, S_delta, rtol=1e-10, atol=1e-10)


def test_a_longer_window_keeps_fitting_older_pairs():
    """With window c, no decay and small steps on the same pairs repeated, the memory fits all c recent pairs,
    where the delta rule (window 1) fits mostly the last: the windowed loss is lower."""
    K, V, c = 8, 3, 4
    gen = torch.Generator().manual_seed(0)  # the global RNG made the result depend on the tests run before
    k = F.normalize(torch.randn(1, c, 1, K, dtype=torch.float64, generator=gen), dim=-1).repeat(1, 50, 1, 1)
    v = torch.randn(1, c, 1, V, dtype=torch.float64, generator=gen).repeat(1, 50, 1, 1)  # a cycle of c pairs
    zeros, steps = torch.zeros(1, 50 * c, 1, dtype=torch.float64), torch.full((1, 50 * c, 1), 0.9 / c)
    losses = {}
    for window in (1, c):
        _, S = omega_rule(k, k, v, zeros, steps.double(), torch.ones_like(zeros), window=window,
                          output_final_state=True)
        residual = torch.einsum("tk,kv->tv", k[0, :c, 0], S.S[0, 0]) - v[0, :c, 0]
        losses[window] = residual.pow(2).sum().item()
    assert losses[c] < 1e-2 * losses[1]  # seeds 0-4: 230x to 8e7x lower


def test_final_state_caches_the_last_window_minus_one_tokens():
    inputs = omega_inputs(2, 9, 2, 5, 4, 4, with_state=False)
    _, state = omega_rule(**inputs, output_final_state=True)
    torch.testing.assert_close(state.k, inputs["k"][:, -3:].transpose(1, 2))
    torch.testing.assert_close(state.v, inputs["v"][:, -3:].transpose(1, 2))
    torch.testing.assert_close(state.gamma, inputs["gamma"][:, -3:].transpose(1, 2))


B, T, H, K, V = 2, 10, 3, 4, 5
BAD = {
    "q rank 3": ({"q": torch.randn(B, T, H)}, "q"),
    "g positive": ({"g": torch.rand(B, T, H)}, "g"),
    "beta negative": ({"beta": -torch.rand(B, T, H)}, "beta"),
    "gamma negative": ({"gamma": -torch.rand(B, T, H)}, "gamma"),
    "gamma wrong shape": ({"gamma": torch.rand(B, T, H, 1)}, "gamma"),
    "window zero": ({"window": 0}, "window"),
    "window a float": ({"window": 2.0}, "window"),
    "initial_state a tensor": ({"initial_state": torch.zeros(B, H, K, V)}, "initial_state"),
    "initial_state.k wrong window": ({"initial_state": OmegaState(torch.zeros(B, H, K, V), torch.zeros(B, H, 2, K),
                                                                  torch.zeros(B, H, 1, V), torch.zeros(B, H, 1))},
                                     r"initial_state.k must have shape \[N, H, window - 1, K\]"),
    "cu_seqlens with B > 1": ({"cu_seqlens": torch.tensor([0, 4, T])}, "cu_seqlens"),
}


@pytest.mark.parametrize("case", list(BAD))
def test_bad_input_raises_value_error_naming_the_argument(case):
    override, name = BAD[case]
    args = {"q": torch.randn(B, T, H, K), "k": torch.randn(B, T, H, K), "v": torch.randn(B, T, H, V),
            "g": -torch.rand(B, T, H), "beta": torch.rand(B, T, H), "gamma": torch.rand(B, T, H), "window": 2,
            **override}
    positional = [args.pop(n) for n in ("q", "k", "v", "g", "beta", "gamma")]
    with pytest.raises(ValueError, match=name):
        omega_rule(*positional, **args)
