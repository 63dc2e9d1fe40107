"""The frame of the nonparametric memories (softmax attention, kernel regression, local-linear attention):
their memory is the key-value cache itself, so the state is `KVState(k, v)`, every pair seen so far.

`run_nonparametric(core, q, k, v, ...)` applies the op contract around a core
`core(q, k, v, *, offset, **options) -> o` on a plain batch in the compute dtype, where
q: [B, T, H, K] are the new queries, k: [B, S + T, H, K] and v: [B, S + T, H, V] the cached pairs followed by the
new ones (S = `offset`), and query t may use pairs j <= offset + t (causal, inclusive):
  - ops with a key mask (softmax, local linear) pass `key_mask` ([B, S + T] bool or None) among the options:
    it is validated here and reaches the core unchanged; a pair marked False is used by no query but its own
    (`similarity.allowed_pairs`);
  - float64 stays float64, anything else computes in float32; the output has the input dtype;
  - with `cu_seqlens` the packed row becomes a right-padded batch; padded pairs sit after every real query, so
    causality keeps them out. A varlen call starts from an empty cache and returns no state (sequences of
    different lengths have no common [N, S, H, *] cache).
"""

from __future__ import annotations

from typing import NamedTuple

import torch

from regmem.ops.common import Packing, check_qkv, check_same_device, check_state, compute_dtype, num_states


class KVState(NamedTuple):
    """The memory of a nonparametric op: k: [N, S, H, K] and v: [N, S, H, V], the S pairs seen so far."""

    k: torch.Tensor
    v: torch.Tensor


def check_kv_state(initial_state, B: int, H: int, K: int, V: int, q: torch.Tensor) -> None:
    if initial_state is None:
        return
    if not isinstance(initial_state, KVState):
        raise ValueError(f"initial_state must be a KVState(k [N, S, H, K], v [N, S, H, V]), got "
                         f"{type(initial_state).__name__}")
    S = initial_state.k.shape[1] if initial_state.k.ndim == 4 else -1
    check_state("initial_state.k", initial_state.k, (B, S, H, K), "[N, S, H, K]")
    check_state("initial_state.v", initial_state.v, (B, S, H, V), "[N, S, H, V]")
    check_same_device(q=q, k=initial_state.k, v=initial_state.v)


def check_key_mask(key_mask, B: int, L: int) -> None:
    """key_mask: None or a bool tensor [B, S + T] (S cached pairs, T new tokens; True = the pair takes part)."""
    if key_mask is None:
        return
    doc = f"[B, S + T] = {[B, L]} (S cached pairs, T new tokens)"
    if not isinstance(key_mask, torch.Tensor) or key_mask.dtype != torch.bool:
        got = key_mask.dtype if isinstance(key_mask, torch.Tensor) else type(key_mask).__name__
        raise ValueError(f"key_mask must be a bool tensor of shape {doc}, got {got}")
    if tuple(key_mask.shape) != (B, L):
        raise ValueError(f"key_mask must have shape {doc}, got shape {list(key_mask.shape)}")


def run_nonparametric(core, q, k, v, *, initial_state, output_final_state, cu_seqlens, **options):
    """Validates q, k, v and the cache, applies the dtype policy and varlen packing, and runs `core`."""
    B, T, H, K, V = check_qkv(q, k, v)
    num_states(B, T, cu_seqlens)  # validates cu_seqlens
    check_kv_state(initial_state, B, H, K, V, q)
    if cu_seqlens is not None and (initial_state is not None or output_final_state):
        raise ValueError("cu_seqlens packs whole sequences: it takes no initial_state and returns no final state")
    key_mask = options.get("key_mask")
    if key_mask is not None:
        if cu_seqlens is not None:
            raise ValueError("key_mask and cu_seqlens are exclusive: a packed batch has no padding to mask")
        check_key_mask(key_mask, B, (initial_state.k.shape[1] if initial_state is not None else 0) + T)
        check_same_device(q=q, key_mask=key_mask)
    out_dtype, dtype = q.dtype, compute_dtype(q)
    q, k, v = q.to(dtype), k.to(dtype), v.to(dtype)
    if cu_seqlens is not None:
        packing = Packing(cu_seqlens)
        o = core(packing.pad(q), packing.pad(k), packing.pad(v), offset=0, **options)  # [N, T_max, H, V]
        return packing.unpad(o).to(out_dtype), None
    offset = 0
    if initial_state is not None:
        offset = initial_state.k.shape[1]
        k = torch.cat([initial_state.k.to(dtype), k], dim=1)  # [B, S + T, H, K]
        v = torch.cat([initial_state.v.to(dtype), v], dim=1)  # [B, S + T, H, V]
    o = core(q, k, v, offset=offset, **options)  # [B, T, H, V]
    return o.to(out_dtype), (KVState(k, v) if output_final_state else None)
