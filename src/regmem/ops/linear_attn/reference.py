"""Reference form of (gated) linear attention: the definition, with the attention matrix materialised.

Implements eq. (2)-(4) and (16) of *Test-time regression* (Wang, Shi, Fox; arXiv:2501.12352):
    M_t = gamma_t M_{t-1} + v_t k_t^T,        y_t = M_t q_t,
unrolled (eq. 16) to y_t = sum_{s<=t} (prod_{j=s+1}^t gamma_j) v_s k_s^T q_t, i.e. the parallel form
Y = ((Q K^T) ⊙ L) V with L_ts = prod_{j=s+1}^t gamma_j (Sec. 4 Vignette 2). With a diagonal gate the product is
taken per key channel (GLA; outside the paper's scalar derivation). In regmem's layout the state is S = M^T.

Legend: B batch, T time, H heads, K key (feature) dim, V value dim. Gates g are log retention, g = log gamma.
"""

from __future__ import annotations

import torch

from regmem.ops.common import segsum


def gla_reference_core(q, k, v, g, *, initial_state):
    """q, k: [B, T, H, K] (q already scaled); v: [B, T, H, V]; g: None, [B, T, H] or [B, T, H, K];
    initial_state: [B, H, K, V] or None. Returns o: [B, T, H, V] and S_T: [B, H, K, V]."""
    B, T, H, K = q.shape
    if T == 0:
        S0 = initial_state if initial_state is not None else q.new_zeros(B, H, K, v.shape[-1])
        return v.new_zeros(B, 0, H, v.shape[-1]), S0
    if g is None:
        g = q.new_zeros(B, T, H)
    g = g if g.ndim == 4 else g.unsqueeze(-1)  # [B, T, H, K or 1]
    log_L = segsum(g.permute(0, 2, 3, 1))  # [B, H, K|1, T, T], log L_ts = sum_{j=s+1}^t g_j
    log_decay_from_start = g.cumsum(dim=1)  # [B, T, H, K|1], sum_{j<=t} g_j
    log_decay_to_end = log_L[..., -1, :]  # [B, H, K|1, T], sum_{j=s+1}^T g_j

    # y_t = sum_{s<=t} sum_k q_tk k_sk L_tsk v_s
    A = torch.einsum("bthk,bshk,bhkts->bhts", q, k, torch.exp(log_L))  # [B, H, T, T]
    o = torch.einsum("bhts,bshv->bthv", A, v)  # [B, T, H, V]
    S = torch.einsum("bhks,bshk,bshv->bhkv", torch.exp(log_decay_to_end), k, v)  # [B, H, K, V]
    if initial_state is not None:
        # the memory before token 1 decays by prod_{j<=t} gamma_j
        q_decayed = q * torch.exp(log_decay_from_start)  # [B, T, H, K]
        o = o + torch.einsum("bthk,bhkv->bthv", q_decayed, initial_state)
        S = S + torch.exp(log_decay_from_start[:, -1]).unsqueeze(-1) * initial_state  # [B, H, K, V]
    return o, S
