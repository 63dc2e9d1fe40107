"""Recurrent form of the (gated) delta rule: one rank-1 state update per token, constant memory in T.

Implements eq. (29)/(41) of *Test-time regression* (Wang, Shi, Fox; arXiv:2501.12352) in regmem's layout
S = M^T, as the error-correcting (LMS) update of Schlag et al. 2021 / Yang et al. 2024 (arXiv:2406.06484, eq. 1):
    S'_t = exp(g_t) ⊙ S_{t-1}                      (decay: scalar, or per K row for a diagonal gate)
    u_t  = beta_t (v_t - S'_t^T k_t)               (the scaled prediction error, the "pseudo-value")
    S_t  = S'_t + k_t u_t^T,                        o_t = S_t^T q_t.
This is the form decoding uses.

Legend: B batch, T time, H heads, K key dim, V value dim.
"""

from __future__ import annotations

import torch


def delta_recurrent_core(q, k, v, g, beta, *, initial_state):
    """q, k: [B, T, H, K] (q already scaled); v: [B, T, H, V]; g: None, [B, T, H] or [B, T, H, K];
    beta: [B, T, H]; initial_state: [B, H, K, V] or None. Returns o: [B, T, H, V] and S_T: [B, H, K, V]."""
    B, T, H, K = q.shape
    S = initial_state if initial_state is not None else q.new_zeros(B, H, K, v.shape[-1])
    # unbind, not q[:, t]: the backward of indexing would zero-fill all of q once per token (O(T^2)).
    gates = g.unbind(dim=1) if g is not None else [None] * T
    outputs = []
    for q_t, k_t, v_t, g_t, beta_t in zip(
        q.unbind(dim=1), k.unbind(dim=1), v.unbind(dim=1), gates, beta.unbind(dim=1), strict=True
    ):
        if g_t is not None:
            alpha = torch.exp(g_t)  # [B, H] or [B, H, K]
            S = (alpha[..., None, None] if g_t.ndim == 2 else alpha[..., None]) * S  # [B, H, K, V]
        u = beta_t.unsqueeze(-1) * (v_t - torch.einsum("bhk,bhkv->bhv", k_t, S))  # [B, H, V]
        S = S + k_t.unsqueeze(-1) * u.unsqueeze(-2)  # [B, H, K, V]
        outputs.append(torch.einsum("bhk,bhkv->bhv", q_t, S))
    o = torch.stack(outputs, dim=1) if outputs else v.new_zeros(B, 0, H, v.shape[-1])  # [B, T, H, V]
    return o, S
