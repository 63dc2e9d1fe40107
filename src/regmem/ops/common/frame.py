"""The frame every op form runs in: dtype policy, varlen packing, state hand-off, and mode dispatch.

An op's form is written as a *core* on a plain batch: `core(**tokens, initial_state=S0) -> (o, S_T)` with all
per-token tensors [B, T, H, ...] in the compute dtype and the state always returned. `run_core` wraps it:
  - inputs in bf16/fp16/fp32 compute in float32, float64 stays float64; the state is returned in the compute
    dtype and the output in the input dtype (DESIGN.md, op contract);
  - with `cu_seqlens`, the packed row [1, total, ...] becomes a padded batch [N, T_max, ...] of neutral tokens
    (see varlen.py), and the output is packed back;
  - a state may be a tensor or a NamedTuple of tensors; it is dropped unless `output_final_state`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import torch

from regmem.ops.common.validate import check_mode
from regmem.ops.common.varlen import Packing


def compute_dtype(x: torch.Tensor) -> torch.dtype:
    return torch.float64 if x.dtype == torch.float64 else torch.float32


def scaled_queries(q: torch.Tensor, scale: float | None) -> torch.Tensor:
    """q in the compute dtype times `scale`; None means K ** -0.5 (the op contract)."""
    return q.to(compute_dtype(q)) * (q.shape[-1] ** -0.5 if scale is None else scale)


def map_state(fn: Callable[[torch.Tensor], torch.Tensor], state):
    """Applies fn to a state that is None, a tensor, or a NamedTuple of tensors."""
    if state is None:
        return None
    if isinstance(state, torch.Tensor):
        return fn(state)
    return type(state)(*(fn(s) for s in state))


def run_core(
    core: Callable,
    tokens: Mapping[str, torch.Tensor | None],
    initial_state,
    *,
    output_final_state: bool,
    cu_seqlens: torch.Tensor | None,
    out_dtype: torch.dtype,
    **options,
):
    """Runs `core` under the op contract; `tokens` are per-token tensors [B, T, H, ...] (None passes through)."""
    dtype = compute_dtype(next(t for t in tokens.values() if t is not None))
    tokens = {n: (t.to(dtype) if t is not None else None) for n, t in tokens.items()}
    initial_state = map_state(lambda s: s.to(dtype), initial_state)
    packing = Packing(cu_seqlens) if cu_seqlens is not None else None
    if packing is not None:
        tokens = {n: (packing.pad(t) if t is not None else None) for n, t in tokens.items()}  # [N, T_max, H, ...]
    o, final_state = core(**tokens, initial_state=initial_state, **options)
    if packing is not None:
        o = packing.unpad(o)  # [1, total, H, V]
    return o.to(out_dtype), (final_state if output_final_state else None)


def dispatch(mode: str, forms: Mapping[str, Callable], chunk_size: int, **kwargs):
    """Calls the form named by `mode`; only the chunk form takes `chunk_size`."""
    check_mode(mode)
    if mode == "chunk":
        return forms[mode](**kwargs, chunk_size=chunk_size)
    return forms[mode](**kwargs)
