"""State passing and varlen for multi_step_gd: splitting a sequence and carrying GDStats(R, C) equals one call;
step-by-step decoding equals the parallel forward; cu_seqlens equals one call per sequence; bf16 stays close to
float32."""

from functools import partial

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from test_multi_step_gd_forms import gd_inputs

from helpers import (
    assert_all_close,
    assert_decoding_equals_full,
    assert_split_equals_one_call,
    per_sequence,
    rel_rms,
    run_with_grads,
)
from regmem.ops import multi_step_gd

MODES = ["chunk", "recurrent", "reference"]


def _op(mode):
    return partial(multi_step_gd, mode=mode, chunk_size=16) if mode == "chunk" else partial(multi_step_gd, mode=mode)


@pytest.mark.parametrize("mode", MODES)
@given(cuts=st.lists(st.integers(0, 50), min_size=1, max_size=3))
def test_split_and_carry_state_equals_one_call(mode, cuts):
    op = _op(mode)
    tokens = gd_inputs(2, 50, 2, 4, 3, 2, with_state=False)
    assert_split_equals_one_call(op, tokens, cuts)


def test_step_by_step_decoding_equals_the_parallel_forward():
    """A chunk-form prefill followed by one recurrent call per token equals one chunk-form call."""
    tokens = gd_inputs(1, 40, 2, 5, 4, 3)
    initial_state = tokens.pop("initial_state")
    assert_decoding_equals_full(multi_step_gd, tokens, prefill=23, initial_state=initial_state)


@pytest.mark.parametrize("mode", MODES)
def test_cu_seqlens_equals_per_sequence_calls_with_grads(mode):
    op = _op(mode)
    lengths = [5, 0, 33, 17, 1]
    T, H, K, V, N = sum(lengths), 2, 4, 3, len(lengths)
    cu = torch.tensor([0, *torch.tensor(lengths).cumsum(0).tolist()])
    tokens = gd_inputs(1, T, H, K, V, 2, with_state=False)
    state = gd_inputs(N, 1, H, K, V, 2)["initial_state"]
    packed = run_with_grads(partial(op, cu_seqlens=cu), {**tokens, "initial_state": state})

    expected = run_with_grads(per_sequence(op, cu), {**tokens, "initial_state": state})
    assert_all_close(packed, expected, "cu_seqlens vs per-sequence")


def test_bf16_long_sequence_is_finite_and_close_to_float32():
    tokens = gd_inputs(1, 4096, 2, 16, 16, 2, dtype=torch.float32, with_state=False)
    tokens16 = {n: t.bfloat16() for n, t in tokens.items()}
    o16, state16 = multi_step_gd(**tokens16, output_final_state=True)
    o32, state32 = multi_step_gd(**{n: t.float() for n, t in tokens16.items()}, output_final_state=True)
    assert o16.dtype == torch.bfloat16
    assert torch.isfinite(o16).all()
    assert rel_rms(o16.float(), o32) < 1e-2  # bf16 keeps 8 mantissa bits: the output rounding is ~0.4%
    assert state16.R.dtype == state16.C.dtype == torch.float32
    assert rel_rms(state16.R, state32.R) < 1e-6  # the statistics accumulate in float32 from the same inputs
    assert rel_rms(state16.C, state32.C) < 1e-6
