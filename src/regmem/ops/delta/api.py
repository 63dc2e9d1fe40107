"""Public ops of the delta-rule family and their named forms.

`gated_delta_rule` and `delta_rule` dispatch on `mode`; each form is also callable by name
(`gated_delta_rule_reference`, `gated_delta_rule_recurrent`, `gated_delta_rule_chunk`, and likewise
`delta_rule_*`). The parameterisations (parameterizations.py) and DeltaProduct (product.py) call these.
See DERIVATION.md beside this file for the math.

Shapes: q, k: [B, T, H, K]; v: [B, T, H, V]; g: [B, T, H] (scalar) or [B, T, H, K] (diagonal), log retention
(<= 0); beta: [B, T, H] (>= 0); state S: [N, H, K, V] with o_t = scale * S_t^T q_t (S = M^T of the paper);
N = B, or the number of sequences with `cu_seqlens` (then B = 1). `scale=None` means K ** -0.5.
"""

from __future__ import annotations

from regmem.ops.common import check_chunk_size, dispatch
from regmem.ops.delta.chunk import delta_chunk_core
from regmem.ops.delta.interface import require_gate, run_delta
from regmem.ops.delta.recurrent import delta_recurrent_core
from regmem.ops.delta.reference import delta_reference_core


def gated_delta_rule(
    q, k, v, g, beta, *, scale=None, initial_state=None, output_final_state=False, mode="chunk", chunk_size=64,
    cu_seqlens=None,
):
    """Gated delta rule (Gated DeltaNet, arXiv:2412.06464; with a diagonal gate, Kimi Delta Attention):
    eq. (38)-(41) of *Test-time regression* (arXiv:2501.12352), L2-regularised least squares solved by
    streaming SGD with a coupled weight decay.

    S_t = (I - beta_t k_t k_t^T)(exp(g_t) ⊙ S_{t-1}) + beta_t k_t v_t^T and o_t = scale * S_t^T q_t.

    Args:
        q, k: [B, T, H, K]; v: [B, T, H, V], all one floating dtype (bf16/fp16 compute in float32).
        g: log retention (<= 0), scalar [B, T, H] or diagonal [B, T, H, K] (scales the K rows of S).
        beta: [B, T, H] step size, >= 0. Not capped: with ||k|| = 1, beta in (1, 2] gives the transition a
            negative eigenvalue 1 - beta (Grazzi et al. 2024); beta > 2 / ||k||^2 makes it expansive.
        scale: multiplies q; None means K ** -0.5.
        initial_state: [N, H, K, V] or None for zeros.
        output_final_state: return the state after the last token (float32, or float64 for float64 input).
        mode: "reference" | "recurrent" | "chunk".
        chunk_size: chunk length C of the chunk form (a power of two).
        cu_seqlens: [N + 1] integer offsets of packed sequences (B = 1).

    Returns:
        o: [B, T, H, V] in the input dtype, and the final state [N, H, K, V] or None.
    """
    check_chunk_size(chunk_size)
    forms = {
        "reference": gated_delta_rule_reference,
        "recurrent": gated_delta_rule_recurrent,
        "chunk": gated_delta_rule_chunk,
    }
    return dispatch(
        mode, forms, chunk_size, q=q, k=k, v=v, g=g, beta=beta, scale=scale, initial_state=initial_state,
        output_final_state=output_final_state, cu_seqlens=cu_seqlens,
    )


def delta_rule(
    q, k, v, beta, *, scale=None, initial_state=None, output_final_state=False, mode="chunk", chunk_size=64,
    cu_seqlens=None,
):
    """Delta rule (DeltaNet; Schlag et al. 2021, Yang et al. 2024 arXiv:2406.06484): eq. (26)-(29) of
    *Test-time regression* (arXiv:2501.12352), one SGD step per token on 1/2 ||v_t - M k_t||^2 from M_{t-1}.

    S_t = (I - beta_t k_t k_t^T) S_{t-1} + beta_t k_t v_t^T and o_t = scale * S_t^T q_t.

    Args:
        q, k: [B, T, H, K]; v: [B, T, H, V]; beta: [B, T, H] step size, >= 0 (not capped).
        scale, initial_state ([N, H, K, V]), output_final_state, mode, chunk_size, cu_seqlens: as
            `gated_delta_rule`.

    Returns:
        o: [B, T, H, V] in the input dtype, and the final state [N, H, K, V] or None.
    """
    check_chunk_size(chunk_size)
    forms = {"reference": delta_rule_reference, "recurrent": delta_rule_recurrent, "chunk": delta_rule_chunk}
    return dispatch(
        mode, forms, chunk_size, q=q, k=k, v=v, beta=beta, scale=scale, initial_state=initial_state,
        output_final_state=output_final_state, cu_seqlens=cu_seqlens,
    )


def gated_delta_rule_reference(
    q, k, v, g, beta, *, scale=None, initial_state=None, output_final_state=False, cu_seqlens=None
):
    """`gated_delta_rule` by its definition: M_t = M_{t-1} diag(e^{g_t})(I - beta_t k_t k_t^T) + beta_t v_t k_t^T
    with the [K, K] transition materialised per token."""
    require_gate(g)
    return run_delta(
        delta_reference_core, q, k, v, g, beta, scale=scale, initial_state=initial_state,
        output_final_state=output_final_state, cu_seqlens=cu_seqlens,
    )


def gated_delta_rule_recurrent(
    q, k, v, g, beta, *, scale=None, initial_state=None, output_final_state=False, cu_seqlens=None
):
    """`gated_delta_rule` one token at a time, as rank-1 updates (the decoding form)."""
    require_gate(g)
    return run_delta(
        delta_recurrent_core, q, k, v, g, beta, scale=scale, initial_state=initial_state,
        output_final_state=output_final_state, cu_seqlens=cu_seqlens,
    )


def gated_delta_rule_chunk(
    q, k, v, g, beta, *, scale=None, initial_state=None, output_final_state=False, chunk_size=64, cu_seqlens=None
):
    """`gated_delta_rule` chunk-parallel by the WY/UT representation (the training form)."""
    check_chunk_size(chunk_size)
    require_gate(g)
    return run_delta(
        delta_chunk_core, q, k, v, g, beta, scale=scale, initial_state=initial_state,
        output_final_state=output_final_state, cu_seqlens=cu_seqlens, chunk_size=chunk_size,
    )


def delta_rule_reference(q, k, v, beta, *, scale=None, initial_state=None, output_final_state=False, cu_seqlens=None):
    """`delta_rule` by its definition: M_t = M_{t-1}(I - beta_t k_t k_t^T) + beta_t v_t k_t^T, per token."""
    return run_delta(
        delta_reference_core, q, k, v, None, beta, scale=scale, initial_state=initial_state,
        output_final_state=output_final_state, cu_seqlens=cu_seqlens,
    )


def delta_rule_recurrent(q, k, v, beta, *, scale=None, initial_state=None, output_final_state=False, cu_seqlens=None):
    """`delta_rule` one token at a time (the decoding form)."""
    return run_delta(
        delta_recurrent_core, q, k, v, None, beta, scale=scale, initial_state=initial_state,
        output_final_state=output_final_state, cu_seqlens=cu_seqlens,
    )


def delta_rule_chunk(
    q, k, v, beta, *, scale=None, initial_state=None, output_final_state=False, chunk_size=64, cu_seqlens=None
):
    """`delta_rule` chunk-parallel by the WY/UT representation (the training form)."""
    check_chunk_size(chunk_size)
    return run_delta(
        delta_chunk_core, q, k, v, None, beta, scale=scale, initial_state=initial_state,
        output_final_state=output_final_state, cu_seqlens=cu_seqlens, chunk_size=chunk_size,
    )
