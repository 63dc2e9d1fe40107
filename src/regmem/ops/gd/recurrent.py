"""Recurrent form of multi-step gradient descent: per token, update the statistics (R, C), then run the I
gradient steps; constant memory in T. This is the form decoding uses.

Implements eqs. (18)-(23) of *Test-time regression* (Wang, Shi, Fox; arXiv:2501.12352, Sec. 4 Vignette 3) in
regmem's layout, S_t^(i) = S_t^(i-1) - beta_t^(i) (R_t S_t^(i-1) - C_t) from S_t^(0) = 0, o_t = (S_t^(I))^T q_t.
The steps run on the read-out instead of the memory (DERIVATION.md, "Steps on the query"): every factor
(1 - beta^(i) R_t) commutes with the others, so (S_t^(I))^T q_t = C_t^T z_t^(I) with
    z_t^(0) = 0,   z_t^(i) = z_t^(i-1) - beta_t^(i) (R_t^T z_t^(i-1) - q_t),
which costs O(I K^2) per token instead of O(I K^2 V).

Legend: B batch, T time, H heads, K key dim, V value dim, I gradient steps.
"""

from __future__ import annotations

import torch

from regmem.ops.gd.state import GDStats


def gd_recurrent_core(q, k, v, beta, *, initial_state):
    """q, k: [B, T, H, K] (q already scaled); v: [B, T, H, V]; beta: [B, T, H, I]; initial_state: GDStats of
    R [B, H, K, K], C [B, H, K, V] or None. Returns o: [B, T, H, V] and the GDStats after the last token."""
    B, T, H, K = q.shape
    V = v.shape[-1]
    R, C = initial_state if initial_state is not None else (q.new_zeros(B, H, K, K), q.new_zeros(B, H, K, V))
    outputs = []
    # unbind, not q[:, t]: the backward of indexing would zero-fill all of q once per token (O(T^2)).
    for q_t, k_t, v_t, beta_t in zip(q.unbind(1), k.unbind(1), v.unbind(1), beta.unbind(1), strict=True):
        R = R + k_t.unsqueeze(-1) * k_t.unsqueeze(-2)  # [B, H, K, K]
        C = C + k_t.unsqueeze(-1) * v_t.unsqueeze(-2)  # [B, H, K, V]
        z = torch.zeros_like(q_t)  # [B, H, K]
        for beta_ti in beta_t.unbind(-1):  # [B, H], one gradient step
            Rz = torch.einsum("bhj,bhjk->bhk", z, R)  # [B, H, K], R_t^T z
            z = z - beta_ti.unsqueeze(-1) * (Rz - q_t)
        outputs.append(torch.einsum("bhk,bhkv->bhv", z, C))
    o = torch.stack(outputs, dim=1) if outputs else v.new_zeros(B, 0, H, V)  # [B, T, H, V]
    return o, GDStats(R, C)
