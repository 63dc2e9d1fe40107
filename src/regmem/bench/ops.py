"""`regmem bench ops`: forward and forward+backward of each op and form over sequence lengths.

FLOPs are counted per form as the multiply-adds it performs (2 per MAC); forward+backward is counted as
3x forward (the usual convention: the backward pass costs about two forwards)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass

import torch

from regmem.bench.timing import matmul_gflops, median_seconds
from regmem.ops import gated_linear_attn, linear_attn


@dataclass(frozen=True)
class Shape:
    B: int
    T: int
    H: int
    K: int
    V: int
    chunk_size: int


@dataclass(frozen=True)
class OpCase:
    name: str
    make_inputs: Callable[[Shape, torch.dtype, torch.Generator], dict]
    call: Callable[..., tuple]


def _qkv(s: Shape, dtype, gen):
    q = torch.randn(s.B, s.T, s.H, s.K, generator=gen).to(dtype)
    k = (torch.randn(s.B, s.T, s.H, s.K, generator=gen) * s.K**-0.5).to(dtype)
    v = torch.randn(s.B, s.T, s.H, s.V, generator=gen).to(dtype)
    return {"q": q, "k": k, "v": v}


def _with_gate(shape_of):
    def make(s: Shape, dtype, gen):
        g = torch.nn.functional.logsigmoid(torch.randn(shape_of(s), generator=gen) + 3.0)
        return {**_qkv(s, dtype, gen), "g": g}
    return make


CASES = {
    "linear_attn": OpCase("linear_attn", _qkv, linear_attn),
    "linear_attn_normalized": OpCase(
        "linear_attn_normalized", _qkv,
        lambda **kw: linear_attn(**kw, feature_map="elu_plus_one", normalize=True),
    ),
    "gla_scalar": OpCase("gla_scalar", _with_gate(lambda s: (s.B, s.T, s.H)), gated_linear_attn),
    "gla_diagonal": OpCase("gla_diagonal", _with_gate(lambda s: (s.B, s.T, s.H, s.K)), gated_linear_attn),
}
DEFAULT_CASES = ("linear_attn", "gla_scalar", "gla_diagonal")


def forward_flops(form: str, s: Shape) -> float:
    """Multiply-adds x 2 of one forward pass of a linear memory in the given form."""
    tokens = s.B * s.H * s.T
    if form == "recurrent":  # k v^T update and q^T S read-out per token
        return tokens * 4 * s.K * s.V
    if form == "chunk":  # Q K^T and A V inside the chunk, K^T V and Q S across chunks
        return tokens * (2 * s.chunk_size * (s.K + s.V) + 4 * s.K * s.V)
    return s.B * s.H * 2 * s.T * s.T * (s.K + s.V)  # reference: the full T x T attention matrix


def run(
    case_names, forms, seq_lens, *, batch, heads, head_dim, chunk_size, dtype, min_run_time, progress=print
) -> dict:
    """Times every (case, form, T, pass); returns {"meta": ..., "rows": [...]}."""
    peak = matmul_gflops(1024, dtype, min_run_time=min_run_time)
    progress(f"dense matmul 1024^3 ({dtype}): {peak:.1f} GFLOP/s")
    rows = []
    gen = torch.Generator().manual_seed(0)
    for name in case_names:
        case = CASES[name]
        for T in seq_lens:
            shape = Shape(batch, T, heads, head_dim, head_dim, chunk_size)
            inputs = case.make_inputs(shape, dtype, gen)
            for form in forms:
                kwargs = {"mode": form, **({"chunk_size": chunk_size} if form == "chunk" else {})}
                for pass_ in ("fwd", "fwdbwd"):
                    seconds = median_seconds(_step(case, inputs, kwargs, pass_), min_run_time=min_run_time)
                    flops = forward_flops(form, shape) * (3 if pass_ == "fwdbwd" else 1)
                    row = {
                        "op": name, "form": form, "pass": pass_, **asdict(shape), "dtype": str(dtype),
                        "ms": seconds * 1e3, "tokens_per_s": batch * T / seconds,
                        "gflops": flops / seconds / 1e9, "matmul_ratio": flops / seconds / 1e9 / peak,
                    }
                    rows.append(row)
                    progress(f"{name:>22} {form:>9} {pass_:>6} T={T:>6}: {row['ms']:9.2f} ms")
    meta = {"matmul_gflops": peak, "threads": torch.get_num_threads(), "torch": torch.__version__}
    return {"meta": meta, "rows": rows}


def _step(case: OpCase, inputs: dict, kwargs: dict, pass_: str) -> Callable[[], object]:
    if pass_ == "fwd":
        def forward():
            with torch.no_grad():
                return case.call(**inputs, **kwargs)
        return forward
    leaves = {n: t.detach().requires_grad_() for n, t in inputs.items()}

    def forward_backward():
        o, _ = case.call(**leaves, **kwargs)
        o.backward(torch.ones_like(o))
        for t in leaves.values():
            t.grad = None
    return forward_backward
