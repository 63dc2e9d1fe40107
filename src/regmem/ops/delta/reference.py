"""Reference form of the (gated) delta rule: the definition, one explicit transition matrix per token.

Implements eq. (29) (DeltaNet) and eq. (41) (Gated DeltaNet) of *Test-time regression* (Wang, Shi, Fox;
arXiv:2501.12352) in the paper's own orientation, the memory M: [V, K] with y_t = M_t q_t:
    M_t = M_{t-1} diag(alpha_t) (I - beta_t k_t k_t^T) + beta_t v_t k_t^T,      alpha_t = exp(g_t),
the transition diag(alpha_t)(I - beta_t k_t k_t^T) materialised as a [K, K] matrix (a scalar gate is
alpha_t I). Gated DeltaNet: Yang, Kautz, Hatamizadeh 2024, arXiv:2412.06464, eq. (10); the diagonal gate
follows Kimi Delta Attention. regmem's state is S = M^T, transposed only on the way in and out.

Legend: B batch, T time, H heads, K key dim, V value dim.
"""

from __future__ import annotations

import torch


def delta_reference_core(q, k, v, g, beta, *, initial_state):
    """q, k: [B, T, H, K] (q already scaled); v: [B, T, H, V]; g: None, [B, T, H] or [B, T, H, K];
    beta: [B, T, H]; initial_state: [B, H, K, V] or None. Returns o: [B, T, H, V] and S_T: [B, H, K, V]."""
    B, T, H, K = q.shape
    V = v.shape[-1]
    M = initial_state.transpose(-1, -2) if initial_state is not None else q.new_zeros(B, H, V, K)  # [B, H, V, K]
    eye = torch.eye(K, dtype=q.dtype, device=q.device)  # [K, K]
    gates = g.unbind(dim=1) if g is not None else [None] * T
    outputs = []
    for q_t, k_t, v_t, g_t, beta_t in zip(
        q.unbind(dim=1), k.unbind(dim=1), v.unbind(dim=1), gates, beta.unbind(dim=1), strict=True
    ):
        b = beta_t[..., None, None]  # [B, H, 1, 1]
        transition = eye - b * k_t.unsqueeze(-1) * k_t.unsqueeze(-2)  # [B, H, K, K], I - beta k k^T
        if g_t is not None:
            alpha = torch.exp(g_t)  # [B, H] or [B, H, K]
            decay = torch.diag_embed(alpha) if g_t.ndim == 3 else alpha[..., None, None] * eye  # [B, H, K, K]
            transition = decay @ transition  # [B, H, K, K]
        M = M @ transition + b * v_t.unsqueeze(-1) * k_t.unsqueeze(-2)  # [B, H, V, K]
        outputs.append((M @ q_t.unsqueeze(-1)).squeeze(-1))  # [B, H, V], y_t = M_t q_t
    o = torch.stack(outputs, dim=1) if outputs else v.new_zeros(B, 0, H, V)  # [B, T, H, V]
    return o, M.transpose(-1, -2)  # S_T = M_T^T: [B, H, K, V]
