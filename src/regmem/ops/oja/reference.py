"""Reference form of Oja's rule: the recurrence of *Nested Learning* eqs. (66)-(67), literally, in the paper's
orientation.

Implements Oja's rule as a memory update (*Nested Learning: The Illusion of Deep Learning Architecture*, Behrouz,
Razaviyayn, Zhong, Mirrokni; arXiv:2512.24695, Sec. 5, eqs. (66)-(67); OjaNet, Irie et al. 2022) for a linear memory
M: [V, K] with identity kernel phi:
    M_t = alpha_t M_{t-1} + eta_t v_t (k_t - M_{t-1}^T v_t)^T,        y_t = M_t q_t
with alpha_t = exp(g_t), eta_t = beta_t. regmem stores S = M^T.

Legend: B batch, T time, H heads, K key dim, V value dim.
"""

from __future__ import annotations

import torch


def oja_reference_core(q, k, v, g, beta, *, initial_state):
    """q, k: [B, T, H, K] (q already scaled); v: [B, T, H, V]; g, beta: [B, T, H]; initial_state: [B, H, K, V] or
    None. Returns o: [B, T, H, V] and the state S_T = M_T^T: [B, H, K, V]."""
    B, T, H, K = q.shape
    V = v.shape[-1]
    M = q.new_zeros(B, H, V, K) if initial_state is None else initial_state.transpose(-1, -2)  # [B, H, V, K]
    outputs = []
    for t in range(T):
        k_t, v_t, q_t = k[:, t], v[:, t], q[:, t]  # [B, H, K], [B, H, V], [B, H, K]
        alpha = torch.exp(g[:, t])[..., None, None]  # [B, H, 1, 1]
        eta = beta[:, t][..., None, None]  # [B, H, 1, 1]
        residual = k_t - torch.einsum("bhvk,bhv->bhk", M, v_t)  # [B, H, K], k_t - M_{t-1}^T v_t
        M = alpha * M + eta * v_t.unsqueeze(-1) * residual.unsqueeze(-2)  # eq. (66)
        outputs.append(torch.einsum("bhvk,bhk->bhv", M, q_t))
    o = torch.stack(outputs, dim=1) if outputs else v.new_zeros(B, 0, H, V)  # [B, T, H, V]
    return o, M.transpose(-1, -2)
