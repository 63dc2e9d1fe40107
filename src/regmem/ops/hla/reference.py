"""Reference forms of the HLA ops: the paper's definitions, O(T^2) (hla3_paper O(T^4)), no tricks.

hla2:

Implements Theorem 3.1 (eq 3.3) of *Higher-order Linear Attention* (Zhang, Qin, Wang, Gu; arXiv:2510.27258,
sec. 3). Without decay the output is the strictly causal masked operator
    O = ((W W^T) ⊙ L) V,   W = L ⊙ Q K^T,   i.e. o_t = sum_{j<=t} sum_{i<=j} (q_t.k_i)(q_j.k_i) v_j,
plus, with an initial state (S_0, C_0, G_0), the carried terms (from S_t C_t - G_t with S_t = S_0 + ..., ...):
    o_t += q_t^T (S_0 C_0 - G_0) + sum_{j<=t} (q_t^T S_0 q_j) v_j.
With decay gamma (sec. 4.3) the operator is *defined* by the serial recurrence (it is no masked bilinear form), so
the reference evaluates the summaries of every prefix from their defining weighted sums,
    S_t = e^{b_t} S_0 + sum_{i<=t} e^{b_t - b_i} k_i k_i^T     (C_t, m_t alike, b_t = sum_{s<=t} log gamma_s)
    G_t = e^{b_t} G_0 + sum_{i<=t} e^{b_t - b_i} k_i k_i^T C_{i-1}      (h_t alike with m_{i-1})
and reads out o_t = q_t^T (S_t C_t - G_t). Unmasked (eq 3.1) the output is o_t = q_t^T S_t C_t from the same
summaries. The final state is always these sums at t = T. With `ridge` = lambda (the stabilised read-out
S_eff = S_t + lambda I of Alg. 1, not the exact operator) the output gains lambda q_t^T C_t.

Legend: B batch, T time, H heads, K key dim, V value dim.

ahla and hla3: see the docstrings of their cores (sec. 6 and sec. 7 of the paper).
"""

from __future__ import annotations

import torch
from einops import rearrange

from regmem.ops.common import segsum
from regmem.ops.hla.state import (
    AHLAState,
    HLA2State,
    HLA3PaperState,
    HLA3State,
    ahla_zero_state,
    hla2_zero_state,
    hla3_paper_zero_state,
    hla3_zero_state,
)


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


def hla2_reference_core(q, k, v, log_gamma, *, initial_state, masked, ridge):
    """q, k: [B, T, H, K] (q already scaled); v: [B, T, H, V]; log_gamma: [B, T, H] or None; initial_state:
    HLA2State or None; masked: eq 3.3, else eq 3.1 (o_t = q_t^T S_t C_t); ridge: lambda of the read-out
    q_t^T (S_t + lambda I). Returns o: [B, T, H, V] and the HLA2State after the last token."""
    B, T, H, K = q.shape
    V = v.shape[-1]
    state = initial_state if initial_state is not None else hla2_zero_state(q, V)
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



def ahla_reference_core(q, k, v, log_gamma, *, initial_state):
    """q, k: [B, T, H, K] (q scaled); v: [B, T, H, V]; log_gamma: [B, T, H] or None. With b_t = sum_{s<=t} log g_s,
    P_t = e^{b_t} P_0 + sum_{i<=t} e^{b_t - b_i} k_i v_i^T (m alike), E_t = e^{b_t} E_0 + sum_{i<=t} e^{b_t - b_i}
    k_i (q_i^T P_i) (n alike with m_i); o_t = q_t^T E_t. Returns o: [B, T, H, V] and the AHLAState at t = T."""
    B, T, H, K = q.shape
    V = v.shape[-1]
    state = initial_state if initial_state is not None else ahla_zero_state(k, V)
    if T == 0:
        return v.new_zeros(B, 0, H, V), state
    g = q.new_zeros(B, H, T) if log_gamma is None else rearrange(log_gamma, "b t h -> b h t")  # [B, H, T]
    D = torch.exp(segsum(g))  # [B, H, T(t), T(i)], e^{b_t - b_i} for i <= t, 0 above the diagonal
    start = rearrange(torch.exp(g.cumsum(-1)), "b h t -> b t h")  # [B, T, H], e^{b_t}
    P = torch.einsum("bth,bhkv->bthkv", start, state.P) + torch.einsum("bhti,bihk,bihv->bthkv", D, k, v)
    m = torch.einsum("bth,bhk->bthk", start, state.m) + torch.einsum("bhti,bihk->bthk", D, k)
    r = torch.einsum("bthk,bthkv->bthv", q, P)  # [B, T, H, V], q_i^T P_i (inclusive)
    s = torch.einsum("bthk,bthk->bth", q, m)  # [B, T, H], q_i^T m_i
    E = torch.einsum("bth,bhkv->bthkv", start, state.E) + torch.einsum("bhti,bihk,bihv->bthkv", D, k, r)
    n = torch.einsum("bth,bhk->bthk", start, state.n) + torch.einsum("bhti,bihk,bih->bthk", D, k, s)
    o = torch.einsum("bthk,bthkv->bthv", q, E)  # [B, T, H, V], Theorem 6.1
    return o, AHLAState(P[:, -1], m[:, -1], E[:, -1], n[:, -1])



def hla3_causal_reference_core(q, k, v, *, initial_state):
    """q, k: [B, T, H, K] (q scaled); v: [B, T, H, V]. Masked matrix form, O(T^2): with W = L ⊙ Q K^T,
    Z = Q S_0^T + W K (row u = (S_u q_u)^T), Y = Q P_0 + W V (row u = q_u^T P_u),
    O = Q F_0 + ((Q Z^T) ⊙ L) Y   (= ((W W^T) ⊙ L) W V for a zero state);
    final S = S_0 + K^T K, P = P_0 + K^T V, F = F_0 + Z^T Y."""
    B, T, H, K = q.shape
    V = v.shape[-1]
    S0, P0, F0 = initial_state if initial_state is not None else hla3_zero_state(k, V)
    if T == 0:
        return v.new_zeros(B, 0, H, V), HLA3State(S0, P0, F0)
    q, k, v = (rearrange(x, "b t h d -> b h t d") for x in (q, k, v))
    L = torch.ones(T, T, dtype=torch.bool, device=q.device).tril()
    W = (q @ k.transpose(-1, -2)).masked_fill(~L, 0)  # [B, H, T, T]
    Z = q @ S0.transpose(-1, -2) + W @ k  # [B, H, T, K]
    Y = q @ P0 + W @ v  # [B, H, T, V]
    M = (q @ Z.transpose(-1, -2)).masked_fill(~L, 0)  # [B, H, T(t), T(u)], q_t^T S_u q_u for u <= t
    o = q @ F0 + M @ Y  # [B, H, T, V]
    state = HLA3State(S0 + k.transpose(-1, -2) @ k, P0 + k.transpose(-1, -2) @ v, F0 + Z.transpose(-1, -2) @ Y)
    return rearrange(o, "b h t v -> b t h v"), state



def _repeated_max_weights(T: int, t_index: torch.Tensor, dtype, device) -> torch.Tensor:
    """w[t, i, u, j] = 1 if i, u, j <= t and max(i, u, j) is attained at least twice, over indices 0..T."""
    idx = torch.arange(T + 1, device=device)
    i, u, j = idx[:, None, None], idx[None, :, None], idx[None, None, :]
    mx = torch.maximum(torch.maximum(i, u), j)
    repeated = ((i == mx).long() + (u == mx).long() + (j == mx).long()) >= 2  # [T+1, T+1, T+1]
    inside = mx[None] <= t_index[:, None, None, None]  # [T, T+1, T+1, T+1]
    return (repeated[None] & inside).to(dtype)



def hla3_paper_reference_core(q, k, v, *, initial_state):
    """Same contract as hla3_causal_reference_core. The literal triple sum the paper's recurrence computes,
    O(T^4) (a test oracle): with X^K_0 = SK_0, X^Q_0 = SQ_0, X^P_0 = P_0 and X^K_i = k_i k_i^T, X^Q_u = q_u q_u^T,
    X^P_j = k_j v_j^T for tokens 1..T,  F_t = sum_{i,u,j<=t, max attained >= 2} X^K_i X^Q_u X^P_j - G_0,
    o_t = q_t^T F_t; final G = G_0 + the same sum over the triples with a UNIQUE maximum."""
    B, T, H, K = q.shape
    V = v.shape[-1]
    SK0, SQ0, P0, G0 = initial_state if initial_state is not None else hla3_paper_zero_state(k, V)
    if T == 0:
        return v.new_zeros(B, 0, H, V), HLA3PaperState(SK0, SQ0, P0, G0)
    XK = torch.cat([SK0.unsqueeze(2), torch.einsum("bthk,bthl->bhtkl", k, k)], dim=2)  # [B, H, T+1, K, K]
    XQ = torch.cat([SQ0.unsqueeze(2), torch.einsum("bthk,bthl->bhtkl", q, q)], dim=2)  # [B, H, T+1, K, K]
    XP = torch.cat([P0.unsqueeze(2), torch.einsum("bthk,bthv->bhtkv", k, v)], dim=2)  # [B, H, T+1, K, V]
    w = _repeated_max_weights(T, torch.arange(1, T + 1, device=q.device), q.dtype, q.device)  # [T, T+1, T+1, T+1]
    QP = torch.einsum("bhuxy,bhjyv->bhujxv", XQ, XP)  # [B, H, T+1, T+1, K, V], X^Q_u X^P_j
    wK = torch.einsum("tiuj,bhixy->bhtujxy", w, XK)  # [B, H, T, T+1, T+1, K, K]
    F = torch.einsum("bhtujxy,bhujyv->bhtxv", wK, QP) - G0.unsqueeze(2)  # [B, H, T, K, V]
    o = torch.einsum("bthk,bhtkv->bthv", q, F)
    unique = 1 - _repeated_max_weights(T, torch.tensor([T], device=q.device), q.dtype, q.device)[0]  # strict max
    G = G0 + torch.einsum("iuj,bhixy,bhujyv->bhxv", unique, XK, QP)  # [B, H, K, V], G0 + G1 + G2 + G3 at t = T
    return o, HLA3PaperState(XK.sum(2), XQ.sum(2), XP.sum(2), G)

