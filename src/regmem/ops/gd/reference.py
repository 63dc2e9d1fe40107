"""Reference form of multi-step gradient descent: for every prefix, I full-batch gradient steps from zero on
the least-squares loss of that prefix, the gradient computed from the residuals of all its tokens.

Implements eqs. (18)-(23) of *Test-time regression* (Wang, Shi, Fox; arXiv:2501.12352, Sec. 4 Vignette 3)
for the linear memory M: [V, K] in the paper's orientation:
    L_t(M) = 1/2 sum_{s<=t} ||v_s - M k_s||^2,       grad L_t(M) = sum_{s<=t} (M k_s - v_s) k_s^T
    M_t^(0) = 0,   M_t^(i) = M_t^(i-1) - beta_t^(i) grad L_t(M_t^(i-1))   (i = 1..I),   y_t = M_t^(I) q_t.
Tokens before this call enter through the statistics of the initial state, R_0 = sum k k^T and C_0 = sum k v^T,
whose gradient term is M R_0^T - C_0^T (DERIVATION.md beside this file; regmem stores S = M^T). O(T^2 I K V).

Legend: B batch, T time, H heads, K key dim, V value dim, I gradient steps.
"""

from __future__ import annotations

import torch

from regmem.ops.gd.state import GDStats


def gd_reference_core(q, k, v, beta, *, initial_state):
    """q, k: [B, T, H, K] (q already scaled); v: [B, T, H, V]; beta: [B, T, H, I]; initial_state: GDStats of
    R [B, H, K, K], C [B, H, K, V] or None. Returns o: [B, T, H, V] and the GDStats after the last token."""
    B, T, H, K = q.shape
    V = v.shape[-1]
    R0, C0 = initial_state if initial_state is not None else (q.new_zeros(B, H, K, K), q.new_zeros(B, H, K, V))
    outputs = []
    for t in range(T):
        k_t, v_t = k[:, : t + 1], v[:, : t + 1]  # [B, t+1, H, K], [B, t+1, H, V], the prefix K_t, V_t
        M = q.new_zeros(B, H, V, K)  # M_t^(0) = 0
        for i in range(beta.shape[-1]):
            residual = torch.einsum("bhvk,bshk->bshv", M, k_t) - v_t  # [B, t+1, H, V], M k_s - v_s
            grad = torch.einsum("bshv,bshk->bhvk", residual, k_t)  # [B, H, V, K]
            grad = grad + M @ R0.transpose(-1, -2) - C0.transpose(-1, -2)  # the tokens before this call
            M = M - beta[:, t, :, i][..., None, None] * grad
        outputs.append(torch.einsum("bhvk,bhk->bhv", M, q[:, t]))
    o = torch.stack(outputs, dim=1) if outputs else v.new_zeros(B, 0, H, V)  # [B, T, H, V]
    R = R0 + torch.einsum("bshj,bshk->bhjk", k, k)  # [B, H, K, K]
    C = C0 + torch.einsum("bshk,bshv->bhkv", k, v)  # [B, H, K, V]
    return o, GDStats(R, C)
