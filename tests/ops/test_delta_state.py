"""State passing and varlen for the delta-rule family: splitting a sequence and carrying the state equals one
call; cu_seqlens equals one call per sequence (with gradients); bf16 at long T with beta up to 2 stays finite
and close to float32."""

from functools import partial

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from helpers import (
    assert_all_close,
    assert_decoding_equals_full,
    assert_split_equals_one_call,
    per_sequence,
    random_log_gate,
    random_qkv,
    rel_rms,
    run_with_grads,
)
from regmem.ops import delta_product, delta_rule, gated_delta_rule, leaky_lms

OPS = {
    "delta_rule": (delta_rule, None),
    "scalar": (gated_delta_rule, "scalar"),
    "diagonal": (gated_delta_rule, "diagonal"),
    "leaky_lms": (leaky_lms, "leaky"),
    "delta_product": (delta_product, "product"),
}
MODES = ["chunk", "recurrent", "reference"]


def _tokens(kind, B, T, H, K, V, *, strength=1.0, dtype=torch.float64, seed=0):
    """Per-token inputs (every one [B, T, ...]) of the op `kind`: unit keys, beta in [0, 2]."""
    q, k, v = random_qkv(B, T, H, K, V, dtype=dtype, seed=seed)
    gen = torch.Generator().manual_seed(seed + 1)
    tokens = {"q": q, "k": torch.nn.functional.normalize(k, dim=-1), "v": v}
    if kind == "product":
        n_h = 2
        tokens["k"] = torch.nn.functional.normalize(torch.randn(B, T, H, n_h, K, generator=gen, dtype=dtype), dim=-1)
        tokens["v"] = torch.randn(B, T, H, n_h, V, generator=gen, dtype=dtype)
        tokens["beta"] = 2 * torch.rand(B, T, H, n_h, generator=gen, dtype=dtype)
        tokens["g"] = random_log_gate((B, T, H), strength, dtype=dtype, seed=seed)
        return tokens
    tokens["beta"] = 2 * torch.rand(B, T, H, generator=gen, dtype=dtype)
    if kind == "scalar":
        tokens["g"] = random_log_gate((B, T, H), strength, dtype=dtype, seed=seed)
    elif kind == "diagonal":
        tokens["g"] = random_log_gate((B, T, H, K), strength, dtype=dtype, seed=seed)
    elif kind == "leaky":
        tokens["beta"] = tokens["beta"] / 2
        tokens["lam"] = torch.rand(B, T, H, generator=gen, dtype=dtype)
    return tokens


def _form(op, mode):
    return partial(op, mode=mode) if mode != "chunk" else partial(op, mode="chunk", chunk_size=16)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("name", list(OPS))
@given(cuts=st.lists(st.integers(0, 50), min_size=1, max_size=3))
def test_split_and_carry_state_equals_one_call(name, mode, cuts):
    op, kind = OPS[name]
    op = _form(op, mode)
    tokens = _tokens(kind, 2, 50, 2, 4, 3)
    assert_split_equals_one_call(op, tokens, cuts)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("name", list(OPS))
def test_cu_seqlens_equals_per_sequence_calls_with_grads(name, mode):
    op, kind = OPS[name]
    op = _form(op, mode)
    lengths = [5, 0, 33, 17, 1]
    T, H, K, V = sum(lengths), 2, 4, 3
    cu = torch.tensor([0, *torch.tensor(lengths).cumsum(0).tolist()])
    tokens = _tokens(kind, 1, T, H, K, V)
    N = len(lengths)
    state = torch.randn(N, H, K, V, generator=torch.Generator().manual_seed(4), dtype=torch.float64)

    packed = run_with_grads(partial(op, cu_seqlens=cu), {**tokens, "initial_state": state})

    expected = run_with_grads(per_sequence(op, cu), {**tokens, "initial_state": state})
    assert_all_close(packed, expected, "cu_seqlens vs per-sequence")


@pytest.mark.parametrize("name", ["delta_rule", "diagonal"])
def test_bf16_long_sequence_is_finite_and_close_to_float32(name):
    """T = 32768, beta up to 2 with unit keys (transitions with eigenvalues down to -1): the chunk form on bf16
    inputs stays finite, with finite gradients, and matches the float32 recurrent form on the same (upcast)
    inputs."""
    op, kind = OPS[name]
    tokens = _tokens(kind, 1, 32768, 2, 32, 32, strength=0.5, dtype=torch.bfloat16)
    leaves = {n: t.requires_grad_() for n, t in tokens.items()}
    o16, S16 = op(**leaves, output_final_state=True)
    grads = torch.autograd.grad(o16.float().pow(2).mean() + S16.pow(2).mean(), list(leaves.values()))
    o16, S16 = o16.detach(), S16.detach()
    with torch.no_grad():
        o32, S32 = op(**{n: t.float() for n, t in tokens.items()}, output_final_state=True, mode="recurrent")
    assert o16.dtype == torch.bfloat16
    assert S16.dtype == torch.float32
    assert torch.isfinite(o16).all() and torch.isfinite(S16).all()
    assert all(torch.isfinite(g).all() for g in grads)
    # bf16 keeps 8 mantissa bits: the output rounding alone is ~0.4% relative RMS
    assert rel_rms(o16.float(), o32) < 1e-2
    assert rel_rms(S16, S32) < 1e-5  # both forms accumulate in float32 from the same inputs


@pytest.mark.parametrize("name", list(OPS))
def test_token_by_token_decoding_equals_the_chunk_forward(name):
    """A decoder calls the recurrent form by name, one token at a time, carrying the state."""
    op, kind = OPS[name]
    assert_decoding_equals_full(op, _tokens(kind, 2, 21, 2, 4, 3), prefill=0, chunk_size=8)
