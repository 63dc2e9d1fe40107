"""The public op of the Omega rule, `omega_rule`.

It validates its arguments here and runs one of the forms of reference.py, recurrent.py and chunk.py
(`omega_rule(..., mode=...)` or `omega_rule.reference / .recurrent / .chunk`). The math is in DERIVATION.md beside
this file; the state `OmegaState` in state.py.

Shapes: q, k: [B, T, H, K]; v: [B, T, H, V]; g: [B, T, H] log retention (<= 0); beta, gamma: [B, T, H] (>= 0);
state OmegaState(S [N, H, K, V], k [N, H, window - 1, K], v [N, H, window - 1, V], gamma [N, H, window - 1]) with
o_t = scale * S_t^T q_t; N = B, or the number of sequences with `cu_seqlens` (then B = 1). `scale=None` means
K ** -0.5.
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
    scaled_queries,
)
from regmem.ops.omega.chunk import omega_chunk_core
from regmem.ops.omega.recurrent import omega_recurrent_core
from regmem.ops.omega.reference import omega_reference_core
from regmem.ops.omega.state import OmegaState


@op(reference=omega_reference_core, recurrent=omega_recurrent_core, chunk=omega_chunk_core)
def omega_rule(q, k, v, g, beta, gamma, *, window, scale=None, initial_state=None, cu_seqlens=None):
    """The Omega rule for a linear memory: one gradient step per token on the weighted l2 loss of the last `window`
    tokens (Atlas, Behrouz et al., arXiv:2505.23735, Sec. 3; *Nested Learning*, arXiv:2512.24695, Sec. 5, eq. 68).

    In the paper's orientation M: [V, K], with l(M; k, v) = 1/2 ||M k - v||^2 (Atlas writes no 1/2; its factor 2 is
    absorbed in eta):
        M_t = alpha_t M_{t-1} - eta_t sum_{i=t-c+1}^{t} gamma_i (M_{t-1} k_i - v_i) k_i^T,      y_t = M_t q_t.
    In regmem's layout S = M^T:
        S_t = exp(g_t) S_{t-1} + beta_t sum_{i=t-c+1}^{t} gamma_i k_i (v_i - S_{t-1}^T k_i)^T,  o_t = scale * S_t^T q_t.
    window = 1 is the decoupled gated delta rule with step beta_t gamma_t.
    The papers weight each cached token by gamma_{t,i}, one weight per step t and token i (Atlas Sec. 3; *Nested
    Learning* Sec. 5: M_t = alpha_t M_{t-1} - sum_i gamma_{t,i} grad l(M; k_i, v_i)). regmem factors it as
    gamma_{t,i} = beta_t gamma_i: a step size per step times a weight per token, the same in every window that holds
    the token. That is Atlas's own parametrisation (its eta_t and input-dependent gates gamma_i) and what keeps the
    chunk form a solve of one system per chunk; a weight that depends on both (e.g. on t - i) is not expressible here.

    Args:
        q, k: [B, T, H, K]; v: [B, T, H, V], all one floating dtype (bf16/fp16 compute in float32).
        g: [B, T, H], log of the retention alpha_t (<= 0; 0 = no decay).
        beta: [B, T, H], the step size eta_t of the update at token t (>= 0).
        gamma: [B, T, H], the weight gamma_i of token i in every window that contains it (>= 0; Atlas's gates lie
            in [0, 1]).
        window: c >= 1, the number of most recent tokens (the current one included) in the windowed loss.
        scale: multiplies q; None means K ** -0.5.
        initial_state: OmegaState(S [N, H, K, V], k [N, H, window - 1, K], v [N, H, window - 1, V],
            gamma [N, H, window - 1]), or None for zeros (an empty window).
        output_final_state: return the OmegaState after the last token (float32, or float64 for float64 input).
        mode: "reference" | "recurrent" | "chunk" (the chunk form solves a (C * window)-sized system per chunk).
        chunk_size: chunk length C of the chunk form (a power of two).
        cu_seqlens: [N + 1] integer offsets of packed sequences (B = 1).

    Returns:
        o: [B, T, H, V] in the input dtype, and the final OmegaState or None.
    """
    B, T, H, K, V = check_qkv(q, k, v)
    if isinstance(window, bool) or not isinstance(window, int) or window < 1:
        raise ValueError(f"window must be an int >= 1, got {window!r}")
    for name, x in (("g", g), ("beta", beta), ("gamma", gamma)):
        check_tensor(name, x, 3, "[B, T, H]")
    check_same_device(q=q, g=g, beta=beta, gamma=gamma)  # before any check that reads values
    check_log_gate("g", g, B, T, H, K, ("scalar",))
    check_token_scalar("beta", beta, B, T, H, low=0.0)
    check_token_scalar("gamma", gamma, B, T, H, low=0.0)
    check_scale(scale)
    N, c = num_states(B, T, cu_seqlens), window - 1
    check_state_tuple(initial_state, OmegaState, {
        "S": ((N, H, K, V), "[N, H, K, V]"), "k": ((N, H, c, K), "[N, H, window - 1, K]"),
        "v": ((N, H, c, V), "[N, H, window - 1, V]"), "gamma": ((N, H, c), "[N, H, window - 1]"),
    }, q)
    live = torch.ones_like(beta, dtype=compute_dtype(q)) if cu_seqlens is not None else None  # 0 on padding
    tokens = {"q": scaled_queries(q, scale), "k": k, "v": v, "g": g, "beta": beta, "gamma": gamma, "live": live}
    return Call(tokens, q.dtype, initial_state, options={"window": window}, cu_seqlens=cu_seqlens)
