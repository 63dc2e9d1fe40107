"""`regmem showcase`: every op of the library in its three forms, on one screen.

For each op: the recipe it implements, how far the recurrent and chunk forms are from the reference
(float64, outputs and final state), and the forward time of chunk against recurrent (float32). Then the
identity behind the family: one gradient step on (decay-weighted) least squares is (gated) linear attention.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import torch

from regmem.ops import gated_linear_attn, linear_attn
from regmem.ops.common import segsum
from regmem.recipe import get


def _cases(gen: torch.Generator) -> list[tuple[str, str, Callable[[int, torch.dtype], dict], Callable]]:
    def qkv(T, dtype, gate_shape=None):
        B, H, D = 1, 4, 64
        inputs = {
            "q": torch.randn(B, T, H, D, generator=gen).to(dtype),
            "k": (torch.randn(B, T, H, D, generator=gen) * D**-0.5).to(dtype),
            "v": torch.randn(B, T, H, D, generator=gen).to(dtype),
        }
        if gate_shape is not None:
            shape = (B, T, H) if gate_shape == "scalar" else (B, T, H, D)
            inputs["g"] = torch.nn.functional.logsigmoid(torch.randn(shape, generator=gen) + 3).to(dtype)
        return inputs

    return [
        ("linear_attn", "linear_attn", lambda T, dt: qkv(T, dt), linear_attn),
        ("linear_attn(phi=elu+1, normalize)", "normalized_linear_attn", lambda T, dt: qkv(T, dt),
         lambda **kw: linear_attn(**kw, feature_map="elu_plus_one", normalize=True)),
        ("gated_linear_attn(g scalar)", "mamba2", lambda T, dt: qkv(T, dt, "scalar"), gated_linear_attn),
        ("gated_linear_attn(g diagonal)", "gla", lambda T, dt: qkv(T, dt, "diagonal"), gated_linear_attn),
    ]


def _max_diff(a, b) -> float:
    if isinstance(a, tuple):
        return max(_max_diff(x, y) for x, y in zip(a, b, strict=True))
    return float((a - b).abs().max())


def _forward_ms(op, inputs, mode, repeats=3) -> float:
    with torch.no_grad():
        op(**inputs, mode=mode)
        start = time.perf_counter()
        for _ in range(repeats):
            op(**inputs, mode=mode)
    return (time.perf_counter() - start) / repeats * 1e3


def _gd_step_identity(gen: torch.Generator) -> float:
    """max |gated_linear_attn - one GD step on weighted LS| (ttr.md T2, eq. 16), float64."""
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
    print("regmem showcase: each op in three forms (reference | recurrent | chunk)\n")
    print("| op | recipe (weights, regressor, solver) | max err recurrent | max err chunk "
          f"| chunk fwd ms (T={seq_len}) | recurrent fwd ms | speed-up |")
    print("|---|---|---:|---:|---:|---:|---:|")
    for label, recipe_name, make, op in _cases(gen):
        small = make(200, torch.float64)
        ref = op(**small, mode="reference", output_final_state=True)
        rec = op(**small, mode="recurrent", output_final_state=True)
        chk = op(**small, mode="chunk", output_final_state=True)
        big = make(seq_len, torch.float32)
        chunk_ms, rec_ms = _forward_ms(op, big, "chunk"), _forward_ms(op, big, "recurrent", repeats=1)
        r = get(recipe_name).recipe
        print(f"| {label} | {r.weights}, {r.regressor}, {r.solver} | {_max_diff(rec, ref):.1e} | "
              f"{_max_diff(chk, ref):.1e} | {chunk_ms:.1f} | {rec_ms:.1f} | {rec_ms / chunk_ms:.0f}x |")
    print("\nerrors: float64, T=200, outputs and final states against the reference form")
    print(f"TTR eq. (16): gated linear attention == one GD step on weighted least squares, "
          f"max |diff| = {_gd_step_identity(gen):.1e}")
