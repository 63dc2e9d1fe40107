"""regmem's own GPU kernels for DeltaFormer: the chunk form with its erase pass (steps 1-3 of chunk.py) computed by
the Triton kernels of triton_kernels.py, for the softmax erase kernel (eq. 94, Listing 1's default); the read
(step 4) is chunk.py's, one SDPA call for the softmax read.

Run by `backend="triton"`, or by `backend="auto"` (the default) on CUDA tensors when triton is installed (`pip install
'regmem[cuda]'`) and erase_kernel is "softmax" (any other runs the torch form). fla's DeltaFormer kernel needs
flash-attn, not a dependency here. Under TRITON_INTERPRET=1 the kernels also run on CPU tensors (slowly): that is how
tests/ops/test_triton_kernels.py checks them against the torch form without a GPU.
"""

from __future__ import annotations

import torch
from einops import rearrange

from regmem.ops.common.backends import check_triton_device, triton_backend, triton_module
from regmem.ops.deltaformer.chunk import chunked_read
from regmem.ops.deltaformer.state import KUState, cached_pairs

MAX_FLOAT64_V = 128  # float64 dw/dk tiles at V = 256 need 262 KB of shared memory even at one pipeline stage


def deltaformer_triton_core(q, k, v, w, alpha, beta, *, initial_state, erase_weights, erase_kernel, read_kernel,
                            scale, decimals, key_mask, chunk_size, solver="triangular"):
    """Same contract as `deltaformer_chunk_core`. The kernels solve each chunk by forward substitution whatever
    `solver` says (both solvers are exact); `chunk_size` blocks the read only (the kernels tile by their BLOCK)."""
    del solver
    check_triton_device(q)
    if erase_kernel != "softmax":
        raise ValueError(f"backend='triton' runs erase_kernel='softmax' only, got {erase_kernel!r}; use "
                         "backend='torch'")
    if q.dtype == torch.float64 and v.shape[-1] > MAX_FLOAT64_V:  # the backward's tiles outgrow shared memory
        raise ValueError(f"backend='triton' takes v's last dim V <= {MAX_FLOAT64_V} in float64, got V = "
                         f"{v.shape[-1]}; use backend='torch' (or float32)")
    erase = triton_module("regmem.ops.deltaformer.triton_kernels").TritonErase.apply
    k_all, u_cache, S = cached_pairs(k, initial_state)
    heads = "b t h x -> b h t x"
    u_cache = v.new_zeros(v.shape[0], v.shape[2], 0, v.shape[-1]) if u_cache is None else rearrange(u_cache, heads)
    u_all = erase(rearrange(k_all, heads), rearrange(w, "b t h g k -> b h g t k"), rearrange(v, heads),
                  rearrange(alpha, "b t h -> b h t"), rearrange(beta, "b t h -> b h t"), erase_weights, u_cache, scale,
                  key_mask)  # [B, H, S + T, V]
    u_all = rearrange(u_all, "b h l v -> b l h v")
    o = chunked_read(q, k_all, u_all, S, key_mask, read_kernel=read_kernel, scale=scale, decimals=decimals,
                     chunk_size=chunk_size)
    return o, KUState(k_all, u_all)


TRITON = triton_backend(chunk=deltaformer_triton_core)
