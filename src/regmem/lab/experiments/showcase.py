"""`regmem showcase`: every op of the library in its three forms, on one screen.

For every op of `regmem.ops.OPS` (and a few variants), from the example inputs that the op tests use
(`regmem/ops/examples.py`, so no op can be missed): the recipe it implements, how far the recurrent and chunk forms
are from the reference (float64, outputs and final state), and the forward time of chunk against recurrent
(float32). Then the identity behind the family: one gradient step on (decay-weighted) least squares is (gated)
linear attention (*Test-time regression*, arXiv:2501.12352, eq. 16).
"""

from __future__ import annotations

import time

import torch

from regmem.ops import OPS, gated_linear_attn
from regmem.ops.common import segsum
from regmem.ops.examples import VARIANTS, Example, example_of
from regmem.recipe import get

ERROR_SHAPE = {"B": 1, "H": 2, "K": 16, "V": 16}  # float64 comparison against the reference form
ERROR_LEN = 128
TIMING_SHAPE = {"B": 1, "H": 4, "K": 64, "V": 64}  # float32 forward timing of the chunk and recurrent forms


def _recipe(example: Example) -> str:
    if example.recipe is None:
        return "- (no point of the TTR design space)"
    r = get(example.recipe).recipe
    return f"{r.weights}, {r.regressor}, {r.solver} ({example.recipe})"


def _inputs(example: Example, T: int, shape: dict, dtype, gen):
    K = min(shape["K"], example.max_key_dim or shape["K"])
    V = min(shape["V"], example.max_key_dim or shape["V"])
    return example.make(shape["B"], T, shape["H"], K, V, dtype, gen)


def _max_diff(a, b) -> float:
    """max |a - b| / max |b| over the output and every state field (relative: a normalised read-out can be large)."""
    if isinstance(a, tuple):
        return max(_max_diff(x, y) for x, y in zip(a, b, strict=True) if x is not None)
    return float((a - b).abs().max() / b.abs().max().clamp_min(1e-300)) if b.numel() else 0.0


def _forward_ms(op, inputs: dict, mode: str, repeats: int) -> float:
    with torch.no_grad():
        op(**inputs, mode=mode)
        start = time.perf_counter()
        for _ in range(repeats):
            op(**inputs, mode=mode)
    return (time.perf_counter() - start) / repeats * 1e3


def _row(label: str, name: str, example: Example, seq_len: int, gen: torch.Generator) -> str:
    op = OPS[name]
    T = min(ERROR_LEN, example.max_len or ERROR_LEN)
    tokens, options, state = _inputs(example, T, ERROR_SHAPE, torch.float64, gen)
    forms = {mode: op(**tokens, **options, initial_state=state, output_final_state=True, mode=mode)
             for mode in ("reference", "recurrent", "chunk")}
    T_fast = min(seq_len, example.max_fast_len or seq_len)
    tokens, options, state = _inputs(example, T_fast, TIMING_SHAPE, torch.float32, gen)
    inputs = {**tokens, **options, "initial_state": state}
    chunk_ms, recurrent_ms = _forward_ms(op, inputs, "chunk", 3), _forward_ms(op, inputs, "recurrent", 1)
    return (f"| {label} | {_recipe(example)} | {_max_diff(forms['recurrent'], forms['reference']):.1e} | "
            f"{_max_diff(forms['chunk'], forms['reference']):.1e} | {T_fast} | {chunk_ms:.1f} | {recurrent_ms:.1f} | "
            f"{recurrent_ms / chunk_ms:.1f}x |")


def _gd_step_identity(gen: torch.Generator) -> float:
    """max |gated_linear_attn - one GD step on weighted least squares| (TTR eq. 16), float64."""
    T, K, V = 16, 6, 4
    q, k = torch.randn(T, K, generator=gen, dtype=torch.float64), torch.randn(T, K, generator=gen, dtype=torch.float64)
    v = torch.randn(T, V, generator=gen, dtype=torch.float64)
    g = -torch.rand(T, generator=gen, dtype=torch.float64)
    weights = torch.exp(segsum(g))  # [T, T], gamma_i^(t)
    M = torch.zeros(T, V, K, dtype=torch.float64, requires_grad=True)  # one memory per prefix
    residual = v.unsqueeze(0) - torch.einsum("tvk,ik->tiv", M, k)
    (grad,) = torch.autograd.grad(0.5 * (weights * residual.pow(2).sum(-1)).sum(), M)
    gd = torch.einsum("tvk,tk->tv", -grad, q)
    o, _ = gated_linear_attn(q[None, :, None], k[None, :, None], v[None, :, None], g[None, :, None], scale=1.0)
    return float((o[0, :, 0] - gd).abs().max())


def showcase(seq_len: int = 2048) -> None:
    gen = torch.Generator().manual_seed(0)
    print(f"regmem showcase: the {len(OPS)} ops of regmem.ops (and {len(VARIANTS)} variants) in three forms "
          "(reference | recurrent | chunk)\n")
    print("| op | recipe (weights, regressor, solver) | max rel err recurrent | max rel err chunk | timed T "
          "| chunk fwd ms | recurrent fwd ms | speed-up |")
    print("|---|---|---:|---:|---:|---:|---:|---:|")
    for label in [*OPS, *VARIANTS]:
        name, example = example_of(label)
        print(_row(label, name, example, seq_len, gen), flush=True)
    print(f"\nerrors: max |form - reference| / max |reference|, float64, T <= {ERROR_LEN}, B=1, H=2, K=V=16, outputs "
          "and final states;\ntimes: float32 forward, B=1, H=4, K=V=64, T = timed T (capped where the "
          "op's cost grows faster than T^2)")
    print(f"TTR eq. (16): gated linear attention == one GD step on weighted least squares, "
          f"max |diff| = {_gd_step_identity(gen):.1e}")
