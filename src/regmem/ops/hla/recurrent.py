"""Recurrent form of second-order HLA: the paper's online updates of the 5-tuple (S, C, m, G, h), one token at a
time; constant memory in T. This is the form decoding uses, and with decay it is the definition of the op.

Implements Alg. 1 / Theorem 3.1 (eq 3.3) of *Higher-order Linear Attention* (Zhang, Qin, Wang, Gu;
arXiv:2510.27258), with the decay of sec. 4.3 (spec hla.md §1). Note G and h use the PREVIOUS C and m:
    S_t = g S_{t-1} + k_t k_t^T          C_t = g C_{t-1} + q_t v_t^T       m_t = g m_{t-1} + q_t
    G_t = g G_{t-1} + k_t (k_t^T C_{t-1})                 h_t = g h_{t-1} + k_t (k_t^T m_{t-1})
    o_t = (q_t^T S_t) C_t - q_t^T G_t                      (g = gamma_t, 1 without decay)
Unmasked (eq 3.1) the read-out drops the G term: o_t = (q_t^T S_t) C_t; the state is the same. The ridge read-out
uses u = q_t^T (S_t + lambda I) (stabilised variant of Alg. 1, not the exact operator); S itself has no ridge.

Legend: B batch, T time, H heads, K key dim, V value dim.
"""

from __future__ import annotations

import torch

from regmem.ops.hla.interface import HLA2State, zero_state


def hla2_recurrent_core(q, k, v, log_gamma, *, initial_state, masked, ridge=0.0):
    """q, k: [B, T, H, K] (q already scaled); v: [B, T, H, V]; log_gamma: [B, T, H] or None; initial_state:
    HLA2State or None; masked: eq 3.3, else eq 3.1 (o_t = q_t^T S_t C_t); ridge: lambda of the read-out
    u = q_t^T (S_t + lambda I) (Alg. 1's stabilised variant). Returns o: [B, T, H, V] and the final HLA2State."""
    B, T, H, K = q.shape
    V = v.shape[-1]
    S, C, m, G, h = initial_state if initial_state is not None else zero_state(q, V)
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
