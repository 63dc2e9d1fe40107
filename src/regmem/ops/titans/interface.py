"""What every form of the momentum delta rule (Titans linear memory) shares: the state tuple, validation, and
the hand-off to the common frame. A form is only its core (reference.py, recurrent.py, chunk.py).

State layout (DESIGN.md): `MomentumState(S, P)`, both [N, H, K, V], in regmem's transposed orientation:
S = M^T is the memory read as o_t = scale * S_t^T q_t, and P is the transpose of the paper's momentum ("surprise")
matrix. N = B, or the number of sequences with `cu_seqlens`.

Varlen: the common frame pads each packed sequence with zero tokens. A zero token is not neutral for this
recurrence (S_t = gamma S_{t-1} + P_t keeps adding the momentum), so with `cu_seqlens` the frame also carries
`live` = 1 per real token (0 on padding) and the cores write S_t = gamma_t S_{t-1} + live_t P_t; with g = log_eta
= beta = 0 on padding this leaves (S, P) unchanged. The chunk form uses the same mask for its own padding.
"""

from __future__ import annotations

from typing import NamedTuple

import torch

from regmem.ops.common import (
    check_log_gate,
    check_qkv,
    check_same_device,
    check_scale,
    check_state_tuple,
    check_tensor,
    check_token_scalar,
    compute_dtype,
    num_states,
    run_core,
    scaled_queries,
)


class MomentumState(NamedTuple):
    """State of the momentum delta rule: S: [N, H, K, V] the memory (S = M^T, o_t = scale * S_t^T q_t) and
    P: [N, H, K, V] the momentum of the memory's updates (the paper's surprise S_t, transposed)."""

    S: torch.Tensor
    P: torch.Tensor


def run_momentum_delta_rule(
    core, q, k, v, g, beta, log_eta, *, scale, initial_state, output_final_state, cu_seqlens, **options
):
    """e_t = v_t - S_{t-1}^T k_t, P_t = exp(log_eta_t) P_{t-1} + beta_t k_t e_t^T,
    S_t = exp(g_t) S_{t-1} + P_t, o_t = scale * S_t^T q_t (see api.momentum_delta_rule)."""
    B, T, H, K, V = check_qkv(q, k, v)
    for name, x in (("g", g), ("beta", beta), ("log_eta", log_eta)):
        check_tensor(name, x, 3, "[B, T, H]")
    check_same_device(q=q, g=g, beta=beta, log_eta=log_eta)  # before any check that reads values
    check_log_gate("g", g, B, T, H, K, ("scalar",))
    check_log_gate("log_eta", log_eta, B, T, H, K, ("scalar",))
    check_token_scalar("beta", beta, B, T, H, low=0.0)
    check_scale(scale)
    N = num_states(B, T, cu_seqlens)
    kv = ((N, H, K, V), "[N, H, K, V]")
    check_state_tuple(initial_state, MomentumState, {"S": kv, "P": kv}, q)
    dtype = compute_dtype(q)
    q_scaled = scaled_queries(q, scale)  # [B, T, H, K]
    live = torch.ones_like(beta, dtype=dtype) if cu_seqlens is not None else None  # [B, T, H], 0 on padding
    tokens = {"q": q_scaled, "k": k, "v": v, "g": g, "beta": beta, "log_eta": log_eta, "live": live}
    return run_core(
        core, tokens, initial_state, output_final_state=output_final_state, cu_seqlens=cu_seqlens,
        out_dtype=q.dtype, **options,
    )
