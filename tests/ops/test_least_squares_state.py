"""State passing and varlen for least_squares: splitting a sequence and carrying LeastSquaresState(R, S) equals one
call; step-by-step decoding equals the parallel forward; cu_seqlens equals one call per sequence (with grads);
bf16 inputs compute in float32."""

from functools import partial

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from test_least_squares_forms import ls_inputs

from helpers import (
    assert_all_close,
    assert_decoding_equals_full,
    assert_split_equals_one_call,
    per_sequence,
    rel_rms,
    run_with_grads,
)
from regmem.ops.regression import least_squares

MODES = ["chunk", "recurrent", "reference"]


def _op(mode, **fixed):
    if mode == "chunk":
        return partial(least_squares, mode=mode, chunk_size=16, **fixed)
    return partial(least_squares, mode=mode, **fixed)


@pytest.mark.parametrize("mode", MODES)
@given(cuts=st.lists(st.integers(0, 50), min_size=1, max_size=3))
def test_split_and_carry_state_equals_one_call(mode, cuts):
    """The ridge is not part of the state and does not decay, so it is passed to every call alike."""
    tokens = ls_inputs(2, 50, 2, 4, 3, gate=1.0, with_state=False)
    op = _op(mode, ridge=tokens.pop("ridge"))
    assert_split_equals_one_call(op, tokens, cuts)


@pytest.mark.parametrize("gate", [pytest.param(None, id="uniform"), pytest.param(1.0, id="decay")])
def test_step_by_step_decoding_equals_the_parallel_forward(gate):
    """A chunk-form prefill followed by one recurrent call per token equals one chunk-form call."""
    tokens = ls_inputs(1, 40, 2, 5, 4, gate=gate, ridge="per_channel")
    initial_state = tokens.pop("initial_state")
    op = partial(least_squares, ridge=tokens.pop("ridge"))
    assert_decoding_equals_full(op, tokens, prefill=23, initial_state=initial_state)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("gate", [pytest.param(None, id="uniform"), pytest.param(1.0, id="decay")])
def test_cu_seqlens_equals_per_sequence_calls_with_grads(mode, gate):
    op = _op(mode)
    lengths = [5, 0, 33, 17, 1]
    T, H, K, V, N = sum(lengths), 2, 4, 3, len(lengths)
    cu = torch.tensor([0, *torch.tensor(lengths).cumsum(0).tolist()])
    tokens = ls_inputs(1, T, H, K, V, gate=gate, ridge="per_head", with_state=False)
    ridge = tokens.pop("ridge")
    state = ls_inputs(N, 1, H, K, V)["initial_state"]
    packed = run_with_grads(partial(op, cu_seqlens=cu), {**tokens, "ridge": ridge, "initial_state": state})

    def one_call_per_sequence(ridge, initial_state, output_final_state, **tokens):
        run = per_sequence(partial(op, ridge=ridge), cu)  # the ridge is shared, not sliced along time
        return run(initial_state=initial_state, output_final_state=output_final_state, **tokens)

    expected = run_with_grads(one_call_per_sequence, {**tokens, "ridge": ridge, "initial_state": state})
    assert_all_close(packed, expected, "cu_seqlens vs per-sequence")


@pytest.mark.parametrize("mode", MODES)
def test_bf16_inputs_compute_in_float32(mode):
    tokens = ls_inputs(1, 70, 2, 8, 8, dtype=torch.float32, gate=1.0, with_state=False)
    ridge = tokens.pop("ridge")
    tokens16 = {n: t.bfloat16() for n, t in tokens.items()}
    op = _op(mode, ridge=ridge)
    o16, state16 = op(**tokens16, output_final_state=True)
    o32, state32 = op(**{n: t.float() for n, t in tokens16.items()}, output_final_state=True)
    assert o16.dtype == torch.bfloat16
    assert state16.R.dtype == state16.S.dtype == torch.float32
    assert rel_rms(o16.float(), o32) < 1e-2  # bf16 keeps 8 mantissa bits: the output rounding is ~0.4%
    assert rel_rms(state16.R, state32.R) < 1e-6  # the statistics accumulate in float32 from the same inputs
    assert rel_rms(state16.S, state32.S) < 1e-6
