"""Public ops of the linear-attention family and their named forms.

`linear_attn` and `gated_linear_attn` dispatch on `mode`; each form is also callable by name
(`linear_attn_reference`, `linear_attn_recurrent`, `linear_attn_chunk`, and likewise for
`gated_linear_attn_*`). See DERIVATION.md beside this file for the math.

Shapes: q, k: [B, T, H, K]; v: [B, T, H, V]; g: [B, T, H] (scalar) or [B, T, H, K] (diagonal), log retention
(<= 0); state S: [N, H, F, V] (F = K without a feature map) with o_t = S_t^T q_t; N = B, or the number of
sequences with `cu_seqlens` (then B = 1). `scale=None` means K ** -0.5.
"""

from __future__ import annotations

from regmem.ops.common import check_chunk_size, dispatch
from regmem.ops.linear_attn.chunk import gla_chunk_core
from regmem.ops.linear_attn.fla_backend import gla_fla_core
from regmem.ops.linear_attn.interface import run_gated_linear_attn, run_linear_attn
from regmem.ops.linear_attn.recurrent import gla_recurrent_core
from regmem.ops.linear_attn.reference import gla_reference_core


def linear_attn(
    q, k, v, *, feature_map=None, normalize=False, scale=None, initial_state=None, output_final_state=False,
    mode="chunk", chunk_size=64, cu_seqlens=None, backend="torch",
):
    """Linear attention, eq. (2)-(3) of *Test-time regression* (arXiv:2501.12352): uniform weights, linear
    (feature-mapped) regressor, one batch gradient step from 0 (eq. 24).

    S_t = S_{t-1} + phi(k_t) v_t^T and o_t = scale * S_t^T phi(q_t).

    Args:
        q, k: [B, T, H, K]; v: [B, T, H, V], all one floating dtype (bf16/fp16 compute in float32).
        feature_map: None (identity), a name from `regmem.ops.feature_maps.FEATURE_MAPS`, or a token-wise
            callable [..., K] -> [..., F].
        normalize: divide by phi(q_t)^T sum_{s<=t} phi(k_s) (Katharopoulos et al. 2020); needs a non-negative
            feature map; `scale` then cancels, and the state is `NormalizedState(S, z)`.
        scale: multiplies phi(q); None means K ** -0.5.
        initial_state: [N, H, F, V] (or NormalizedState) or None for zeros.
        output_final_state: return the state after the last token (float32, or float64 for float64 input).
        mode: "reference" | "recurrent" | "chunk".
        chunk_size: chunk length C of the chunk form (a power of two).
        cu_seqlens: [N + 1] integer offsets of packed sequences (B = 1).
        backend: "torch" (all forms, any device) or "fla" (chunk form on CUDA by flash-linear-attention;
            not with normalize=True, whose fla variant adds an epsilon and keeps another state layout).

    Returns:
        o: [B, T, H, V] in the input dtype, and the final state or None.
    """
    check_chunk_size(chunk_size)
    if _check_backend(backend, mode) == "fla":
        if normalize:
            raise ValueError("backend='fla' does not support normalize=True; use backend='torch'")
        return run_linear_attn(
            gla_fla_core, q, k, v, feature_map=feature_map, normalize=False, scale=scale,
            initial_state=initial_state, output_final_state=output_final_state, cu_seqlens=cu_seqlens,
            chunk_size=chunk_size,
        )
    forms = {"reference": linear_attn_reference, "recurrent": linear_attn_recurrent, "chunk": linear_attn_chunk}
    return dispatch(
        mode, forms, chunk_size, q=q, k=k, v=v, feature_map=feature_map, normalize=normalize, scale=scale,
        initial_state=initial_state, output_final_state=output_final_state, cu_seqlens=cu_seqlens,
    )


def gated_linear_attn(
    q, k, v, g, *, scale=None, initial_state=None, output_final_state=False, mode="chunk", chunk_size=64,
    cu_seqlens=None, backend="torch",
):
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
    check_chunk_size(chunk_size)
    if _check_backend(backend, mode) == "fla":
        return run_gated_linear_attn(
            gla_fla_core, q, k, v, g, scale=scale, initial_state=initial_state,
            output_final_state=output_final_state, cu_seqlens=cu_seqlens, chunk_size=chunk_size,
        )
    forms = {
        "reference": gated_linear_attn_reference,
        "recurrent": gated_linear_attn_recurrent,
        "chunk": gated_linear_attn_chunk,
    }
    return dispatch(
        mode, forms, chunk_size, q=q, k=k, v=v, g=g, scale=scale, initial_state=initial_state,
        output_final_state=output_final_state, cu_seqlens=cu_seqlens,
    )


def _check_backend(backend: str, mode: str) -> str:
    if backend not in ("torch", "fla"):
        raise ValueError(f"backend must be 'torch' or 'fla', got {backend!r}")
    if backend == "fla" and mode != "chunk":
        raise ValueError(f"backend='fla' provides the chunk form only, got mode={mode!r}")
    return backend


def linear_attn_reference(
    q, k, v, *, feature_map=None, normalize=False, scale=None, initial_state=None, output_final_state=False,
    cu_seqlens=None,
):
    """`linear_attn` by its definition: the masked attention matrix, materialised (O(T^2))."""
    return run_linear_attn(
        gla_reference_core, q, k, v, feature_map=feature_map, normalize=normalize, scale=scale,
        initial_state=initial_state, output_final_state=output_final_state, cu_seqlens=cu_seqlens,
    )


def linear_attn_recurrent(
    q, k, v, *, feature_map=None, normalize=False, scale=None, initial_state=None, output_final_state=False,
    cu_seqlens=None,
):
    """`linear_attn` one token at a time (the decoding form)."""
    return run_linear_attn(
        gla_recurrent_core, q, k, v, feature_map=feature_map, normalize=normalize, scale=scale,
        initial_state=initial_state, output_final_state=output_final_state, cu_seqlens=cu_seqlens,
    )


def linear_attn_chunk(
    q, k, v, *, feature_map=None, normalize=False, scale=None, initial_state=None, output_final_state=False,
    chunk_size=64, cu_seqlens=None,
):
    """`linear_attn` chunk-parallel (the training form)."""
    check_chunk_size(chunk_size)
    return run_linear_attn(
        gla_chunk_core, q, k, v, feature_map=feature_map, normalize=normalize, scale=scale,
        initial_state=initial_state, output_final_state=output_final_state, cu_seqlens=cu_seqlens,
        chunk_size=chunk_size,
    )


def gated_linear_attn_reference(
    q, k, v, g, *, scale=None, initial_state=None, output_final_state=False, cu_seqlens=None
):
    """`gated_linear_attn` by its definition: ((Q K^T) ⊙ L) V with L_ts = prod_{j=s+1}^t exp(g_j)."""
    return run_gated_linear_attn(
        gla_reference_core, q, k, v, g, scale=scale, initial_state=initial_state,
        output_final_state=output_final_state, cu_seqlens=cu_seqlens,
    )


def gated_linear_attn_recurrent(
    q, k, v, g, *, scale=None, initial_state=None, output_final_state=False, cu_seqlens=None
):
    """`gated_linear_attn` one token at a time (the decoding form)."""
    return run_gated_linear_attn(
        gla_recurrent_core, q, k, v, g, scale=scale, initial_state=initial_state,
        output_final_state=output_final_state, cu_seqlens=cu_seqlens,
    )


def gated_linear_attn_chunk(
    q, k, v, g, *, scale=None, initial_state=None, output_final_state=False, chunk_size=64, cu_seqlens=None
):
    """`gated_linear_attn` chunk-parallel (the training form)."""
    check_chunk_size(chunk_size)
    return run_gated_linear_attn(
        gla_chunk_core, q, k, v, g, scale=scale, initial_state=initial_state,
        output_final_state=output_final_state, cu_seqlens=cu_seqlens, chunk_size=chunk_size,
    )
