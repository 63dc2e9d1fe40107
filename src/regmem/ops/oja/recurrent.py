"""Recurrent form of Oja's rule: one update of S per token, constant memory in T (what decoding uses).

Implements *Nested Learning* (arXiv:2512.24695), Sec. 5, eq. (66) in regmem's layout S = M^T: [K, V]:
    S_t = exp(g_t) S_{t-1} + beta_t (k_t - S_{t-1} v_t) v_t^T,       o_t = S_t^T q_t.
The transition acts on the value side, S_{t-1} (exp(g_t) I - beta_t v_t v_t^T): Oja's rule is the delta rule with
the roles of keys and values exchanged (DERIVATION.md beside this file).

Legend: B batch, T time, H heads, K key dim, V value dim.
"""

from __future__ import annotations

import torch


def oja_recurrent_core(q, k, v, g, beta, *, initial_state):
    """q, k: [B, T, H, K] (q already scaled); v: [B, T, H, V]; g, beta: [B, T, H]; initial_state: [B, H, K, V] or
    None. Returns o: [B, T, H, V] and the state after the last token, [B, H, K, V]."""
    B, T, H, K = q.shape
    V = v.shape[-1]
    S = initial_state if initial_state is not None else q.new_zeros(B, H, K, V)
    outputs = []
    # unbind, not q[:, t]: the backward of indexing would zero-fill all of q once per token (O(T^2)).
    for q_t, k_t, v_t, g_t, beta_t in zip(q.unbind(1), k.unbind(1), v.unbind(1), g.unbind(1), beta.unbind(1),
                                          strict=True):
        u = beta_t.unsqueeze(-1) * (k_t - torch.einsum("bhkv,bhv->bhk", S, v_t))  # [B, H, K]
        S = torch.exp(g_t)[..., None, None] * S + u.unsqueeze(-1) * v_t.unsqueeze(-2)  # [B, H, K, V]
        outputs.append(torch.einsum("bhk,bhkv->bhv", q_t, S))
    o = torch.stack(outputs, dim=1) if outputs else v.new_zeros(B, 0, H, V)  # [B, T, H, V]
    return o, S
