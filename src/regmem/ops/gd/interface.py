"""What every form of multi-step gradient descent shares: the state tuple, validation, and the hand-off to the
common frame. A form is only its core (reference.py, recurrent.py, chunk.py).

State layout (DESIGN.md): `GDStats(R, C)`, the sufficient statistics of the least-squares loss
L_t(S) = 1/2 sum_{s<=t} ||v_s - S^T k_s||^2 (ttr.md §2.2 L7, implementation note):
    R: [N, H, K, K], R_t = sum_{s<=t} k_s k_s^T          C: [N, H, K, V], C_t = sum_{s<=t} k_s v_s^T
(C is the paper's V_t^T K_t transposed into regmem's layout). Both are prefix sums, so state passing and varlen
packing are exact; a zero (padding) token leaves them unchanged. N = B, or the number of sequences with
`cu_seqlens`.
"""

from __future__ import annotations

from typing import NamedTuple

import torch

from regmem.ops.common import (
    check_qkv,
    check_same_device,
    check_scale,
    check_state_tuple,
    check_tensor,
    check_token_scalar,
    num_states,
    run_core,
    scaled_queries,
)


class GDStats(NamedTuple):
    """State of multi-step GD: R: [N, H, K, K] = sum_s k_s k_s^T and C: [N, H, K, V] = sum_s k_s v_s^T."""

    R: torch.Tensor
    C: torch.Tensor


def run_multi_step_gd(core, q, k, v, beta, *, scale, initial_state, output_final_state, cu_seqlens, **options):
    """S_t^(i) = S_t^(i-1) - beta_t^(i) (R_t S_t^(i-1) - C_t) from S_t^(0) = 0, o_t = scale * (S_t^(I))^T q_t
    (see api.multi_step_gd)."""
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
    q_scaled = scaled_queries(q, scale)  # [B, T, H, K]
    return run_core(
        core, {"q": q_scaled, "k": k, "v": v, "beta": beta}, initial_state, output_final_state=output_final_state,
        cu_seqlens=cu_seqlens, out_dtype=q.dtype, **options,
    )
