"""What every form of the delta-rule family shares: validation and the hand-off to the common frame. A form
is only its core (reference.py, recurrent.py, chunk.py); the public ops are in api.py.

Recurrence (regmem layout S = M^T, *Test-time regression*, arXiv:2501.12352, eq. (29) and (41)):
    S_t = (I - beta_t k_t k_t^T) (exp(g_t) ⊙ S_{t-1}) + beta_t k_t v_t^T,      o_t = scale * S_t^T q_t,
decay first, then the delta step. A scalar gate scales all of S; a diagonal gate scales the K rows of S.

Legend: B batch, T time, H heads, K key dim, V value dim, N sequences (N = B, or the number of sequences with
`cu_seqlens`). State S: [N, H, K, V].
"""

from __future__ import annotations

from regmem.ops.common import (
    check_initial_state,
    check_log_gate,
    check_qkv,
    check_same_device,
    check_scale,
    check_token_scalar,
    num_states,
    run_core,
    scaled_queries,
)


def require_gate(g) -> None:
    """The gated ops take a gate; the ungated case is `delta_rule`, not g=None."""
    if g is None:
        raise ValueError("g must be a log retention tensor of shape [B, T, H] or [B, T, H, K], got None "
                         "(use delta_rule for the ungated case)")


def run_delta(core, q, k, v, g, beta, *, scale, initial_state, output_final_state, cu_seqlens, **options):
    """Validates the inputs of a delta-rule op and runs `core` in the common frame.

    q, k: [B, T, H, K]; v: [B, T, H, V]; g: None, [B, T, H] or [B, T, H, K] log retention (<= 0);
    beta: [B, T, H] step size (>= 0; not capped, beta * ||k||^2 in (1, 2] gives negative eigenvalues);
    initial_state: [N, H, K, V] or None. The core gets q already multiplied by `scale`."""
    B, T, H, K, V = check_qkv(q, k, v)
    if g is not None:
        check_log_gate("g", g, B, T, H, K, ("scalar", "diagonal"))
        check_same_device(q=q, g=g)
    check_token_scalar("beta", beta, B, T, H, low=0.0)
    check_same_device(q=q, beta=beta)
    check_scale(scale)
    N = num_states(B, T, cu_seqlens)
    check_initial_state(initial_state, (N, H, K, V), "[N, H, K, V]", q)
    q_scaled = scaled_queries(q, scale)  # [B, T, H, K]
    return run_core(
        core, {"q": q_scaled, "k": k, "v": v, "g": g, "beta": beta}, initial_state,
        output_final_state=output_final_state, cu_seqlens=cu_seqlens, out_dtype=q.dtype, **options,
    )
