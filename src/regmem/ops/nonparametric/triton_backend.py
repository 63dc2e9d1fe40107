"""regmem's own GPU kernel for local linear attention: the chunk form with its streamed moments
(`CausalMoments`, chunk.py) computed by the Triton kernels of triton_moments.py; the centring and the per-query
K x K solves stay torch (one batched `solve_ex`, no host sync).

Run by `backend="triton"`, or by `backend="auto"` (the default) on CUDA tensors when triton is installed (`pip install
'regmem[cuda]'`). fla has no kernel for this op. Under TRITON_INTERPRET=1 the kernels also run on CPU tensors (slowly):
that is how tests/ops/test_triton_kernels.py checks them against the torch form without a GPU.
"""

from __future__ import annotations

from regmem.ops.common.backends import check_triton_device, triton_backend, triton_module
from regmem.ops.nonparametric.chunk import local_linear_fit
from regmem.ops.nonparametric.state import KVState, with_cache


def local_linear_triton_core(q, k, v, *, initial_state, scale, bandwidth, qk_norm, ridge, key_mask, chunk_size):
    """Same contract as `local_linear_chunk_core`; `chunk_size` still blocks the solves (the kernels tile on their
    own)."""
    check_triton_device(q)
    moments = triton_module("regmem.ops.nonparametric.triton_moments").TritonMoments.apply
    k, v, offset = with_cache(k, v, initial_state)
    o = local_linear_fit(q, k, v, offset=offset, scale=scale, bandwidth=bandwidth, qk_norm=qk_norm, ridge=ridge,
                         chunk_size=chunk_size, key_mask=key_mask, moments_fn=moments)
    return o, KVState(k, v)


TRITON = triton_backend(chunk=local_linear_triton_core)
