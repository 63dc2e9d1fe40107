"""reference == recurrent == chunk for momentum_delta_rule (Titans linear memory): outputs, both final state
fields and the gradients of every input (q, k, v, g, beta, log_mu, initial_state.S, initial_state.P), in float64
and float32."""

from functools import partial

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from helpers import assert_all_close, assert_forms_agree, random_log_gate, random_qkv, run_with_grads
from regmem.ops import MomentumState, momentum_delta_rule

SHAPES = [
    pytest.param((2, 37, 3, 16, 8, 16), id="B2-T37-H3-K16-V8-C16"),
    pytest.param((1, 64, 2, 8, 12, 32), id="B1-T64-H2-K8-V12-C32"),
    pytest.param((1, 1, 1, 4, 3, 64), id="B1-T1-H1-K4-V3-C64"),
]
DTYPES = [pytest.param(torch.float64, id="f64"), pytest.param(torch.float32, id="f32")]
STRENGTHS = [pytest.param(0.0, id="g0"), pytest.param(1.0, id="g1"), pytest.param(20.0, id="g20")]


def titans_inputs(B, T, H, K, V, *, strength=1.0, dtype=torch.float64, with_state=True, seed=0):
    """Unit-norm keys and beta in [0, 1] keep each step contractive along k (beta |k|^2 <= 2), so the memory stays O(1)
    and float32 comparisons measure the algorithm, not a blow-up; gates in [-strength, 0] with exact zeros."""
    q, k, v = random_qkv(B, T, H, K, V, dtype=dtype, seed=seed)
    gen = torch.Generator().manual_seed(seed + 1)
    inputs = {
        "q": q,
        "k": torch.nn.functional.normalize(k, dim=-1),
        "v": v,
        "g": random_log_gate((B, T, H), strength, dtype=dtype, seed=seed + 2),
        "beta": torch.rand(B, T, H, generator=gen, dtype=dtype),
        "log_mu": random_log_gate((B, T, H), strength, dtype=dtype, seed=seed + 3),
    }
    if with_state:
        S0 = torch.randn(B, H, K, V, generator=gen, dtype=dtype)
        inputs["initial_state"] = MomentumState(S0, 0.1 * torch.randn(B, H, K, V, generator=gen, dtype=dtype))
    return inputs


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("strength", STRENGTHS)
def test_momentum_delta_rule_forms_match_reference_with_grads(shape, dtype, strength):
    B, T, H, K, V, C = shape
    assert_forms_agree(momentum_delta_rule, titans_inputs(B, T, H, K, V, strength=strength, dtype=dtype), chunk_size=C)


@given(
    B=st.integers(1, 2),
    T=st.integers(1, 70),
    H=st.integers(1, 2),
    K=st.integers(1, 9),
    V=st.integers(1, 9),
    chunk_size=st.sampled_from([16, 32, 64]),
    strength=st.sampled_from([0.0, 0.05, 1.0, 20.0]),
    with_state=st.booleans(),
)
def test_chunk_matches_reference_property(B, T, H, K, V, chunk_size, strength, with_state):
    inputs = titans_inputs(B, T, H, K, V, strength=strength, with_state=with_state)
    expected = run_with_grads(partial(momentum_delta_rule, mode="reference"), inputs)
    actual = run_with_grads(partial(momentum_delta_rule, mode="chunk", chunk_size=chunk_size), inputs)
    assert_all_close(actual, expected, f"chunk C={chunk_size} vs reference")


@pytest.mark.parametrize("chunk_size", [16, 32, 64])
def test_chunk_size_does_not_change_the_result(chunk_size):
    inputs = titans_inputs(1, 100, 2, 6, 5, strength=0.5)
    expected = run_with_grads(partial(momentum_delta_rule, mode="chunk", chunk_size=8), inputs)
    actual = run_with_grads(partial(momentum_delta_rule, mode="chunk", chunk_size=chunk_size), inputs)
    assert_all_close(actual, expected, f"C={chunk_size} vs C=8")
