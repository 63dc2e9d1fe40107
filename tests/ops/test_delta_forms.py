"""reference == recurrent == chunk for every op of the delta-rule family: outputs, final state and the gradients
of every input (gates, step sizes, parameterisation arguments and initial_state included), float64 and float32,
with L2-normalised keys and beta in [0, 2] (negative eigenvalues included)."""

from functools import partial

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from helpers import assert_all_close, assert_forms_agree, random_log_gate, random_qkv, run_with_grads
from regmem.ops import (
    decoupled_gated_delta_rule,
    delta_product,
    delta_rule,
    delta_rule_multistep,
    gated_delta_rule,
    leaky_lms,
    longhorn,
    nlms,
)

SHAPES = [
    pytest.param((2, 37, 3, 16, 8, 16), id="B2-T37-H3-K16-V8-C16"),
    pytest.param((1, 64, 2, 8, 12, 32), id="B1-T64-H2-K8-V12-C32"),
    pytest.param((1, 1, 1, 4, 3, 64), id="B1-T1-H1-K4-V3-C64"),
]
DTYPES = [pytest.param(torch.float64, id="f64"), pytest.param(torch.float32, id="f32")]
STRENGTHS = [pytest.param(0.0, id="g0"), pytest.param(1.0, id="g1"), pytest.param(20.0, id="g20")]


def _inputs(B, T, H, K, V, *, dtype=torch.float64, gate=None, strength=1.0, with_state=True, seed=0):
    """L2-normalised keys, beta uniform in [0, 2], gates in [-strength, 0] with exact zeros."""
    q, k, v = random_qkv(B, T, H, K, V, dtype=dtype, seed=seed)
    gen = torch.Generator().manual_seed(seed + 1)
    inputs = {"q": q, "k": torch.nn.functional.normalize(k, dim=-1), "v": v}
    if gate == "scalar":
        inputs["g"] = random_log_gate((B, T, H), strength, dtype=dtype, seed=seed)
    elif gate == "diagonal":
        inputs["g"] = random_log_gate((B, T, H, K), strength, dtype=dtype, seed=seed)
    inputs["beta"] = 2 * torch.rand(B, T, H, generator=gen, dtype=dtype)
    if with_state:
        inputs["initial_state"] = torch.randn(B, H, K, V, generator=gen, dtype=dtype)
    return inputs


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", SHAPES)
def test_delta_rule_forms_match_reference_with_grads(shape, dtype):
    *dims, C = shape
    assert_forms_agree(delta_rule, _inputs(*dims, dtype=dtype), chunk_size=C)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("gate", ["scalar", "diagonal"])
@pytest.mark.parametrize("strength", STRENGTHS)
def test_gated_delta_rule_forms_match_reference_with_grads(shape, dtype, gate, strength):
    *dims, C = shape
    assert_forms_agree(gated_delta_rule, _inputs(*dims, dtype=dtype, gate=gate, strength=strength), chunk_size=C)


def _parameterised(name, dtype):
    """(op, inputs) for each parameterisation and for DeltaProduct, with their own arguments as inputs."""
    B, T, H, K, V = 2, 29, 2, 8, 5
    inputs = _inputs(B, T, H, K, V, dtype=dtype)
    beta = inputs.pop("beta")
    gen = torch.Generator().manual_seed(7)
    if name == "longhorn":
        return longhorn, {**inputs, "delta": 3 * torch.rand(B, T, H, generator=gen, dtype=dtype)}
    if name == "nlms":
        inputs["k"] = inputs["k"] * (0.5 + torch.rand(B, T, H, 1, generator=gen, dtype=dtype))  # ||k|| != 1
        return nlms, inputs
    if name == "leaky_lms":
        return leaky_lms, {**inputs, "beta": beta, "lam": 0.45 * torch.rand(B, T, H, generator=gen, dtype=dtype)}
    if name == "decoupled":
        lam = 0.9 * torch.rand(B, T, H, generator=gen, dtype=dtype)
        return decoupled_gated_delta_rule, {**inputs, "beta": beta, "lam": lam}
    if name == "multistep":
        return delta_rule_multistep, {**inputs, "betas": 2 * torch.rand(B, T, H, 3, generator=gen, dtype=dtype)}
    n_h = 3  # delta_product, gated
    k = torch.nn.functional.normalize(torch.randn(B, T, H, n_h, K, generator=gen, dtype=dtype), dim=-1)
    return delta_product, {
        **inputs, "k": k, "v": torch.randn(B, T, H, n_h, V, generator=gen, dtype=dtype),
        "beta": 2 * torch.rand(B, T, H, n_h, generator=gen, dtype=dtype),
        "g": random_log_gate((B, T, H), 1.0, dtype=dtype),
    }


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name", ["longhorn", "nlms", "leaky_lms", "decoupled", "multistep", "delta_product"])
def test_parameterisation_forms_match_reference_with_grads(name, dtype):
    op, inputs = _parameterised(name, dtype)
    assert_forms_agree(op, inputs, chunk_size=16)


@given(
    B=st.integers(1, 2),
    T=st.integers(1, 70),
    H=st.integers(1, 2),
    K=st.integers(1, 9),
    V=st.integers(1, 9),
    chunk_size=st.sampled_from([16, 32, 64]),
    gate=st.sampled_from([None, "scalar", "diagonal"]),
    strength=st.sampled_from([0.0, 0.05, 1.0, 20.0]),
    with_state=st.booleans(),
)
def test_chunk_matches_reference_property(B, T, H, K, V, chunk_size, gate, strength, with_state):
    inputs = _inputs(B, T, H, K, V, gate=gate, strength=strength, with_state=with_state)
    op = gated_delta_rule if gate else delta_rule
    expected = run_with_grads(partial(op, mode="reference"), inputs)
    actual = run_with_grads(partial(op, mode="chunk", chunk_size=chunk_size), inputs)
    assert_all_close(actual, expected, f"chunk C={chunk_size} vs reference")


@pytest.mark.parametrize("gate", [None, "scalar", "diagonal"])
def test_chunk_size_does_not_change_the_result(gate):
    inputs = _inputs(2, 100, 2, 8, 6, gate=gate, strength=2.0)
    op = gated_delta_rule if gate else delta_rule
    expected = run_with_grads(partial(op, mode="chunk", chunk_size=64), inputs)
    for C in (1, 2, 8, 16, 32, 128):
        assert_all_close(run_with_grads(partial(op, mode="chunk", chunk_size=C), inputs), expected, f"C={C}")
