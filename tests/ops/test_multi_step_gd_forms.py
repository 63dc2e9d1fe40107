"""reference == recurrent == chunk for multi_step_gd: outputs, both statistics of the final state and the gradients
of every input (q, k, v, beta, initial_state.R, initial_state.C), in float64 and float32."""

from functools import partial

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from helpers import assert_all_close, assert_forms_agree, random_qkv, run_with_grads
from regmem.ops import GDStats, multi_step_gd

SHAPES = [
    pytest.param((2, 37, 3, 16, 8, 16), id="B2-T37-H3-K16-V8-C16"),
    pytest.param((1, 64, 2, 8, 12, 32), id="B1-T64-H2-K8-V12-C32"),
    pytest.param((1, 1, 1, 4, 3, 64), id="B1-T1-H1-K4-V3-C64"),
]
DTYPES = [pytest.param(torch.float64, id="f64"), pytest.param(torch.float32, id="f32")]


def gd_inputs(B, T, H, K, V, I, *, dtype=torch.float64, with_state=True, seed=0):
    """Keys of norm ~1 and beta_t in [0, 1 / (t + 5)]: lambda_max(R_t) <~ t + 1 + lambda_max(R_0), so every step
    is stable (beta lambda_max < 2) and float32 comparisons measure the algorithm, not a blow-up.
    The initial R_0 is a Gram matrix (symmetric, PSD), as a real state is."""
    q, k, v = random_qkv(B, T, H, K, V, dtype=dtype, seed=seed)
    gen = torch.Generator().manual_seed(seed + 1)
    steps = 1.0 / (torch.arange(T, dtype=dtype) + 5.0)  # [T]
    inputs = {
        "q": q,
        "k": k * K**-0.5,
        "v": v,
        "beta": torch.rand(B, T, H, I, generator=gen, dtype=dtype) * steps[:, None, None],
    }
    if with_state:
        A = torch.randn(B, H, K, K, generator=gen, dtype=dtype) * K**-0.5
        inputs["initial_state"] = GDStats(A @ A.transpose(-1, -2), torch.randn(B, H, K, V, generator=gen, dtype=dtype))
    return inputs


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("steps", [pytest.param(1, id="I1"), pytest.param(3, id="I3")])
def test_multi_step_gd_forms_match_reference_with_grads(shape, dtype, steps):
    B, T, H, K, V, C = shape
    assert_forms_agree(multi_step_gd, gd_inputs(B, T, H, K, V, steps, dtype=dtype), chunk_size=C)


@given(
    B=st.integers(1, 2),
    T=st.integers(1, 70),
    H=st.integers(1, 2),
    K=st.integers(1, 9),
    V=st.integers(1, 9),
    steps=st.integers(1, 4),
    chunk_size=st.sampled_from([16, 32, 64]),
    with_state=st.booleans(),
)
def test_chunk_matches_reference_property(B, T, H, K, V, steps, chunk_size, with_state):
    inputs = gd_inputs(B, T, H, K, V, steps, with_state=with_state)
    expected = run_with_grads(partial(multi_step_gd, mode="reference"), inputs)
    actual = run_with_grads(partial(multi_step_gd, mode="chunk", chunk_size=chunk_size), inputs)
    assert_all_close(actual, expected, f"chunk C={chunk_size} vs reference")


def test_forms_agree_for_a_non_symmetric_initial_R():
    """The op is defined by S - beta (R S - C) for any R_0, not only Gram matrices; the forms agree there too."""
    inputs = gd_inputs(1, 30, 2, 5, 4, 2)
    R, C = inputs["initial_state"]
    inputs["initial_state"] = GDStats(R + 0.3 * torch.randn(R.shape, dtype=R.dtype,
                                                            generator=torch.Generator().manual_seed(7)), C)
    assert_forms_agree(multi_step_gd, inputs, chunk_size=16)


@pytest.mark.parametrize("chunk_size", [16, 32, 64])
def test_chunk_size_does_not_change_the_result(chunk_size):
    inputs = gd_inputs(1, 100, 2, 6, 5, 2)
    expected = run_with_grads(partial(multi_step_gd, mode="chunk", chunk_size=8), inputs)
    actual = run_with_grads(partial(multi_step_gd, mode="chunk", chunk_size=chunk_size), inputs)
    assert_all_close(actual, expected, f"C={chunk_size} vs C=8")
