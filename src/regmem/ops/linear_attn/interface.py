"""What every form of the linear-attention family shares: validation, feature maps, the Katharopoulos
normaliser, and the hand-off to the common frame. A form is only its core (reference.py, recurrent.py, chunk.py).

State layout (DESIGN.md): S: [N, H, F, V] with o_t = S_t^T q_t, the transpose of the paper's M. With
`normalize=True` the state is `NormalizedState(S, z)` with z: [N, H, F] = sum_s phi(k_s), the denominator's memory.
N = B, or the number of sequences with `cu_seqlens`.
"""

from __future__ import annotations

from typing import NamedTuple

import torch

from regmem.ops.common import (
    check_initial_state,
    check_log_gate,
    check_qkv,
    check_same_device,
    check_scale,
    check_state,
    compute_dtype,
    num_states,
    run_core,
    scaled_queries,
)
from regmem.ops.feature_maps import Identity, map_queries_and_keys, resolve_feature_map


class NormalizedState(NamedTuple):
    """State of normalised linear attention: S: [N, H, F, V] numerator memory, z: [N, H, F] key sum."""

    S: torch.Tensor
    z: torch.Tensor


def run_linear_attn(
    core, q, k, v, *, feature_map, normalize, scale, initial_state, output_final_state, cu_seqlens, **options
):
    """o_t = scale * phi(q_t)^T S_t, S_t = S_{t-1} + phi(k_t) v_t^T; with normalize, o_t is divided by
    phi(q_t)^T z_t, z_t = z_{t-1} + phi(k_t) (Katharopoulos et al. 2020, eq. 6), and `scale` cancels."""
    B, T, H, K, V = check_qkv(q, k, v)
    check_scale(scale)
    N = num_states(B, T, cu_seqlens)
    if normalize and isinstance(resolve_feature_map(feature_map, K), Identity):
        raise ValueError("normalize=True divides by phi(q)^T sum phi(k), which needs a non-negative feature_map")
    dtype = compute_dtype(q)
    fq, fk = map_queries_and_keys(feature_map, q, k, scale, dtype)  # [B, T, H, F] each
    F = fq.shape[-1]
    v = v.to(dtype)
    if not normalize:
        check_initial_state(initial_state, (N, H, F, V), "[N, H, F, V]", q)
        return run_core(
            core, {"q": fq, "k": fk, "v": v, "g": None}, initial_state,
            output_final_state=output_final_state, cu_seqlens=cu_seqlens, out_dtype=q.dtype, **options,
        )
    # Normaliser as one more value column: v' = [v, 1] gives [numerator, denominator] in one pass.
    v = torch.cat([v, torch.ones_like(v[..., :1])], dim=-1)  # [B, T, H, V + 1]
    if initial_state is not None:
        if not isinstance(initial_state, NormalizedState):
            raise ValueError("initial_state must be a NormalizedState(S, z) when normalize=True")
        check_state("initial_state.S", initial_state.S, (N, H, F, V), "[N, H, F, V]")
        check_state("initial_state.z", initial_state.z, (N, H, F), "[N, H, F]")
        check_same_device(q=q, S=initial_state.S, z=initial_state.z)
        initial_state = torch.cat([initial_state.S, initial_state.z.unsqueeze(-1)], dim=-1)  # [N, H, F, V + 1]
    o, S = run_core(
        core, {"q": fq, "k": fk, "v": v, "g": None}, initial_state,
        output_final_state=output_final_state, cu_seqlens=cu_seqlens, out_dtype=dtype, **options,
    )
    o = (o[..., :V] / o[..., V:]).to(q.dtype)  # [B, T, H, V]
    return o, (NormalizedState(S[..., :V], S[..., V]) if S is not None else None)


def run_gated_linear_attn(core, q, k, v, g, *, scale, initial_state, output_final_state, cu_seqlens, **options):
    """o_t = scale * q_t^T S_t, S_t = exp(g_t) ⊙ S_{t-1} + k_t v_t^T with g scalar [B, T, H] or diagonal
    [B, T, H, K] log retention (<= 0)."""
    B, T, H, K, V = check_qkv(q, k, v)
    check_log_gate("g", g, B, T, H, K, ("scalar", "diagonal"))
    check_same_device(q=q, g=g)
    check_scale(scale)
    N = num_states(B, T, cu_seqlens)
    check_initial_state(initial_state, (N, H, K, V), "[N, H, K, V]", q)
    q_scaled = scaled_queries(q, scale)  # [B, T, H, K]
    return run_core(
        core, {"q": q_scaled, "k": k, "v": v, "g": g}, initial_state,
        output_final_state=output_final_state, cu_seqlens=cu_seqlens, out_dtype=q.dtype, **options,
    )
