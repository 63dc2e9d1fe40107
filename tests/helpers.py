"""Shared test machinery: explicit per-dtype tolerances, random inputs, and forward+backward with random
cotangents through both the output and the final state."""

from __future__ import annotations

from functools import partial

import pytest
import torch
from hypothesis import strategies as st

# Parameter lists shared by the op tests.
DTYPES = [pytest.param(torch.float64, id="f64"), pytest.param(torch.float32, id="f32")]
STATES = [pytest.param(False, id="zero-state"), pytest.param(True, id="initial-state")]
DECAYS = [pytest.param(False, id="gamma1"), pytest.param(True, id="decay")]
MODES = ["chunk", "recurrent", "reference"]

# float64: absolute + relative 1e-10; float32: relative RMS error 1e-4 (docs/architecture.md, "The op contract").
TOLERANCE = {torch.float64: 1e-10, torch.float32: 1e-4}


def rel_rms(actual: torch.Tensor, expected: torch.Tensor) -> float:
    err = (actual.double() - expected.double()).pow(2).mean().sqrt()
    ref = expected.double().pow(2).mean().sqrt()
    return float(err / ref) if ref > 0 else float(err)


def assert_close(actual: torch.Tensor, expected: torch.Tensor, name: str) -> None:
    assert actual.shape == expected.shape, f"{name}: shape {list(actual.shape)} != {list(expected.shape)}"
    if expected.numel() == 0:  # an empty state field (e.g. no momentum): the shapes say it all
        return
    assert torch.isfinite(actual).all(), f"{name}: non-finite values"
    tol = TOLERANCE[expected.dtype]
    if expected.dtype == torch.float64:
        torch.testing.assert_close(actual, expected, rtol=tol, atol=tol, msg=lambda m: f"{name}: {m}")
    else:
        err = rel_rms(actual, expected)
        assert err < tol, f"{name}: relative RMS error {err:.3g} >= {tol}"


def flatten_state(state) -> dict[str, torch.Tensor]:
    if state is None:
        return {}
    if isinstance(state, torch.Tensor):
        return {"state": state}
    return {f"state.{f}": s for f, s in zip(state._fields, state, strict=True)}


def run_with_grads(fn, inputs: dict, *, seed: int = 1234) -> dict[str, torch.Tensor]:
    """Calls fn(**inputs, output_final_state=True); backpropagates random cotangents on o and on every state
    field; returns {"o", "state...", "grad_<input>"} for every tensor input."""
    leaves = {}
    for name, x in inputs.items():
        if isinstance(x, torch.Tensor) and x.is_floating_point():
            leaves[name] = x.detach().clone().requires_grad_()
        elif isinstance(x, tuple) and hasattr(x, "_fields"):
            leaves[name] = type(x)(*(s.detach().clone().requires_grad_() for s in x))
        else:
            leaves[name] = x
    o, state = fn(**leaves, output_final_state=True)
    outputs = {"o": o, **flatten_state(state)}
    gen = torch.Generator().manual_seed(seed)
    # drawn on the CPU, so a CUDA run draws the same cotangents
    loss = sum((t * torch.randn(t.shape, generator=gen, dtype=t.dtype).to(t.device)).sum() for t in outputs.values())
    grad_leaves = {}
    for name, x in leaves.items():
        if isinstance(x, torch.Tensor) and x.requires_grad:
            grad_leaves[f"grad_{name}"] = x
        elif isinstance(x, tuple):
            grad_leaves.update({f"grad_{name}.{f}": s for f, s in zip(x._fields, x, strict=True)})
    grads = torch.autograd.grad(loss, list(grad_leaves.values()), allow_unused=True)
    result = {n: t.detach() for n, t in outputs.items()}
    for name, grad in zip(grad_leaves, grads, strict=True):
        assert grad is not None, f"{name}: no gradient reaches this input"
        result[name] = grad
    return result


def assert_all_close(actual: dict, expected: dict, label: str) -> None:
    assert actual.keys() == expected.keys(), f"{label}: {sorted(actual)} != {sorted(expected)}"
    for name in expected:
        assert_close(actual[name], expected[name], f"{label} {name}")


def random_qkv(B, T, H, K, V, *, dtype=torch.float64, seed=0):
    gen = torch.Generator().manual_seed(seed)
    q = torch.randn(B, T, H, K, generator=gen, dtype=dtype)
    k = torch.randn(B, T, H, K, generator=gen, dtype=dtype)
    v = torch.randn(B, T, H, V, generator=gen, dtype=dtype)
    return q, k, v


def random_log_gate(shape, strength: float, *, dtype=torch.float64, seed=0, zero_fraction=0.25):
    """Log retention in [-strength, 0], with a fraction of exact zeros (gamma = 1) to stress g = 0."""
    gen = torch.Generator().manual_seed(seed)
    g = -strength * torch.rand(shape, generator=gen, dtype=dtype)
    keep = torch.rand(shape, generator=gen) >= zero_fraction
    return g * keep


def per_sequence(op, cu_seqlens: torch.Tensor):
    """A callable with op's signature that runs op once per packed sequence of `cu_seqlens` (B = 1) and
    concatenates the outputs along time and the final states along N: what `cu_seqlens` must equal."""
    bounds = cu_seqlens.tolist()

    def run(initial_state, output_final_state, **tokens):
        outputs, finals = [], []
        for n, (a, b) in enumerate(zip(bounds, bounds[1:], strict=False)):
            o, state = op(**{m: t[:, a:b] for m, t in tokens.items()}, output_final_state=True,
                          initial_state=_map_fields(lambda s, n=n: s[n:n + 1], initial_state))
            outputs.append(o)
            finals.append(state)
        if isinstance(finals[0], torch.Tensor):
            return torch.cat(outputs, dim=1), torch.cat(finals)
        return torch.cat(outputs, dim=1), type(finals[0])(*(torch.cat(f) for f in zip(*finals, strict=True)))

    return run


def _map_fields(fn, state):
    return fn(state) if isinstance(state, torch.Tensor) else type(state)(*(fn(s) for s in state))


def assert_decoding_equals_full(op, tokens: dict, *, prefill: int, initial_state=None, chunk_size: int = 16):
    """A chunk-form prefill of the first `prefill` tokens (none if 0), then one recurrent call per token carrying
    the state, as a decoder does, equals one chunk-form call: outputs and every field of the final state."""
    o_full, state_full = op(**tokens, initial_state=initial_state, output_final_state=True, chunk_size=chunk_size)
    T = next(iter(tokens.values())).shape[1]
    pieces, state = [], initial_state
    if prefill:
        o, state = op(**{n: t[:, :prefill] for n, t in tokens.items()}, initial_state=state,
                      output_final_state=True, chunk_size=chunk_size)
        pieces.append(o)
    for t in range(prefill, T):
        o, state = op(**{n: x[:, t:t + 1] for n, x in tokens.items()}, initial_state=state, output_final_state=True,
                      mode="recurrent")
        pieces.append(o)
    assert_close(torch.cat(pieces, dim=1), o_full, "o")
    expected = flatten_state(state_full)
    for name, field in flatten_state(state).items():
        assert_close(field, expected[name], name)


def assert_forms_agree(op, inputs: dict, chunk_size: int) -> None:
    """recurrent == reference and chunk == reference: outputs, state fields and every gradient."""
    expected = run_with_grads(partial(op, mode="reference"), inputs)
    assert_all_close(run_with_grads(partial(op, mode="recurrent"), inputs), expected, "recurrent vs reference")
    chunk = partial(op, mode="chunk", chunk_size=chunk_size)
    assert_all_close(run_with_grads(chunk, inputs), expected, "chunk vs reference")


def assert_split_equals_one_call(op, tokens: dict, cuts) -> None:
    """Cutting the sequence at `cuts` and carrying the final state into the next call equals one call."""
    T = next(iter(tokens.values())).shape[1]
    o_full, state_full = op(**tokens, output_final_state=True)
    bounds = [0, *sorted(cuts), T]
    state, pieces = None, []
    for a, b in zip(bounds, bounds[1:], strict=False):
        o, state = op(**{n: t[:, a:b] for n, t in tokens.items()}, initial_state=state, output_final_state=True)
        pieces.append(o)
    assert_close(torch.cat(pieces, dim=1), o_full, "o")
    expected = flatten_state(state_full)
    for name, field in flatten_state(state).items():
        assert_close(field, expected[name], f"final {name}")


def assert_masked_pairs_equal_removed(op) -> None:
    """Left padding through `key_mask`: masking the first p pairs of a row equals a call on its last T - p tokens
    (outputs of the real queries, gradients of q, k, v of the real tokens); the padded tokens get no gradient."""
    B, T, H, K, V, pads = 2, 19, 2, 4, 3, [5, 0]
    tokens = [x.requires_grad_() for x in random_qkv(B, T, H, K, V)]
    key_mask = torch.arange(T) >= torch.tensor(pads).unsqueeze(-1)  # [B, T]
    o, _ = op(*tokens, key_mask=key_mask)
    cotangent = torch.randn(o.shape, generator=torch.Generator().manual_seed(5), dtype=o.dtype)
    cotangent = cotangent * key_mask[:, :, None, None]  # the outputs of padded queries are discarded
    grads = torch.autograd.grad((o * cotangent).sum(), tokens)
    for b, p in enumerate(pads):
        alone = [x.detach()[b:b + 1, p:].requires_grad_() for x in tokens]
        o_alone, _ = op(*alone)
        assert_close(o[b:b + 1, p:], o_alone, f"row {b} o")
        grads_alone = torch.autograd.grad((o_alone * cotangent[b:b + 1, p:]).sum(), alone)
        for name, grad, grad_alone in zip("qkv", grads, grads_alone, strict=True):
            assert_close(grad[b:b + 1, p:], grad_alone, f"row {b} grad_{name}")
            assert (grad[b, :p] == 0).all(), f"row {b} grad_{name}: padded tokens get a gradient"


def nonparametric_bad_inputs(B, T, H, K, V, *, key_mask: bool) -> dict:
    """Bad inputs every op on a KV cache must reject with a ValueError naming the argument: {case: (override,
    name)} over q, k, v: [B, T, H, K | V] float32, the KVState cache, cu_seqlens, mode and chunk_size; with
    `key_mask`, the key-mask cases too."""
    from regmem.ops import KVState

    def cache(S_k=2, S_v=2, B_k=B, B_v=B, K_k=K):
        return KVState(torch.zeros(B_k, S_k, H, K_k), torch.zeros(B_v, S_v, H, V))

    cases = {
        "q rank 3": ({"q": torch.randn(B, T, H)}, "q"),
        "k mismatched K": ({"k": torch.randn(B, T, H, K + 1)}, "k"),
        "v mismatched T": ({"v": torch.randn(B, T + 1, H, V)}, "v"),
        "q integer dtype": ({"q": torch.ones(B, T, H, K, dtype=torch.int64)}, "q"),
        "v other dtype": ({"v": torch.randn(B, T, H, V, dtype=torch.float64)}, "v"),
        "cache a tuple": ({"initial_state": tuple(cache())}, "initial_state"),
        "cache a tensor": ({"initial_state": torch.zeros(B, 2, H, K)}, "initial_state"),
        "cache k wrong K": ({"initial_state": cache(K_k=K + 1)}, "initial_state.k"),
        "cache v wrong S": ({"initial_state": cache(S_v=3)}, "initial_state.v"),
        "cache v wrong B": ({"initial_state": cache(B_v=B + 1)}, "initial_state.v"),
        "cu_seqlens with B > 1": ({"cu_seqlens": torch.tensor([0, 2, T])}, "cu_seqlens"),
        "mode unknown": ({"mode": "flash"}, "mode"),
        "chunk_size not a power of two": ({"chunk_size": 48}, "chunk_size"),
    }
    if key_mask:
        packed = {"q": torch.randn(1, T, H, K), "k": torch.randn(1, T, H, K), "v": torch.randn(1, T, H, V),
                  "cu_seqlens": torch.tensor([0, 2, T])}
        cases.update({
            "key_mask wrong shape": ({"key_mask": torch.ones(B, T + 1, dtype=torch.bool)}, "key_mask"),
            "key_mask not bool": ({"key_mask": torch.ones(B, T)}, "key_mask"),
            "key_mask without the cache": ({"initial_state": cache(), "key_mask": torch.ones(B, T, dtype=torch.bool)},
                                           r"key_mask .*\[B, S \+ T\]"),
            "key_mask with cu_seqlens": ({**packed, "key_mask": torch.ones(1, T, dtype=torch.bool)}, "key_mask"),
        })
    return cases


def assert_packed_equals_per_sequence(op, bounds, *, T: int, H: int = 2, K: int = 4, V: int = 3) -> None:
    """An op on a KV cache: a cu_seqlens call over packed sequences returns no state and the outputs of one
    call per sequence."""
    q, k, v = random_qkv(1, T, H, K, V)
    o, state = op(q, k, v, cu_seqlens=torch.tensor(bounds))
    assert state is None
    pieces = [op(q[:, a:b], k[:, a:b], v[:, a:b])[0] for a, b in zip(bounds, bounds[1:], strict=False)]
    assert_close(o, torch.cat(pieces, dim=1), "o")


def kv_cache_inputs(B, T, H, K, V, S, dtype=torch.float64, seed=0) -> dict:
    """q, k, v: [B, T, H, K | V] N(0, 1), drawn in float64 so every dtype sees the same data, and for S > 0 a
    KVState cache of S random pairs as initial_state (the inputs of an op on a KV cache)."""
    from regmem.ops import KVState

    q, k, v = (x.to(dtype) for x in random_qkv(B, T, H, K, V, seed=seed))
    inputs = {"q": q, "k": k, "v": v}
    if S:
        gen = torch.Generator().manual_seed(seed + 1)
        inputs["initial_state"] = KVState(torch.randn(B, S, H, K, generator=gen, dtype=torch.float64).to(dtype),
                                          torch.randn(B, S, H, V, generator=gen, dtype=torch.float64).to(dtype))
    return inputs


def unit_key_inputs(B, T, H, K, V, *, state=None, decay=False, dtype=torch.float64, seed=0) -> dict:
    """q, v N(0, 1) and keys of norm ~1 (k / sqrt(K)), so the higher-order sums stay modest and float32
    comparisons measure the algorithm; with `decay` a per-head log decay [H] in [-0.3, 0] (gamma in [0.74, 1]);
    with `state` (a callable (N, H, K, V, dtype, seed) -> state) an initial_state."""
    q, k, v = random_qkv(B, T, H, K, V, dtype=dtype, seed=seed)
    inputs = {"q": q, "k": k * K**-0.5, "v": v}
    if decay:
        inputs["g"] = -0.3 * torch.rand(H, generator=torch.Generator().manual_seed(seed + 2), dtype=dtype)
    if state is not None:
        inputs["initial_state"] = state(B, H, K, V, dtype, seed + 1)
    return inputs


def assert_negative_denominator_moves_away_from_zero(normalized_output, num, den, eps, modes):
    """Sign-safe normalisation: where den_t < 0 the output is num / (den - eps), not num / (den + eps).
    normalized_output(mode) -> o; num, den: the unnormalised read-outs, broadcastable to o; eps large enough
    that the two differ."""
    neg = den < 0
    assert neg.sum() >= 3, "the inputs must give some negative denominators"
    expected, wrong = num / (den - eps), num / (den + eps)
    for mode in modes:
        o = normalized_output(mode)
        neg_o = neg.expand_as(o)
        assert_close(o[neg_o], expected.expand_as(o)[neg_o], mode)
        assert not torch.allclose(o[neg_o], wrong.expand_as(o)[neg_o]), mode


# Hypothesis strategies over the shapes every op's property test draws: @given(**QKV_SHAPES, CHUNK_SIZES, ...).
QKV_SHAPES = {
    "B": st.integers(1, 2),
    "T": st.integers(1, 70),
    "H": st.integers(1, 2),
    "K": st.integers(1, 7),
    "V": st.integers(1, 7),
    "chunk_size": st.sampled_from([16, 32, 64]),
}


def assert_cu_seqlens_equals_per_sequence(op, tokens: dict, lengths, initial_state, label: str = "") -> None:
    """A state-carrying op: one cu_seqlens call over the packed sequences of `lengths` (tokens [1, sum, ...], one
    initial state per sequence) equals one call per sequence — outputs, final states and every gradient."""
    cu = torch.tensor([0, *torch.tensor(lengths).cumsum(0).tolist()])
    inputs = {**tokens, "initial_state": initial_state}
    packed = run_with_grads(partial(op, cu_seqlens=cu), inputs)
    expected = run_with_grads(per_sequence(op, cu), inputs)
    assert_all_close(packed, expected, f"{label}cu_seqlens vs per-sequence")


@pytest.fixture(scope="module")
def one_intra_op_thread():
    """Tiny tensors: a second intra-op thread only adds hand-offs, and on a busy two-core machine those stall (a
    layer test file took minutes with two threads, seconds with one). Restored after the module. A test module
    turns it on for all its tests with `pytestmark = pytest.mark.usefixtures("one_intra_op_thread")` after
    importing it."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)
