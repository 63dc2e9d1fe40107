"""reference == recurrent == chunk for linear_attn and gated_linear_attn: outputs, final state and the
gradients of every input (initial_state and gates included), in float64 and float32."""

from functools import partial

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from helpers import assert_all_close, assert_forms_agree, random_log_gate, random_qkv, run_with_grads
from regmem.ops import NormalizedState, gated_linear_attn, linear_attn
from regmem.ops.feature_maps import RandomFeatures

SHAPES = [
    pytest.param((2, 37, 3, 16, 8, 16), id="B2-T37-H3-K16-V8-C16"),
    pytest.param((1, 64, 2, 8, 12, 32), id="B1-T64-H2-K8-V12-C32"),
    pytest.param((1, 1, 1, 4, 3, 64), id="B1-T1-H1-K4-V3-C64"),
]
DTYPES = [pytest.param(torch.float64, id="f64"), pytest.param(torch.float32, id="f32")]


def _inputs(shape, dtype, gate=None, strength=1.0, with_state=True):
    B, T, H, K, V, _ = shape
    q, k, v = random_qkv(B, T, H, K, V, dtype=dtype)
    inputs = {"q": q, "k": k, "v": v}
    if gate == "scalar":
        inputs["g"] = random_log_gate((B, T, H), strength, dtype=dtype)
    elif gate == "diagonal":
        inputs["g"] = random_log_gate((B, T, H, K), strength, dtype=dtype)
    if with_state:
        inputs["initial_state"] = torch.randn(B, H, K, V, dtype=dtype, generator=torch.Generator().manual_seed(9))
    return inputs


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", SHAPES)
def test_linear_attn_forms_match_reference_with_grads(shape, dtype):
    assert_forms_agree(linear_attn, _inputs(shape, dtype), chunk_size=shape[-1])


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("gate", ["scalar", "diagonal"])
@pytest.mark.parametrize("strength", [pytest.param(0.0, id="g0"), pytest.param(1.0, id="g1"),
                                      pytest.param(20.0, id="g20")])
def test_gated_linear_attn_forms_match_reference_with_grads(shape, dtype, gate, strength):
    assert_forms_agree(gated_linear_attn, _inputs(shape, dtype, gate, strength), chunk_size=shape[-1])


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("feature_map", ["elu_plus_one", "relu", "cosine", "taylor2", "dpfp", "random_features"])
def test_feature_mapped_forms_match_reference_with_grads(feature_map, dtype):
    B, T, H, K, V = 1, 45, 2, 4, 5
    inputs = _inputs((B, T, H, K, V, 16), dtype, with_state=False)
    op = partial(linear_attn, feature_map=feature_map)
    assert_forms_agree(op, inputs, chunk_size=16)


@pytest.mark.parametrize("dtype", DTYPES)
def test_normalized_forms_match_reference_with_grads(dtype):
    B, T, H, K, V = 2, 40, 2, 6, 3
    inputs = _inputs((B, T, H, K, V, 16), dtype, with_state=False)
    gen = torch.Generator().manual_seed(3)
    F = 8
    inputs["initial_state"] = NormalizedState(
        torch.randn(B, H, F, V, generator=gen, dtype=dtype), torch.rand(B, H, F, generator=gen, dtype=dtype) + 1
    )
    op = partial(linear_attn, feature_map=RandomFeatures(K, F, seed=5), normalize=True)
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
    inputs = _inputs((B, T, H, K, V, chunk_size), torch.float64, gate, strength, with_state)
    op = gated_linear_attn if gate else linear_attn
    expected = run_with_grads(partial(op, mode="reference"), inputs)
    actual = run_with_grads(partial(op, mode="chunk", chunk_size=chunk_size), inputs)
    assert_all_close(actual, expected, f"chunk C={chunk_size} vs reference")
