"""The public op of the multi-step gradient-descent family, `multi_step_gd`.

It validates its arguments here and runs one of the forms of reference.py, recurrent.py and chunk.py
(`multi_step_gd(..., mode=...)` or `multi_step_gd.reference / .recurrent / .chunk`). The math is in DERIVATION.md
beside this file; the state `GDStats` in state.py.

Shapes: q, k: [B, T, H, K]; v: [B, T, H, V]; beta: [B, T, H, I] (>= 0, I >= 1 steps); state GDStats(R, C) with
R: [N, H, K, K], C: [N, H, K, V]; N = B, or the number of sequences with `cu_seqlens` (then B = 1).
`scale=None` means K ** -0.5.
"""

from __future__ import annotations

from regmem.ops.common import (
    Call,
    check_qkv,
    check_same_device,
    check_scale,
    check_state_tuple,
    check_tensor,
    check_token_scalar,
    num_states,
    op,
    scaled_queries,
)
from regmem.ops.gd.chunk import gd_chunk_core
from regmem.ops.gd.recurrent import gd_recurrent_core
from regmem.ops.gd.reference import gd_reference_core
from regmem.ops.gd.state import GDStats


@op(reference=gd_reference_core, recurrent=gd_recurrent_core, chunk=gd_chunk_core)
def multi_step_gd(q, k, v, beta, *, scale=None, initial_state=None, cu_seqlens=None):
    """I full-batch gradient steps from zero on the least-squares loss of every prefix, eqs. (18)-(23) of
    *Test-time regression* (arXiv:2501.12352, Sec. 4 Vignette 3): uniform weights, linear regressor, I steps of
    batch GD.

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
    B, T, H, K, V = check_qkv(q, k, v)
    check_tensor("beta", beta, 4, "[B, T, H, I]")
    if beta.shape[-1] < 1:
        raise ValueError(f"beta must have shape [B, T, H, I] with I >= 1 gradient steps, got {list(beta.shape)}")
    check_same_device(q=q, beta=beta)  # before the bound check, which reads values
    check_token_scalar("beta", beta, B, T, H, extra=(beta.shape[-1],), doc="[B, T, H, I]", low=0.0)
    check_scale(scale)
    N = num_states(B, T, cu_seqlens)
    shapes = {"R": ((N, H, K, K), "[N, H, K, K]"), "C": ((N, H, K, V), "[N, H, K, V]")}
    check_state_tuple(initial_state, GDStats, shapes, q)
    tokens = {"q": scaled_queries(q, scale), "k": k, "v": v, "beta": beta}
    return Call(tokens, q.dtype, initial_state, cu_seqlens=cu_seqlens)
