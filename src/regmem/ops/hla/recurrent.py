"""Recurrent forms of the HLA ops (the decoding forms). For hla2: the paper's online updates of the 5-tuple (S, C, m,
G, h), one token at a time; constant memory in T. This is the form decoding uses, and with decay it is the
definition of the op.

Implements Alg. 1 / Theorem 3.1 (eq 3.3) of *Higher-order Linear Attention* (Zhang, Qin, Wang, Gu;
arXiv:2510.27258), with the decay of sec. 4.3 . Note G and h use the PREVIOUS C and m:
    S_t = g S_{t-1} + k_t k_t^T          C_t = g C_{t-1} + q_t v_t^T       m_t = g m_{t-1} + q_t
    G_t = g G_{t-1} + k_t (k_t^T C_{t-1})                 h_t = g h_{t-1} + k_t (k_t^T m_{t-1})
    o_t = (q_t^T S_t) C_t - q_t^T G_t                      (g = gamma_t, 1 without decay)
Unmasked (eq 3.1) the read-out drops the G term: o_t = (q_t^T S_t) C_t; the state is the same. The ridge read-out
uses u = q_t^T (S_t + lambda I) (stabilised variant of Alg. 1, not the exact operator); S itself has no ridge.

Legend: B batch, T time, H heads, K key dim, V value dim.

ahla (Theorem 6.1) and hla3 (sec. 7): see the docstrings of their cores.
"""

from __future__ import annotations

import torch

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


def hla2_recurrent_core(q, k, v, log_gamma, *, initial_state, masked, ridge):
    """q, k: [B, T, H, K] (q already scaled); v: [B, T, H, V]; log_gamma: [B, T, H] or None; initial_state:
    HLA2State or None; masked: eq 3.3, else eq 3.1 (o_t = q_t^T S_t C_t); ridge: lambda of the read-out
    u = q_t^T (S_t + lambda I) (Alg. 1's stabilised variant). Returns o: [B, T, H, V] and the final HLA2State."""
    B, T, H, K = q.shape
    V = v.shape[-1]
    S, C, m, G, h = initial_state if initial_state is not None else hla2_zero_state(q, V)
    gates = log_gamma.unbind(1) if log_gamma is not None else [None] * T
    outputs = []
    # unbind, not q[:, t]: the backward of indexing would zero-fill all of q once per token (O(T^2)).
    for q_t, k_t, v_t, g_t in zip(q.unbind(1), k.unbind(1), v.unbind(1), gates, strict=True):
        kC = torch.einsum("bhk,bhkv->bhv", k_t, C)  # [B, H, V], k_t^T C_{t-1}
        km = (k_t * m).sum(-1, keepdim=True)  # [B, H, 1], k_t^T m_{t-1}
        if g_t is not None:
            gamma = g_t.exp()  # [B, H]
            S, C, m, G, h = (x * gamma.view(B, H, *([1] * (x.ndim - 2))) for x in (S, C, m, G, h))
        S = S + k_t.unsqueeze(-1) * k_t.unsqueeze(-2)  # [B, H, K, K]
        C = C + q_t.unsqueeze(-1) * v_t.unsqueeze(-2)  # [B, H, K, V]
        m = m + q_t  # [B, H, K]
        G = G + k_t.unsqueeze(-1) * kC.unsqueeze(-2)  # [B, H, K, V]
        h = h + k_t * km  # [B, H, K]
        u = torch.einsum("bhj,bhjk->bhk", q_t, S)  # [B, H, K], q_t^T S_t
        if ridge:
            u = u + ridge * q_t  # q_t^T (S_t + lambda I)
        o_t = torch.einsum("bhk,bhkv->bhv", u, C)  # [B, H, V]
        outputs.append(o_t - torch.einsum("bhk,bhkv->bhv", q_t, G) if masked else o_t)
    o = torch.stack(outputs, dim=1) if outputs else v.new_zeros(B, 0, H, V)  # [B, T, H, V]
    return o, HLA2State(S, C, m, G, h)



def ahla_recurrent_core(q, k, v, log_gamma, *, initial_state):
    """Same contract as ahla_reference_core; constant memory in T."""
    B, T, H, K = q.shape
    V = v.shape[-1]
    P, m, E, n = initial_state if initial_state is not None else ahla_zero_state(k, V)
    gates = log_gamma.unbind(1) if log_gamma is not None else [None] * T
    outputs = []
    # unbind, not q[:, t]: the backward of indexing would zero-fill all of q once per token (O(T^2)).
    for q_t, k_t, v_t, g_t in zip(q.unbind(1), k.unbind(1), v.unbind(1), gates, strict=True):
        if g_t is not None:
            gamma = g_t.exp()  # [B, H]
            P, E = gamma[..., None, None] * P, gamma[..., None, None] * E
            m, n = gamma[..., None] * m, gamma[..., None] * n
        P = P + k_t.unsqueeze(-1) * v_t.unsqueeze(-2)  # [B, H, K, V]
        m = m + k_t  # [B, H, K]
        r = torch.einsum("bhk,bhkv->bhv", q_t, P)  # [B, H, V], q_t^T P_t (current P)
        s = (q_t * m).sum(-1, keepdim=True)  # [B, H, 1], q_t^T m_t
        E = E + k_t.unsqueeze(-1) * r.unsqueeze(-2)  # [B, H, K, V]
        n = n + k_t * s  # [B, H, K]
        outputs.append(torch.einsum("bhk,bhkv->bhv", q_t, E))  # [B, H, V]
    o = torch.stack(outputs, dim=1) if outputs else v.new_zeros(B, 0, H, V)  # [B, T, H, V]
    return o, AHLAState(P, m, E, n)



def hla3_causal_recurrent_core(q, k, v, *, initial_state):
    """Same contract as hla3_causal_reference_core; constant memory in T."""
    B, T, H, K = q.shape
    V = v.shape[-1]
    S, P, F = initial_state if initial_state is not None else hla3_zero_state(k, V)
    outputs = []
    # unbind, not q[:, t]: the backward of indexing would zero-fill all of q once per token (O(T^2)).
    for q_t, k_t, v_t in zip(q.unbind(1), k.unbind(1), v.unbind(1), strict=True):
        S = S + k_t.unsqueeze(-1) * k_t.unsqueeze(-2)  # [B, H, K, K]
        P = P + k_t.unsqueeze(-1) * v_t.unsqueeze(-2)  # [B, H, K, V]
        y = torch.einsum("bhxy,bhy->bhx", S, q_t)  # [B, H, K], S_t q_t
        r = torch.einsum("bhk,bhkv->bhv", q_t, P)  # [B, H, V], q_t^T P_t
        F = F + y.unsqueeze(-1) * r.unsqueeze(-2)  # [B, H, K, V]
        outputs.append(torch.einsum("bhk,bhkv->bhv", q_t, F))
    o = torch.stack(outputs, dim=1) if outputs else v.new_zeros(B, 0, H, V)  # [B, T, H, V]
    return o, HLA3State(S, P, F)



def hla3_paper_recurrent_core(q, k, v, *, initial_state):
    """Same contract as hla3_paper_reference_core: the paper's Alg. 3 (gamma = 1), G = G1 + G2 + G3."""
    B, T, H, K = q.shape
    V = v.shape[-1]
    SK, SQ, P, G = initial_state if initial_state is not None else hla3_paper_zero_state(k, V)
    outputs = []
    for q_t, k_t, v_t in zip(q.unbind(1), k.unbind(1), v.unbind(1), strict=True):
        SK_p, SQ_p, P_p = SK, SQ, P  # previous (exclusive) summaries
        SK = SK + k_t.unsqueeze(-1) * k_t.unsqueeze(-2)
        SQ = SQ + q_t.unsqueeze(-1) * q_t.unsqueeze(-2)
        P = P + k_t.unsqueeze(-1) * v_t.unsqueeze(-2)
        u1 = torch.einsum("bhx,bhxy->bhy", k_t, SQ_p)  # k_t^T S^Q_prev (a row: S^Q may be non-symmetric)
        G1 = k_t.unsqueeze(-1) * torch.einsum("bhk,bhkv->bhv", u1, P_p).unsqueeze(-2)  # k_t (k_t^T S^Q_prev P_prev)
        a2 = torch.einsum("bhxy,bhy->bhx", SK_p, q_t)  # S^K_prev q_t
        G2 = a2.unsqueeze(-1) * torch.einsum("bhk,bhkv->bhv", q_t, P_p).unsqueeze(-2)  # a2 (q_t^T P_prev)
        a3 = torch.einsum("bhxy,bhy->bhx", SK_p, torch.einsum("bhxy,bhy->bhx", SQ_p, k_t))  # S^K_p S^Q_p k_t
        G3 = a3.unsqueeze(-1) * v_t.unsqueeze(-2)  # a3 v_t^T
        G = G + G1 + G2 + G3
        z = torch.einsum("bhx,bhxy->bhy", torch.einsum("bhx,bhxy->bhy", q_t, SK), SQ)  # q_t^T S^K S^Q
        outputs.append(torch.einsum("bhk,bhkv->bhv", z, P) - torch.einsum("bhk,bhkv->bhv", q_t, G))
    o = torch.stack(outputs, dim=1) if outputs else v.new_zeros(B, 0, H, V)  # [B, T, H, V]
    return o, HLA3PaperState(SK, SQ, P, G)

