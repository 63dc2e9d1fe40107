"""Public op of the momentum-delta-rule family (Titans linear memory) and its named forms.

`momentum_delta_rule` dispatches on `mode`; each form is also callable by name (`momentum_delta_rule_reference`,
`momentum_delta_rule_recurrent`, `momentum_delta_rule_chunk`). See DERIVATION.md beside this file for the math.

Shapes: q, k: [B, T, H, K]; v: [B, T, H, V]; g, log_eta: [B, T, H] log retention (<= 0); beta: [B, T, H] (>= 0);
state MomentumState(S, P), both [N, H, K, V], with o_t = scale * S_t^T q_t; N = B, or the number of sequences with
`cu_seqlens` (then B = 1). `scale=None` means K ** -0.5.
"""

from __future__ import annotations

from regmem.ops.common import check_chunk_size, dispatch
from regmem.ops.titans.chunk import momentum_chunk_core
from regmem.ops.titans.interface import run_momentum_delta_rule
from regmem.ops.titans.recurrent import momentum_recurrent_core
from regmem.ops.titans.reference import momentum_reference_core


def momentum_delta_rule(
    q, k, v, g, beta, log_eta, *, scale=None, initial_state=None, output_final_state=False, mode="chunk",
    chunk_size=64, cu_seqlens=None,
):
    """The Titans linear memory (Behrouz et al., arXiv:2501.00663, Sec. 3.1, eqs. 9-15; ttr.md §2.2 L16):
    SGD with momentum and decoupled weight decay on l_t(M) = 1/2 ||v_t - M k_t||^2, one step per token.

    In the paper's orientation, P_t = eta_t P_{t-1} + theta_t (v_t - M_{t-1} k_t) k_t^T,
    M_t = (1 - alpha_t) M_{t-1} + P_t, y_t = M_t q_t. In regmem's layout (S = M^T, P stored transposed):
        e_t = v_t - S_{t-1}^T k_t,  P_t = exp(log_eta_t) P_{t-1} + beta_t k_t e_t^T,
        S_t = exp(g_t) S_{t-1} + P_t,  o_t = scale * S_t^T q_t.

    Args:
        q, k: [B, T, H, K]; v: [B, T, H, V], all one floating dtype (bf16/fp16 compute in float32).
        g: [B, T, H], log of the memory retention 1 - alpha_t (<= 0; 0 = no weight decay).
        beta: [B, T, H], the step size theta_t (>= 0).
        log_eta: [B, T, H], log of the momentum retention eta_t (<= 0; very negative = no momentum, the
            decoupled gated delta rule).
        scale: multiplies q; None means K ** -0.5.
        initial_state: MomentumState(S, P), both [N, H, K, V], or None for zeros.
        output_final_state: return the MomentumState after the last token (float32, or float64 for float64 input).
        mode: "reference" | "recurrent" | "chunk".
        chunk_size: chunk length C of the chunk form (a power of two).
        cu_seqlens: [N + 1] integer offsets of packed sequences (B = 1).

    Returns:
        o: [B, T, H, V] in the input dtype, and the final MomentumState or None.
    """
    check_chunk_size(chunk_size)
    forms = {
        "reference": momentum_delta_rule_reference,
        "recurrent": momentum_delta_rule_recurrent,
        "chunk": momentum_delta_rule_chunk,
    }
    return dispatch(
        mode, forms, chunk_size, q=q, k=k, v=v, g=g, beta=beta, log_eta=log_eta, scale=scale,
        initial_state=initial_state, output_final_state=output_final_state, cu_seqlens=cu_seqlens,
    )


def momentum_delta_rule_reference(
    q, k, v, g, beta, log_eta, *, scale=None, initial_state=None, output_final_state=False, cu_seqlens=None
):
    """`momentum_delta_rule` by its definition: the paper's update, one token at a time, in the paper's layout."""
    return run_momentum_delta_rule(
        momentum_reference_core, q, k, v, g, beta, log_eta, scale=scale, initial_state=initial_state,
        output_final_state=output_final_state, cu_seqlens=cu_seqlens,
    )


def momentum_delta_rule_recurrent(
    q, k, v, g, beta, log_eta, *, scale=None, initial_state=None, output_final_state=False, cu_seqlens=None
):
    """`momentum_delta_rule` one token at a time in regmem's layout (the decoding form)."""
    return run_momentum_delta_rule(
        momentum_recurrent_core, q, k, v, g, beta, log_eta, scale=scale, initial_state=initial_state,
        output_final_state=output_final_state, cu_seqlens=cu_seqlens,
    )


def momentum_delta_rule_chunk(
    q, k, v, g, beta, log_eta, *, scale=None, initial_state=None, output_final_state=False, chunk_size=64,
    cu_seqlens=None,
):
    """`momentum_delta_rule` chunk-parallel (the training form)."""
    check_chunk_size(chunk_size)
    return run_momentum_delta_rule(
        momentum_chunk_core, q, k, v, g, beta, log_eta, scale=scale, initial_state=initial_state,
        output_final_state=output_final_state, cu_seqlens=cu_seqlens, chunk_size=chunk_size,
    )
