"""Public op of the multi-step gradient-descent family and its named forms.

`multi_step_gd` dispatches on `mode`; each form is also callable by name (`multi_step_gd_reference`,
`multi_step_gd_recurrent`, `multi_step_gd_chunk`). See DERIVATION.md beside this file for the math.

Shapes: q, k: [B, T, H, K]; v: [B, T, H, V]; beta: [B, T, H, I] (>= 0, I >= 1 steps); state GDStats(R, C) with
R: [N, H, K, K], C: [N, H, K, V]; N = B, or the number of sequences with `cu_seqlens` (then B = 1).
`scale=None` means K ** -0.5.
"""

from __future__ import annotations

from regmem.ops.common import check_chunk_size, dispatch
from regmem.ops.gd.chunk import gd_chunk_core
from regmem.ops.gd.interface import run_multi_step_gd
from regmem.ops.gd.recurrent import gd_recurrent_core
from regmem.ops.gd.reference import gd_reference_core


def multi_step_gd(
    q, k, v, beta, *, scale=None, initial_state=None, output_final_state=False, mode="chunk", chunk_size=64,
    cu_seqlens=None,
):
    """I full-batch gradient steps from zero on the least-squares loss of every prefix, eqs. (18)-(23) of
    *Test-time regression* (arXiv:2501.12352, Sec. 4 Vignette 3; ttr.md §2.2 L7): uniform weights, linear
    regressor, I steps of batch GD.

    In regmem's layout, with R_t = sum_{s<=t} k_s k_s^T and C_t = sum_{s<=t} k_s v_s^T:
        S_t^(0) = 0,  S_t^(i) = S_t^(i-1) - beta_t^(i) (R_t S_t^(i-1) - C_t),  o_t = scale * (S_t^(I))^T q_t.
    With I = 1 and beta = 1 this is linear attention (eq. 24); for 0 < beta < 2 / lambda_max(R_t) and I -> inf
    the memory tends to the min-norm least-squares solution.

    Args:
        q, k: [B, T, H, K]; v: [B, T, H, V], all one floating dtype (bf16/fp16 compute in float32).
        beta: [B, T, H, I], step size beta_t^(i) of gradient step i at token t (>= 0); I >= 1 is the number of
            steps.
        scale: multiplies q; None means K ** -0.5.
        initial_state: GDStats(R [N, H, K, K], C [N, H, K, V]), the statistics of earlier tokens, or None for zeros.
        output_final_state: return the GDStats after the last token (float32, or float64 for float64 input).
        mode: "reference" | "recurrent" | "chunk".
        chunk_size: chunk length C of the chunk form (a power of two).
        cu_seqlens: [N + 1] integer offsets of packed sequences (B = 1).

    Returns:
        o: [B, T, H, V] in the input dtype, and the final GDStats or None.
    """
    check_chunk_size(chunk_size)
    forms = {"reference": multi_step_gd_reference, "recurrent": multi_step_gd_recurrent, "chunk": multi_step_gd_chunk}
    return dispatch(
        mode, forms, chunk_size, q=q, k=k, v=v, beta=beta, scale=scale, initial_state=initial_state,
        output_final_state=output_final_state, cu_seqlens=cu_seqlens,
    )


def multi_step_gd_reference(q, k, v, beta, *, scale=None, initial_state=None, output_final_state=False,
                            cu_seqlens=None):
    """`multi_step_gd` by its definition: per prefix, I gradient steps on M from the residuals (O(T^2))."""
    return run_multi_step_gd(
        gd_reference_core, q, k, v, beta, scale=scale, initial_state=initial_state,
        output_final_state=output_final_state, cu_seqlens=cu_seqlens,
    )


def multi_step_gd_recurrent(q, k, v, beta, *, scale=None, initial_state=None, output_final_state=False,
                            cu_seqlens=None):
    """`multi_step_gd` one token at a time (the decoding form)."""
    return run_multi_step_gd(
        gd_recurrent_core, q, k, v, beta, scale=scale, initial_state=initial_state,
        output_final_state=output_final_state, cu_seqlens=cu_seqlens,
    )


def multi_step_gd_chunk(q, k, v, beta, *, scale=None, initial_state=None, output_final_state=False, chunk_size=64,
                        cu_seqlens=None):
    """`multi_step_gd` chunk-parallel (the training form)."""
    check_chunk_size(chunk_size)
    return run_multi_step_gd(
        gd_chunk_core, q, k, v, beta, scale=scale, initial_state=initial_state,
        output_final_state=output_final_state, cu_seqlens=cu_seqlens, chunk_size=chunk_size,
    )
