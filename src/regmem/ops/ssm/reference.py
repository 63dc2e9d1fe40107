"""Reference form of the selective scan: Mamba-1's recurrence, literally, one token at a time on the state
h: [B, D, N] (Gu & Dao, arXiv:2312.00752, Sec. 2, eqs. 2a-2b, and Algorithm 2):
    h_t = Abar_t ⊙ h_{t-1} + Bbar_t ⊙ x_t,     y_t = sum_n C_t[n] h_t[:, n]
with Abar_t = exp(delta_t A) and Bbar_t the discretised input weight (api.py). The cores receive them in the layout
of the op contract: q = C_t and k = Bbar_t as [B, T, D, N] (D channels play the heads, N the key dim), v = x_t as
[B, T, D, 1], g = delta_t A as [B, T, D, N] (log Abar).

Legend: B batch, T time, D channels, N state size.
"""

from __future__ import annotations

import torch


def selective_scan_reference_core(q, k, v, g, *, initial_state):
    """q, k, g: [B, T, D, N]; v: [B, T, D, 1]; initial_state: [B, D, N, 1] or None. Returns y: [B, T, D, 1] and
    h_T: [B, D, N, 1]."""
    B, T, D, N = q.shape
    h = initial_state[..., 0] if initial_state is not None else q.new_zeros(B, D, N)  # [B, D, N]
    ys = []
    for t in range(T):
        A_bar = torch.exp(g[:, t])  # [B, D, N]
        h = A_bar * h + k[:, t] * v[:, t]  # Bbar_t x_t, x_t [B, D, 1] broadcast over N
        ys.append((q[:, t] * h).sum(-1, keepdim=True))  # [B, D, 1]
    y = torch.stack(ys, dim=1) if ys else v.new_zeros(B, 0, D, 1)  # [B, T, D, 1]
    return y, h.unsqueeze(-1)
