"""Reference form of second-order HLA: the paper's definitions, O(T^2), no tricks.

Implements Theorem 3.1 (eq 3.3) of *Higher-order Linear Attention* (Zhang, Qin, Wang, Gu; arXiv:2510.27258;
spec hla.md §1). Without decay the output is the strictly causal masked operator
    O = ((W W^T) ⊙ L) V,   W = L ⊙ Q K^T,   i.e. o_t = sum_{j<=t} sum_{i<=j} (q_t.k_i)(q_j.k_i) v_j,
plus, with an initial state (S_0, C_0, G_0), the carried terms (from S_t C_t - G_t with S_t = S_0 + ..., ...):
    o_t += q_t^T (S_0 C_0 - G_0) + sum_{j<=t} (q_t^T S_0 q_j) v_j.
With decay gamma (sec. 4.3) the operator is *defined* by the serial recurrence (spec §1: it is no masked bilinear
form), so the reference evaluates the summaries of every prefix from their defining weighted sums,
    S_t = e^{b_t} S_0 + sum_{i<=t} e^{b_t - b_i} k_i k_i^T     (C_t, m_t alike, b_t = sum_{s<=t} log gamma_s)
    G_t = e^{b_t} G_0 + sum_{i<=t} e^{b_t - b_i} k_i k_i^T C_{i-1}      (h_t alike with m_{i-1})
and reads out o_t = q_t^T (S_t C_t - G_t). Unmasked (eq 3.1) the output is o_t = q_t^T S_t C_t from the same
summaries. The final state is always these sums at t = T. With `ridge` = lambda (the stabilised read-out
S_eff = S_t + lambda I of Alg. 1, not the exact operator) the output gains lambda q_t^T C_t.

Legend: B batch, T time, H heads, K key dim, V value dim.
"""

from __future__ import annotations

import torch
from einops import rearrange

from regmem.ops.common import segsum
from regmem.ops.hla.interface import HLA2State, zero_state


def prefix_summaries(q, k, v, log_gamma, state: HLA2State):
    """Every prefix's summaries from their definitions: S [B, T, H, K, K], C [B, T, H, K, V], m [B, T, H, K],
    G [B, T, H, K, V], h [B, T, H, K]."""
    B, T, H, _ = q.shape
    g = q.new_zeros(B, H, T) if log_gamma is None else rearrange(log_gamma, "b t h -> b h t")  # [B, H, T]
    D = torch.exp(segsum(g))  # [B, H, T(t), T(i)], e^{b_t - b_i} for i <= t, 0 above the diagonal
    start = rearrange(torch.exp(g.cumsum(-1)), "b h t -> b t h")  # [B, T, H], e^{b_t}
    S = torch.einsum("bth,bhkj->bthkj", start, state.S) + torch.einsum("bhti,bihk,bihj->bthkj", D, k, k)
    C = torch.einsum("bth,bhkv->bthkv", start, state.C) + torch.einsum("bhti,bihk,bihv->bthkv", D, q, v)
    m = torch.einsum("bth,bhk->bthk", start, state.m) + torch.einsum("bhti,bihk->bthk", D, q)
    C_prev = torch.cat([state.C.unsqueeze(1), C[:, :-1]], dim=1)  # [B, T, H, K, V], C_{t-1}
    m_prev = torch.cat([state.m.unsqueeze(1), m[:, :-1]], dim=1)  # [B, T, H, K], m_{t-1}
    kC = torch.einsum("bihk,bihkv->bihv", k, C_prev)  # [B, T, H, V], k_i^T C_{i-1}
    km = torch.einsum("bihk,bihk->bih", k, m_prev)  # [B, T, H], k_i^T m_{i-1}
    G = torch.einsum("bth,bhkv->bthkv", start, state.G) + torch.einsum("bhti,bihk,bihv->bthkv", D, k, kC)
    h = torch.einsum("bth,bhk->bthk", start, state.h) + torch.einsum("bhti,bihk,bih->bthk", D, k, km)
    return S, C, m, G, h


def masked_output(q, k, v, state: HLA2State):
    """gamma = 1: o = ((W W^T) ⊙ L) V with W = L ⊙ Q K^T, plus the carried terms of the initial state."""
    T = q.shape[1]
    L = torch.ones(T, T, dtype=torch.bool, device=q.device).tril()
    W = torch.einsum("bthk,bihk->bhti", q, k).masked_fill(~L, 0.0)  # [B, H, T, T]
    A = (W @ W.transpose(-1, -2)).masked_fill(~L, 0.0)  # [B, H, T(t), T(j)]
    A = A + torch.einsum("bthk,bhkj,bshj->bhts", q, state.S, q).masked_fill(~L, 0.0)  # q_t^T S_0 q_j
    carried = state.S @ state.C - state.G  # [B, H, K, V]
    return torch.einsum("bhts,bshv->bthv", A, v) + torch.einsum("bthk,bhkv->bthv", q, carried)


def hla2_reference_core(q, k, v, log_gamma, *, initial_state, masked, ridge=0.0):
    """q, k: [B, T, H, K] (q already scaled); v: [B, T, H, V]; log_gamma: [B, T, H] or None; initial_state:
    HLA2State or None; masked: eq 3.3, else eq 3.1 (o_t = q_t^T S_t C_t); ridge: lambda of the read-out
    q_t^T (S_t + lambda I). Returns o: [B, T, H, V] and the HLA2State after the last token."""
    B, T, H, K = q.shape
    V = v.shape[-1]
    state = initial_state if initial_state is not None else zero_state(q, V)
    if T == 0:
        return v.new_zeros(B, 0, H, V), state
    S, C, m, G, h = prefix_summaries(q, k, v, log_gamma, state)
    if masked and log_gamma is None:
        o = masked_output(q, k, v, state)  # [B, T, H, V]
    else:
        o = torch.einsum("bthj,bthjk,bthkv->bthv", q, S, C)  # [B, T, H, V], q_t^T S_t C_t (eq 3.1)
        if masked:
            o = o - torch.einsum("bthk,bthkv->bthv", q, G)
    if ridge:
        o = o + ridge * torch.einsum("bthk,bthkv->bthv", q, C)  # lambda q_t^T C_t (stabilised read-out)
    return o, HLA2State(S[:, -1], C[:, -1], m[:, -1], G[:, -1], h[:, -1])
