"""The public op of Oja's rule, `oja_rule`.

It validates its arguments here and runs one of the forms of reference.py, recurrent.py and chunk.py
(`oja_rule(..., mode=...)` or `oja_rule.reference / .recurrent / .chunk`). The math is in DERIVATION.md beside this
file.

Shapes: q, k: [B, T, H, K]; v: [B, T, H, V]; g: [B, T, H] log retention (<= 0); beta: [B, T, H] (>= 0); state
S: [N, H, K, V] with o_t = scale * S_t^T q_t; N = B, or the number of sequences with `cu_seqlens` (then B = 1).
`scale=None` means K ** -0.5.
"""

from __future__ import annotations

from regmem.ops.common import (
    Call,
    check_initial_state,
    check_log_gate,
    check_qkv,
    check_same_device,
    check_scale,
    check_tensor,
    check_token_scalar,
    num_states,
    op,
    scaled_queries,
)
from regmem.ops.oja.chunk import oja_chunk_core
from regmem.ops.oja.recurrent import oja_recurrent_core
from regmem.ops.oja.reference import oja_reference_core


@op(reference=oja_reference_core, recurrent=oja_recurrent_core, chunk=oja_chunk_core)
def oja_rule(q, k, v, g, beta, *, scale=None, initial_state=None, cu_seqlens=None):
    """Oja's rule (OjaNet) as a linear memory: *Nested Learning* (arXiv:2512.24695), Sec. 5, eqs. (66)-(67).

    In the paper's orientation M: [V, K], M_t = alpha_t M_{t-1} + eta_t v_t (k_t - M_{t-1}^T v_t)^T, y_t = M_t q_t:
    one gradient step of size eta_t on -<M k_t, v_t> + 1/2 ||M^T v_t||^2 (eq. 67) after the decay alpha_t. In
    regmem's layout S = M^T:
        S_t = exp(g_t) S_{t-1} + beta_t (k_t - S_{t-1} v_t) v_t^T,      o_t = scale * S_t^T q_t.

    Args:
        q, k: [B, T, H, K]; v: [B, T, H, V], all one floating dtype (bf16/fp16 compute in float32).
        g: [B, T, H], log of the retention alpha_t (<= 0; 0 = no decay).
        beta: [B, T, H], the step size eta_t (>= 0). The update contracts along v_t when beta_t ||v_t||^2 <= 2.
        scale: multiplies q; None means K ** -0.5.
        initial_state: [N, H, K, V], or None for zeros.
        output_final_state: return the state after the last token (float32, or float64 for float64 input).
        mode: "reference" | "recurrent" | "chunk".
        chunk_size: chunk length C of the chunk form (a power of two).
        cu_seqlens: [N + 1] integer offsets of packed sequences (B = 1).

    Returns:
        o: [B, T, H, V] in the input dtype, and the final state [N, H, K, V] or None.
    """
    B, T, H, K, V = check_qkv(q, k, v)
    for name, x in (("g", g), ("beta", beta)):
        check_tensor(name, x, 3, "[B, T, H]")
    check_same_device(q=q, g=g, beta=beta)  # before any check that reads values
    check_log_gate("g", g, B, T, H, K, ("scalar",))
    check_token_scalar("beta", beta, B, T, H, low=0.0)
    check_scale(scale)
    check_initial_state(initial_state, (num_states(B, T, cu_seqlens), H, K, V), "[N, H, K, V]", q)
    tokens = {"q": scaled_queries(q, scale), "k": k, "v": v, "g": g, "beta": beta}
    return Call(tokens, q.dtype, initial_state, cu_seqlens=cu_seqlens)
