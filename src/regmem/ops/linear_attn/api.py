"""The public ops of the linear-attention family: `linear_attn` and `gated_linear_attn`.

Each op validates its arguments here and runs one of the forms of reference.py, recurrent.py and chunk.py
(`op(..., mode=...)` or `op.reference / .recurrent / .chunk`); on CUDA with flash-linear-attention installed the
chunk form runs fla's kernel (fla_backend.py; `backend="auto"`, the default, or `backend="fla"`). The math is in
DERIVATION.md beside this file.

Shapes: q, k: [B, T, H, K]; v: [B, T, H, V]; g: [B, T, H] (scalar) or [B, T, H, K] (diagonal), log retention
(<= 0); state S: [N, H, F, V] (F = K without a feature map) with o_t = S_t^T q_t, the transpose of the paper's M;
with `normalize=True` the state is `NormalizedState(S, z)`. N = B, or the number of sequences with `cu_seqlens`
(then B = 1). `scale=None` means K ** -0.5.
"""

from __future__ import annotations

from typing import NamedTuple

import torch

from regmem.ops.common import (
    Call,
    check_initial_state,
    check_log_gate,
    check_qkv,
    check_same_device,
    check_scale,
    check_state_tuple,
    compute_dtype,
    num_states,
    op,
    scaled_queries,
)
from regmem.ops.common.normalize import append_column, append_ones, divide_by_ones_column, split_column
from regmem.ops.feature_maps import Identity, map_queries_and_keys, resolve_feature_map
from regmem.ops.linear_attn.chunk import gla_chunk_core
from regmem.ops.linear_attn.fla_backend import FLA
from regmem.ops.linear_attn.recurrent import gla_recurrent_core
from regmem.ops.linear_attn.reference import gla_reference_core

FORMS = {"reference": gla_reference_core, "recurrent": gla_recurrent_core, "chunk": gla_chunk_core}


class NormalizedState(NamedTuple):
    """State of normalised linear attention: S: [N, H, F, V] numerator memory, z: [N, H, F] key sum."""

    S: torch.Tensor
    z: torch.Tensor


@op(**FORMS, backends={"fla": FLA})
def linear_attn(q, k, v, *, feature_map=None, normalize=False, scale=None, initial_state=None, cu_seqlens=None,
                backend="auto"):
    """Linear attention, eq. (2)-(3) of *Test-time regression* (arXiv:2501.12352): uniform weights, linear
    (feature-mapped) regressor, one batch gradient step from 0 (eq. 24).

    S_t = S_{t-1} + phi(k_t) v_t^T and o_t = scale * S_t^T phi(q_t).

    Args:
        q, k: [B, T, H, K]; v: [B, T, H, V], all one floating dtype (bf16/fp16 compute in float32).
        feature_map: None (identity), a name from `regmem.ops.feature_maps.FEATURE_MAPS`, or a token-wise
            callable [..., K] -> [..., F].
        normalize: divide by phi(q_t)^T sum_{s<=t} phi(k_s) (Katharopoulos et al. 2020, eq. 6); needs a
            non-negative feature map; `scale` then cancels, and the state is `NormalizedState(S, z)`.
        scale: multiplies phi(q); None means K ** -0.5.
        initial_state: [N, H, F, V] (or NormalizedState) or None for zeros.
        output_final_state: return the state after the last token (float32, or float64 for float64 input).
        mode: "reference" | "recurrent" | "chunk".
        chunk_size: chunk length C of the chunk form (a power of two).
        cu_seqlens: [N + 1] integer offsets of packed sequences (B = 1).
        backend: "auto" (default: fla's kernel for the chunk form when the tensors are on CUDA and fla is
            installed, else torch), "torch" (all forms, any device) or "fla" (the chunk form on CUDA by
            flash-linear-attention; not with normalize=True, whose fla variant adds an epsilon and keeps another
            state layout: "auto" runs torch there).

    Returns:
        o: [B, T, H, V] in the input dtype, and the final state or None.
    """
    B, T, H, K, V = check_qkv(q, k, v)
    check_scale(scale)
    N = num_states(B, T, cu_seqlens)
    if normalize and isinstance(resolve_feature_map(feature_map, K), Identity):
        raise ValueError("normalize=True divides by phi(q)^T sum phi(k), which needs a non-negative feature_map")
    if normalize and backend == "fla":
        raise ValueError("backend='fla' does not support normalize=True; use backend='torch'")
    fq, fk = map_queries_and_keys(feature_map, q, k, scale, compute_dtype(q))  # [B, T, H, F] each
    F = fq.shape[-1]
    if not normalize:
        check_initial_state(initial_state, (N, H, F, V), "[N, H, F, V]", q)
        return Call({"q": fq, "k": fk, "v": v, "g": None}, q.dtype, initial_state, cu_seqlens=cu_seqlens)
    # The denominator is the numerator of a ones column: run v' = [v, 1] with S' = [S, z] (common/normalize.py).
    shapes = {"S": ((N, H, F, V), "[N, H, F, V]"), "z": ((N, H, F), "[N, H, F]")}
    check_state_tuple(initial_state, NormalizedState, shapes, q, context=" when normalize=True")
    if initial_state is not None:
        initial_state = append_column(*initial_state)  # [N, H, F, V + 1]
    return Call({"q": fq, "k": fk, "v": append_ones(v.to(fq.dtype)), "g": None}, q.dtype, initial_state,
                cu_seqlens=cu_seqlens, finish=_normalized_read_out, torch_only=True)


def _normalized_read_out(o, state):
    """o: [.., V + 1] -> numerator / denominator; the state [N, H, F, V + 1] -> NormalizedState(S, z)."""
    return divide_by_ones_column(o, eps=0.0), NormalizedState(*split_column(state))


@op(**FORMS, backends={"fla": FLA})
def gated_linear_attn(q, k, v, g, *, scale=None, initial_state=None, cu_seqlens=None):
    """Gated linear attention, eq. (4)/(16) of *Test-time regression* (arXiv:2501.12352): decaying weights
    gamma_s^(t) = prod_{j=s+1}^t exp(g_j), linear regressor, one batch gradient step from 0.

    S_t = exp(g_t) ⊙ S_{t-1} + k_t v_t^T and o_t = scale * S_t^T q_t.

    Args:
        q, k: [B, T, H, K]; v: [B, T, H, V].
        g: log retention (<= 0), scalar [B, T, H] (RetNet: constant; Mamba-2/SSD: data-dependent) or
            diagonal [B, T, H, K] (GLA: per key channel, outside the paper's scalar derivation).
        scale, initial_state ([N, H, K, V]), output_final_state, mode, chunk_size, cu_seqlens, backend: as
            `linear_attn`.

    Returns:
        o: [B, T, H, V] in the input dtype, and the final state [N, H, K, V] or None.
    """
    B, T, H, K, V = check_qkv(q, k, v)
    check_log_gate("g", g, B, T, H, K, ("scalar", "diagonal"))
    check_same_device(q=q, g=g)
    check_scale(scale)
    N = num_states(B, T, cu_seqlens)
    check_initial_state(initial_state, (N, H, K, V), "[N, H, K, V]", q)
    return Call({"q": scaled_queries(q, scale), "k": k, "v": v, "g": g}, q.dtype, initial_state,
                cu_seqlens=cu_seqlens)
