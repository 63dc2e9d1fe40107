"""Recurrent form of (gated) linear attention: one state update per token, constant memory in T.

Implements eq. (4) of *Test-time regression* (Wang, Shi, Fox; arXiv:2501.12352) in regmem's layout S = M^T:
    S_t = gamma_t ⊙ S_{t-1} + k_t v_t^T,      o_t = S_t^T q_t,
with gamma_t = exp(g_t) a scalar per head (RetNet, Mamba-2) or a vector over the K rows (GLA). This is the form
decoding uses.

Legend: B batch, T time, H heads, K key (feature) dim, V value dim.
"""

from __future__ import annotations

import torch


def gla_recurrent_core(q, k, v, g, *, initial_state):
    """q, k: [B, T, H, K] (q already scaled); v: [B, T, H, V]; g: None, [B, T, H] or [B, T, H, K];
    initial_state: [B, H, K, V] or None. Returns o: [B, T, H, V] and S_T: [B, H, K, V]."""
    B, T, H, K = q.shape
    S = initial_state if initial_state is not None else q.new_zeros(B, H, K, v.shape[-1])
    outputs = []
    for t in range(T):
        if g is not None:
            gamma = torch.exp(g[:, t])  # [B, H] or [B, H, K]
            gamma = gamma[..., None, None] if gamma.ndim == 2 else gamma[..., None]  # [B, H, 1|K, 1]
            S = gamma * S
        S = S + k[:, t, :, :, None] * v[:, t, :, None, :]  # [B, H, K, V]
        outputs.append(torch.einsum("bhk,bhkv->bhv", q[:, t], S))
    o = torch.stack(outputs, dim=1) if outputs else v.new_zeros(B, 0, H, v.shape[-1])  # [B, T, H, V]
    return o, S
