"""reference == recurrent == chunk for least_squares: outputs, both fields of the final state and the gradients of
every input (q, k, v, g, initial_state.R, initial_state.S, and a tensor ridge), in float64 and float32, with and
without decay, with a feature map, and over random shapes."""

from functools import partial

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from helpers import assert_all_close, assert_forms_agree, random_log_gate, random_qkv, run_with_grads
from regmem.ops.regression import LeastSquaresState, least_squares

SHAPES = [
    pytest.param((2, 37, 3, 6, 5, 16), id="B2-T37-H3-K6-V5-C16"),
    pytest.param((1, 64, 2, 8, 12, 32), id="B1-T64-H2-K8-V12-C32"),
    pytest.param((1, 1, 1, 4, 3, 64), id="B1-T1-H1-K4-V3-C64"),
]
DTYPES = [pytest.param(torch.float64, id="f64"), pytest.param(torch.float32, id="f32")]
RIDGES = ["scalar", "per_head", "per_channel"]


def ls_inputs(B, T, H, K, V, *, dtype=torch.float64, gate=None, ridge="scalar", with_state=True, seed=0):
    """Well-conditioned inputs, so float32 comparisons measure the algorithm and not the conditioning: keys of norm
    ~1 (k / sqrt(K)), a ridge in [0.5, 1.5] (lambda_min(R_t + ridge) >= 0.5, so cond <= ~2 (t + 1)), and an
    initial R_0 that is a Gram matrix (symmetric PSD), as a real state is. `gate`: None, or the strength s of a log
    retention in [-s, 0] with exact zeros mixed in. `ridge`: "scalar" (a float), "per_head" ([H]) or
    "per_channel" ([H, K]); tensors require grad in run_with_grads."""
    q, k, v = random_qkv(B, T, H, K, V, dtype=dtype, seed=seed)
    gen = torch.Generator().manual_seed(seed + 1)
    ridges = {
        "scalar": 1.0,
        "per_head": 0.5 + torch.rand(H, generator=gen, dtype=dtype),
        "per_channel": 0.5 + torch.rand(H, K, generator=gen, dtype=dtype),
    }
    inputs = {"q": q, "k": k * K**-0.5, "v": v, "ridge": ridges[ridge]}
    if gate is not None:
        inputs["g"] = random_log_gate((B, T, H), gate, dtype=dtype, seed=seed + 2)
    if with_state:
        A = torch.randn(B, H, K, K, generator=gen, dtype=dtype) * K**-0.5
        S0 = torch.randn(B, H, K, V, generator=gen, dtype=dtype)
        inputs["initial_state"] = LeastSquaresState(A @ A.transpose(-1, -2), S0)
    return inputs


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("gate", [pytest.param(None, id="uniform"), pytest.param(1.0, id="decay")])
def test_least_squares_forms_match_reference_with_grads(shape, dtype, gate):
    B, T, H, K, V, C = shape
    assert_forms_agree(least_squares, ls_inputs(B, T, H, K, V, dtype=dtype, gate=gate), chunk_size=C)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("ridge", RIDGES)
@pytest.mark.parametrize("gate", [pytest.param(None, id="uniform"), pytest.param(0.5, id="decay")])
def test_forms_agree_on_the_gradient_of_a_learned_ridge(ridge, gate, dtype):
    """A per-head or per-channel ridge that requires grad (the Mesa layer learns it) gets the same gradient in all
    forms; with decay and a nonzero ridge the recurrent form factors R_t + diag(ridge) at every step."""
    assert_forms_agree(least_squares, ls_inputs(1, 29, 2, 5, 4, dtype=dtype, gate=gate, ridge=ridge), chunk_size=16)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("gate", [pytest.param(None, id="uniform"), pytest.param(0.05, id="decay")])
def test_forms_agree_with_zero_ridge_and_a_positive_definite_initial_R(gate, dtype):
    """ridge = 0 with R_0 = I (classic RLS, P_0 = I): the recurrent form runs Sherman-Morrison, weighted by the
    decay. Mild gates keep the decayed R_0 from vanishing before the keys span the space."""
    inputs = ls_inputs(2, 40, 2, 4, 3, dtype=dtype, gate=gate)
    R0, S0 = inputs["initial_state"]
    inputs["initial_state"] = LeastSquaresState(R0 + torch.eye(4, dtype=dtype), S0)
    inputs["ridge"] = 0.0
    assert_forms_agree(least_squares, inputs, chunk_size=16)


@pytest.mark.parametrize("dtype", DTYPES)
def test_forms_agree_with_a_feature_map(dtype):
    inputs = ls_inputs(2, 45, 2, 5, 4, dtype=dtype, gate=1.0)
    inputs["feature_map"] = "elu_plus_one"
    inputs["k"] = inputs["k"] * 0.5  # elu(x) + 1 >= 0: positive features, keep their norm ~1
    assert_forms_agree(least_squares, inputs, chunk_size=16)


def test_forms_agree_with_a_feature_map_that_changes_the_dimension():
    """taylor2 maps K = 3 to F = 1 + K + K^2 = 13: the state is [N, H, F, F] and [N, H, F, V]."""
    inputs = ls_inputs(1, 30, 2, 3, 4, with_state=False, ridge="scalar", gate=0.5)
    inputs["feature_map"] = "taylor2"
    assert_forms_agree(least_squares, inputs, chunk_size=16)
    _, state = least_squares(**inputs, output_final_state=True)
    assert state.R.shape == (1, 2, 13, 13) and state.S.shape == (1, 2, 13, 4)


@given(
    B=st.integers(1, 2),
    T=st.integers(1, 70),
    H=st.integers(1, 2),
    K=st.integers(1, 7),
    V=st.integers(1, 7),
    chunk_size=st.sampled_from([16, 32, 64]),
    gate=st.sampled_from([None, 0.0, 1.0, 20.0]),
    ridge=st.sampled_from(RIDGES),
    with_state=st.booleans(),
)
def test_forms_match_reference_property(B, T, H, K, V, chunk_size, gate, ridge, with_state):
    """Gates from 0 to -20 per step: a strong decay forgets R_0 and old keys, and the ridge keeps every solve
    well-posed."""
    inputs = ls_inputs(B, T, H, K, V, gate=gate, ridge=ridge, with_state=with_state)
    expected = run_with_grads(partial(least_squares, mode="reference"), inputs)
    actual = run_with_grads(partial(least_squares, mode="chunk", chunk_size=chunk_size), inputs)
    assert_all_close(actual, expected, f"chunk C={chunk_size} vs reference")
    assert_all_close(run_with_grads(partial(least_squares, mode="recurrent"), inputs), expected,
                     "recurrent vs reference")


@pytest.mark.parametrize("chunk_size", [16, 32, 64])
def test_chunk_size_does_not_change_the_result(chunk_size):
    inputs = ls_inputs(1, 100, 2, 6, 5, gate=1.0, ridge="per_channel")
    expected = run_with_grads(partial(least_squares, mode="chunk", chunk_size=8), inputs)
    actual = run_with_grads(partial(least_squares, mode="chunk", chunk_size=chunk_size), inputs)
    assert_all_close(actual, expected, f"C={chunk_size} vs C=8")


def test_recurrent_gradient_is_the_implicit_one_on_ill_conditioned_inputs():
    """Nearly collinear keys and ridge 1e-6: cond(R_t + ridge) reaches ~1e6. Differentiating through the
    Sherman-Morrison steps would amplify their rounding; the recurrent form's read-out is differentiated
    implicitly (SolveRead), so its gradients match the reference's dense solves."""
    T, K, V = 12, 6, 3
    gen = torch.Generator().manual_seed(3)
    base = torch.randn(1, 1, 1, K, generator=gen, dtype=torch.float64)
    k = base + 1e-2 * torch.randn(1, T, 1, K, generator=gen, dtype=torch.float64)  # [1, T, 1, K]
    q, _, v = random_qkv(1, T, 1, K, V, seed=4)
    inputs = {"q": q, "k": k, "v": v, "ridge": torch.tensor([1e-6], dtype=torch.float64)}
    expected = run_with_grads(partial(least_squares, mode="reference"), inputs)
    actual = run_with_grads(partial(least_squares, mode="recurrent"), inputs)
    for name in expected:
        scale = expected[name].abs().max()
        err = (actual[name] - expected[name]).abs().max() / scale
        assert err < 1e-8, f"{name}: max error {err:.3g} relative to max |value| {scale:.3g}"
