"""Public op of the second-order HLA family and its named forms.

`hla2` dispatches on `mode`; each form is also callable by name (`hla2_reference`, `hla2_recurrent`,
`hla2_chunk`). The math is in spec hla.md §1-2 and in the docstrings of reference.py and chunk.py.

Shapes: q, k: [B, T, H, K]; v: [B, T, H, V]; decay: [H] or None; state HLA2State(S [N, H, K, K], C [N, H, K, V],
m [N, H, K], G [N, H, K, V], h [N, H, K]); N = B, or the number of sequences with `cu_seqlens` (then B = 1).
`scale=None` means K ** -0.5.
"""

from __future__ import annotations

from regmem.ops.common import check_chunk_size, dispatch
from regmem.ops.hla.chunk import hla2_chunk_core
from regmem.ops.hla.interface import run_hla2
from regmem.ops.hla.recurrent import hla2_recurrent_core
from regmem.ops.hla.reference import hla2_reference_core


def hla2(
    q, k, v, *, masked=True, decay=None, scale=None, initial_state=None, output_final_state=False, mode="chunk",
    chunk_size=64, cu_seqlens=None, normalize=False, eps=1e-6, ridge=0.0,
):
    """Second-order higher-order linear attention, strictly causal by default: eq 3.3 (Theorem 3.1) of
    *Higher-order Linear Attention* (arXiv:2510.27258), with the optional decay of sec. 4.3; unnormalised unless
    `normalize` (eq 3.4), optionally with the ridge read-out of Alg. 1.

        o_t = q_t^T (S_t C_t - G_t) = sum_{j<=t} sum_{i<=j} (q_t.k_i)(q_j.k_i) v_j     (gamma = 1)

    with S, C, G the prefix summaries of HLA2State; with decay the op is defined by the serial recurrence of
    recurrent.py. Equivalently (gamma = 1) F_t = F_{t-1} + (S_t q_t) v_t^T and o_t = q_t^T F_t.

    Args:
        q, k: [B, T, H, K]; v: [B, T, H, V], all one floating dtype (bf16/fp16 compute in float32).
        masked: True for the strictly causal eq 3.3; False for eq 3.1, o_t = q_t^T S_t C_t (every pair i, j <= t;
            the state is the same 5-tuple).
        decay: [H] per-head log retention (<= 0, gamma = exp(decay)), or None for gamma = 1.
        scale: multiplies q; None means K ** -0.5.
        initial_state: HLA2State of earlier tokens (shapes above), or None for zeros.
        output_final_state: return the HLA2State after the last token (float32, or float64 for float64 input).
        mode: "reference" | "recurrent" | "chunk".
        chunk_size: chunk length C of the chunk form (a power of two).
        cu_seqlens: [N + 1] integer offsets of packed sequences (B = 1).
        normalize: the ratio normalisation of eq 3.4, o_t = num_t / den_t with num_t the output above and
            den_t = q_t^T (S_t m_t - h_t) (unmasked q_t^T S_t m_t), i.e. the output for v = 1. The denominator is
            sign-safe: num_t / (den_t + eps * sign(den_t)), sign(0) := +1, so a negative den_t becomes den_t - eps.
        eps: the denominator's guard (> 0; only used with normalize).
        ridge: lambda >= 0 of the stabilised read-out S_eff = S_t + lambda I (Alg. 1), in the read-out only:
            adds lambda q_t^T C_t to the output (lambda q_t^T m_t to den_t). The paper calls this a stabilised
            variant; for lambda > 0 it is not the exact masked operator. The state is unchanged by it.

    Returns:
        o: [B, T, H, V] in the input dtype, and the final HLA2State or None.
    """
    check_chunk_size(chunk_size)
    forms = {"reference": hla2_reference, "recurrent": hla2_recurrent, "chunk": hla2_chunk}
    return dispatch(
        mode, forms, chunk_size, q=q, k=k, v=v, masked=masked, decay=decay, scale=scale, initial_state=initial_state,
        output_final_state=output_final_state, cu_seqlens=cu_seqlens, normalize=normalize, eps=eps, ridge=ridge,
    )


def hla2_reference(q, k, v, *, masked=True, decay=None, scale=None, initial_state=None, output_final_state=False,
                   cu_seqlens=None, normalize=False, eps=1e-6, ridge=0.0):
    """`hla2` by its definition: ((W W^T) ⊙ L) V, or the decayed summaries of every prefix (O(T^2))."""
    return run_hla2(
        hla2_reference_core, q, k, v, masked=masked, decay=decay, scale=scale, initial_state=initial_state,
        output_final_state=output_final_state, cu_seqlens=cu_seqlens, normalize=normalize, eps=eps, ridge=ridge,
    )


def hla2_recurrent(q, k, v, *, masked=True, decay=None, scale=None, initial_state=None, output_final_state=False,
                   cu_seqlens=None, normalize=False, eps=1e-6, ridge=0.0):
    """`hla2` one token at a time by the paper's 5-tuple updates (the decoding form)."""
    return run_hla2(
        hla2_recurrent_core, q, k, v, masked=masked, decay=decay, scale=scale, initial_state=initial_state,
        output_final_state=output_final_state, cu_seqlens=cu_seqlens, normalize=normalize, eps=eps, ridge=ridge,
    )


def hla2_chunk(q, k, v, *, masked=True, decay=None, scale=None, initial_state=None, output_final_state=False,
               chunk_size=64, cu_seqlens=None, normalize=False, eps=1e-6, ridge=0.0):
    """`hla2` chunk-parallel (the training form)."""
    check_chunk_size(chunk_size)
    return run_hla2(
        hla2_chunk_core, q, k, v, masked=masked, decay=decay, scale=scale, initial_state=initial_state,
        output_final_state=output_final_state, cu_seqlens=cu_seqlens, chunk_size=chunk_size, normalize=normalize,
        eps=eps, ridge=ridge,
    )
