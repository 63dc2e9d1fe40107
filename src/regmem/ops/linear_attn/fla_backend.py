"""Optional GPU kernels: the chunk form of (gated) linear attention by flash-linear-attention.

`backend="fla"` is chosen explicitly (never a fallback); it needs CUDA tensors and `pip install regmem[cuda]`.
fla stores the state as [N, H, K, V] with o_t = S_t^T q_t, the same orientation as regmem, so no transpose is
needed. Arguments are passed by keyword because fla's positional order changed across releases. The core runs
inside regmem's frame (validation, feature maps, dtype policy, varlen padding), so only the math differs.
"""

from __future__ import annotations

import importlib


def _fla(module: str, name: str):
    try:
        return getattr(importlib.import_module(module), name)
    except ImportError as err:
        raise ImportError(
            "backend='fla' needs flash-linear-attention and triton: pip install 'regmem[cuda]'"
        ) from err


def gla_fla_core(q, k, v, g, *, initial_state, chunk_size):
    """Same contract as `gla_chunk_core`; q is already scaled, so fla is called with scale=1."""
    del chunk_size  # fla picks its own tiling
    if not q.is_cuda:
        raise ValueError(f"backend='fla' needs CUDA tensors, got q on {q.device}")
    kwargs = dict(q=q, k=k, v=v, scale=1.0, initial_state=initial_state, output_final_state=True)
    if g is not None and g.ndim == 4:
        return _fla("fla.ops.gla", "chunk_gla")(g=g, **kwargs)
    return _fla("fla.ops.simple_gla", "chunk_simple_gla")(g=g, **kwargs)
