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
    # unbind, not q[:, t]: the backward of indexing would zero-fill all of q once per token (O(T^2)).
    gates = g.unbind(dim=1) if g is not None else [None] * T
    outputs = []
    for q_t, k_t, v_t, g_t in zip(q.unbind(dim=1), k.unbind(dim=1), v.unbind(dim=1), gates, strict=True):
        if g_t is not None:
            gamma = torch.exp(g_t)  # [B, H] or [B, H, K]
            gamma = gamma[..., None, None] if gamma.ndim == 2 else gamma[..., None]  # [B, H, 1|K, 1]
            S = gamma * S
        S = S + k_t.unsqueeze(-1) * v_t.unsqueeze(-2)  # [B, H, K, V]
        outputs.append(torch.einsum("bhk,bhkv->bhv", q_t, S))
    o = torch.stack(outputs, dim=1) if outputs else v.new_zeros(B, 0, H, v.shape[-1])  # [B, T, H, V]
    return o, S
