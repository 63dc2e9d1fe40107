"""State passing and varlen for momentum_delta_rule: splitting a sequence and carrying MomentumState(S, P) equals
one call; cu_seqlens equals one call per sequence (padding is neutral although a zero token is not); bf16 at long
T stays finite and close to float32."""

from functools import partial

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from test_momentum_delta_forms import titans_inputs

from helpers import (
    assert_all_close,
    assert_decoding_equals_full,
    assert_split_equals_one_call,
    per_sequence,
    rel_rms,
    run_with_grads,
)
from regmem.ops import MomentumState, momentum_delta_rule

MODES = ["chunk", "recurrent", "reference"]


def _op(mode):
    return partial(momentum_delta_rule, mode=mode, chunk_size=16) if mode == "chunk" else \
        partial(momentum_delta_rule, mode=mode)


@pytest.mark.parametrize("mode", MODES)
@given(cuts=st.lists(st.integers(0, 50), min_size=1, max_size=3))
def test_split_and_carry_state_equals_one_call(mode, cuts):
    op = _op(mode)
    tokens = titans_inputs(2, 50, 2, 4, 3, strength=0.5, with_state=False)
    assert_split_equals_one_call(op, tokens, cuts)


def test_step_by_step_decoding_equals_the_parallel_forward():
    """A chunk-form prefill followed by one recurrent call per token equals one chunk-form call."""
    tokens = titans_inputs(1, 40, 2, 5, 4, strength=0.5)
    initial_state = tokens.pop("initial_state")
    assert_decoding_equals_full(momentum_delta_rule, tokens, prefill=23, initial_state=initial_state)


@pytest.mark.parametrize("mode", MODES)
def test_cu_seqlens_equals_per_sequence_calls_with_grads(mode):
    op = _op(mode)
    lengths = [5, 0, 33, 17, 1]
    T, H, K, V, N = sum(lengths), 2, 4, 3, len(lengths)
    cu = torch.tensor([0, *torch.tensor(lengths).cumsum(0).tolist()])
    tokens = titans_inputs(1, T, H, K, V, strength=0.5, with_state=False)
    gen = torch.Generator().manual_seed(4)
    state = MomentumState(torch.randn(N, H, K, V, generator=gen, dtype=torch.float64),
                          torch.randn(N, H, K, V, generator=gen, dtype=torch.float64))
    packed = run_with_grads(partial(op, cu_seqlens=cu), {**tokens, "initial_state": state})

    expected = run_with_grads(per_sequence(op, cu), {**tokens, "initial_state": state})
    assert_all_close(packed, expected, "cu_seqlens vs per-sequence")


def test_bf16_long_sequence_is_finite_and_close_to_float32():
    T = 4096
    tokens = titans_inputs(1, T, 2, 16, 16, strength=0.5, dtype=torch.float32, with_state=False)
    tokens16 = {n: t.bfloat16() for n, t in tokens.items()}
    o16, state16 = momentum_delta_rule(**tokens16, output_final_state=True)
    o32, state32 = momentum_delta_rule(**{n: t.float() for n, t in tokens16.items()}, output_final_state=True)
    assert o16.dtype == torch.bfloat16
    assert torch.isfinite(o16).all()
    assert rel_rms(o16.float(), o32) < 1e-2  # bf16 keeps 8 mantissa bits: the output rounding is ~0.4%
    assert state16.S.dtype == state16.P.dtype == torch.float32
    assert rel_rms(state16.S, state32.S) < 1e-6  # the state runs in float32 from the same inputs
    assert rel_rms(state16.P, state32.P) < 1e-6
