"""The public op of the momentum-delta-rule family (Titans linear memory), `momentum_delta_rule`.

It validates its arguments here and runs one of the forms of reference.py, recurrent.py and chunk.py
(`momentum_delta_rule(..., mode=...)` or `momentum_delta_rule.reference / .recurrent / .chunk`). The math is in
DERIVATION.md beside this file; the state `MomentumState` in state.py.

Shapes: q, k: [B, T, H, K]; v: [B, T, H, V]; g, log_mu: [B, T, H] log retention (<= 0); beta: [B, T, H] (>= 0);
state MomentumState(S, P), both [N, H, K, V], with o_t = scale * S_t^T q_t; N = B, or the number of sequences with
`cu_seqlens` (then B = 1). `scale=None` means K ** -0.5.
"""

from __future__ import annotations

import torch

from regmem.ops.common import (
    Call,
    check_log_gate,
    check_qkv,
    check_same_device,
    check_scale,
    check_state_tuple,
    check_tensor,
    check_token_scalar,
    compute_dtype,
    num_states,
    op,
    renamed_argument,
    scaled_queries,
)
from regmem.ops.momentum_delta.chunk import momentum_chunk_core
from regmem.ops.momentum_delta.recurrent import momentum_recurrent_core
from regmem.ops.momentum_delta.reference import momentum_reference_core
from regmem.ops.momentum_delta.state import MomentumState


@op(reference=momentum_reference_core, recurrent=momentum_recurrent_core, chunk=momentum_chunk_core)
def momentum_delta_rule(q, k, v, g, beta, log_mu=None, *, scale=None, initial_state=None, cu_seqlens=None,
                        token_mask=None, log_eta=None):
    """The Titans linear memory (Behrouz et al., arXiv:2501.00663, Sec. 3.1, eqs. 9-15):
    SGD with momentum and decoupled weight decay on l_t(M) = 1/2 ||v_t - M k_t||^2, one step per token.

    In the paper's orientation, P_t = eta_t P_{t-1} + theta_t (v_t - M_{t-1} k_t) k_t^T,
    M_t = (1 - alpha_t) M_{t-1} + P_t, y_t = M_t q_t. In regmem's layout (S = M^T, P stored transposed):
        e_t = v_t - S_{t-1}^T k_t,  P_t = exp(log_mu_t) P_{t-1} + beta_t k_t e_t^T,
        S_t = exp(g_t) S_{t-1} + P_t,  o_t = scale * S_t^T q_t.

    Args:
        q, k: [B, T, H, K]; v: [B, T, H, V], all one floating dtype (bf16/fp16 compute in float32).
        g: [B, T, H], log of the memory retention 1 - alpha_t (<= 0; 0 = no weight decay).
        beta: [B, T, H], the step size theta_t (>= 0).
        log_mu: [B, T, H], log of the momentum retention mu_t, Titans' eta_t (<= 0; very negative = no momentum,
            the decoupled gated delta rule). Required; it was `log_eta`, now a deprecated alias (CHANGELOG.md): regmem
            keeps eta for step sizes and mu for momentum retentions.
        scale: multiplies q; None means K ** -0.5.
        initial_state: MomentumState(S, P), both [N, H, K, V], or None for zeros.
        output_final_state: return the MomentumState after the last token (float32, or float64 for float64 input).
        mode: "reference" | "recurrent" | "chunk".
        chunk_size: chunk length C of the chunk form (a power of two).
        cu_seqlens: [N + 1] integer offsets of packed sequences (B = 1).
        token_mask: [B, T] bool, False at padded tokens, or None. A padded token with g = log_mu = beta = 0 leaves
            (S, P) unchanged (state.py: S_t = gamma_t S_{t-1} + live_t P_t with live_t = 0); without the mask it
            would still add the momentum P to S.

    Returns:
        o: [B, T, H, V] in the input dtype, and the final MomentumState or None.
    """
    B, T, H, K, V = check_qkv(q, k, v)
    log_mu = renamed_argument("momentum_delta_rule", "log_mu", log_mu, "log_eta", log_eta)
    if log_mu is None:
        raise ValueError("log_mu (the log momentum retention [B, T, H]) is required")
    for name, x in (("g", g), ("beta", beta), ("log_mu", log_mu)):
        check_tensor(name, x, 3, "[B, T, H]")
    check_same_device(q=q, g=g, beta=beta, log_mu=log_mu)  # before any check that reads values
    check_log_gate("g", g, B, T, H, K, ("scalar",))
    check_log_gate("log_mu", log_mu, B, T, H, K, ("scalar",))
    check_token_scalar("beta", beta, B, T, H, low=0.0)
    check_scale(scale)
    N = num_states(B, T, cu_seqlens)
    kv = ((N, H, K, V), "[N, H, K, V]")
    check_state_tuple(initial_state, MomentumState, {"S": kv, "P": kv}, q)
    live = torch.ones_like(beta, dtype=compute_dtype(q)) if cu_seqlens is not None else None  # 0 on padding
    if token_mask is not None:
        if token_mask.dtype != torch.bool or tuple(token_mask.shape) != (B, T):
            raise ValueError(f"token_mask must be a bool tensor of shape [B, T] = {[B, T]}, "
                             f"got {token_mask.dtype} of shape {list(token_mask.shape)}")
        live = token_mask.unsqueeze(-1).expand(B, T, H).to(compute_dtype(q))  # [B, T, H]
    tokens = {"q": scaled_queries(q, scale), "k": k, "v": v, "g": g, "beta": beta, "log_mu": log_mu, "live": live}
    return Call(tokens, q.dtype, initial_state, cu_seqlens=cu_seqlens)
