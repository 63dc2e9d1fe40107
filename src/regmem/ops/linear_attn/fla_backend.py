"""Optional GPU kernels: the chunk form of (gated) linear attention by flash-linear-attention.

Run by `backend="fla"`, or by `backend="auto"` (the default) on CUDA tensors when fla is installed (`pip install
'regmem[cuda]'`; ops/common/backends.py says when auto picks it). fla stores the state as [N, H, K, V] with
o_t = S_t^T q_t, the same orientation as regmem, so no transpose is needed. Arguments are passed by keyword because
fla's positional order changed across releases. The core runs inside regmem's frame (validation, feature maps,
dtype policy, varlen padding), so only the math differs.
"""

from __future__ import annotations

from regmem.ops.common.backends import check_cuda, fla_backend, fla_kernel


def gla_fla_core(q, k, v, g, *, initial_state, chunk_size):
    """Same contract as `gla_chunk_core`; q is already scaled, so fla is called with scale=1."""
    del chunk_size  # fla picks its own tiling
    check_cuda(q)
    kwargs = dict(q=q, k=k, v=v, scale=1.0, initial_state=initial_state, output_final_state=True)
    if g is not None and g.ndim == 4:
        return fla_kernel("fla.ops.gla", "chunk_gla")(g=g, **kwargs)
    return fla_kernel("fla.ops.simple_gla", "chunk_simple_gla")(g=g, **kwargs)


FLA = fla_backend(chunk=gla_fla_core)
