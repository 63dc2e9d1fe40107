"""The public ops of the delta-rule family: `delta_rule` and `gated_delta_rule`.

Each op validates its arguments here and runs one of the forms of reference.py, recurrent.py and chunk.py
(`op(..., mode=...)` or `op.reference / .recurrent / .chunk`); on CUDA with flash-linear-attention installed the
chunk form of both runs fla's kernel (fla_backend.py; `backend="auto"`, the default, or `backend="fla"`). The
parameterisations (parameterizations.py) and
DeltaProduct (product.py) are ops on the same forms. The math is in DERIVATION.md beside this file.

Recurrence (regmem layout S = M^T, *Test-time regression*, arXiv:2501.12352, eq. (29) and (41)):
    S_t = (I - beta_t k_t k_t^T) (exp(g_t) ⊙ S_{t-1}) + beta_t k_t v_t^T,      o_t = scale * S_t^T q_t,
decay first, then the delta step. A scalar gate scales all of S; a diagonal gate scales the K rows of S.

Shapes: q, k: [B, T, H, K]; v: [B, T, H, V]; g: [B, T, H] (scalar) or [B, T, H, K] (diagonal), log retention
(<= 0); beta: [B, T, H] (>= 0); state S: [N, H, K, V] with o_t = scale * S_t^T q_t (S = M^T of the paper);
N = B, or the number of sequences with `cu_seqlens` (then B = 1). `scale=None` means K ** -0.5.
"""

from __future__ import annotations

from regmem.ops.common import (
    Call,
    check_initial_state,
    check_log_gate,
    check_qkv,
    check_same_device,
    check_scale,
    check_token_scalar,
    num_states,
    op,
    scaled_queries,
)
from regmem.ops.delta.chunk import delta_chunk_core
from regmem.ops.delta.fla_backend import FLA
from regmem.ops.delta.recurrent import delta_recurrent_core
from regmem.ops.delta.reference import delta_reference_core

FORMS = {"reference": delta_reference_core, "recurrent": delta_recurrent_core, "chunk": delta_chunk_core}


def delta_call(q, k, v, g, beta, *, scale, initial_state, cu_seqlens, out_dtype=None, finish=None) -> Call:
    """Validates the inputs of the delta-rule kernel and hands them to its forms (every op of the family ends
    here). g: None, [B, T, H] or [B, T, H, K]; beta: [B, T, H]; initial_state: [N, H, K, V] or None.
    out_dtype: the output dtype (default: that of q); finish: as `Call.finish`."""
    B, T, H, K, V = check_qkv(q, k, v)
    if g is not None:
        check_log_gate("g", g, B, T, H, K, ("scalar", "diagonal"))
        if g.device != q.device:
            check_same_device(q=q, g=g)
    check_token_scalar("beta", beta, B, T, H, low=0.0)
    if beta.device != q.device:
        check_same_device(q=q, beta=beta)
    if scale is not None:
        check_scale(scale)
    N = B if cu_seqlens is None else num_states(B, T, cu_seqlens)
    if initial_state is not None:
        check_initial_state(initial_state, (N, H, K, V), "[N, H, K, V]", q)
    tokens = {"q": scaled_queries(q, scale), "k": k, "v": v, "g": g, "beta": beta}
    return Call(tokens, out_dtype or q.dtype, initial_state, cu_seqlens=cu_seqlens, finish=finish)


@op(**FORMS, backends={"fla": FLA})
def gated_delta_rule(q, k, v, g, beta, *, scale=None, initial_state=None, cu_seqlens=None):
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
        backend: "auto" (default: fla's `chunk_gated_delta_rule`, or `chunk_kda` for a diagonal gate, for the
            chunk form when the tensors are on CUDA and fla is installed; else torch), "torch" or "fla".

    Returns:
        o: [B, T, H, V] in the input dtype, and the final state [N, H, K, V] or None.
    """
    if g is None:  # the ungated case is its own op, not g=None
        raise ValueError("g must be a log retention tensor of shape [B, T, H] or [B, T, H, K], got None "
                         "(use delta_rule for the ungated case)")
    return delta_call(q, k, v, g, beta, scale=scale, initial_state=initial_state, cu_seqlens=cu_seqlens)


@op(**FORMS, backends={"fla": FLA})
def delta_rule(q, k, v, beta, *, scale=None, initial_state=None, cu_seqlens=None):
    """Delta rule (DeltaNet; Schlag et al. 2021, Yang et al. 2024 arXiv:2406.06484): eq. (26)-(29) of
    *Test-time regression* (arXiv:2501.12352), one SGD step per token on 1/2 ||v_t - M k_t||^2 from M_{t-1}.

    S_t = (I - beta_t k_t k_t^T) S_{t-1} + beta_t k_t v_t^T and o_t = scale * S_t^T q_t.

    Args:
        q, k: [B, T, H, K]; v: [B, T, H, V]; beta: [B, T, H] step size, >= 0 (not capped).
        scale, initial_state ([N, H, K, V]), output_final_state, mode, chunk_size, cu_seqlens, backend: as
            `gated_delta_rule` (fla's `chunk_delta_rule`).

    Returns:
        o: [B, T, H, V] in the input dtype, and the final state [N, H, K, V] or None.
    """
    return delta_call(q, k, v, None, beta, scale=scale, initial_state=initial_state, cu_seqlens=cu_seqlens)
