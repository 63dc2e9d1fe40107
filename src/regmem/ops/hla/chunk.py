"""Chunk-parallel form of second-order HLA: intra-chunk terms for all chunks at once by matmuls, a short
inter-chunk pass over the chunk summaries (the masked scan of eq 4.1, with the decay erratum fixed), then the
outputs of all chunks at once. No per-token [K, K] or [K, V] tensor is formed.

Implements Theorem 3.1 (eq 3.3) and the chunk scan of sec. 4 of *Higher-order Linear Attention* (Zhang, Qin,
Wang, Gu; arXiv:2510.27258), corrected as in spec hla.md §2 / §6 errata 1-2. For token t of a chunk entering with
state (S_0, C_0, G_0), with a_t = sum_{s<=t in chunk} log gamma_s and D_ti = e^{a_t - a_i} (i <= t):
    q_t^T S_t = e^{a_t} q_t^T S_0 + sum_{i<=t} D_ti (q_t.k_i) k_i^T                  -> rows of U
    q_t^T S_t C_t = e^{a_t} u_t C_0 + sum_{j<=t} D_tj (u_t.q_j) v_j^T
    k_i^T C_{i-1} = e^{a_{i-1}} k_i^T C_0 + sum_{j<i} D_{i-1,j} (k_i.q_j) v_j^T       -> rows of P
    q_t^T G_t = e^{a_t} q_t^T G_0 + sum_{i<=t} D_ti (q_t.k_i) P_i,       o_t = q_t^T S_t C_t - q_t^T G_t.
The chunk's summaries follow with weights e^{a_C - a_i} to the chunk end; the G carry is
    G_out = e^{a_C} G_0 + Kbar C_0 + G_loc,   Kbar = sum_i e^{a_C - a_i} e^{a_{i-1}} k_i k_i^T,
which for gamma = 1 is the undecayed key moment K^T K of erratum 1 (h alike with m). The ridge read-out
(stabilised, Alg. 1) adds lambda q_t^T C_t = lambda (e^{a_t} q_t^T C_0 + sum_{j<=t} D_tj (q_t.q_j) v_j^T).

Legend: B batch, T time, H heads, K key dim, V value dim, N chunks, C chunk size.
"""

from __future__ import annotations

import torch

from regmem.ops.common import merge_chunks, segsum, split_chunks, suffix_exclusive
from regmem.ops.hla.interface import HLA2State, zero_state


def _decay_factors(g):
    """g: [B, H, N, C] log gates -> D, D_prev: [B, H, N, C, C]; e^{a}, e^{a_{t-1}}, e^{a_C - a}: [B, H, N, C]."""
    D = torch.exp(segsum(g))  # [B, H, N, C(t), C(i)], e^{a_t - a_i} for i <= t
    D_prev = torch.cat([torch.zeros_like(D[..., :1, :]), D[..., :-1, :]], dim=-2)  # row i = D[i - 1], j < i
    a = g.cumsum(-1)  # [B, H, N, C]
    return D, D_prev, a.exp(), (a - g).exp(), suffix_exclusive(g, dim=-1).exp()


def _chunk_pass(local, Kbar, total, state: HLA2State):
    """Inter-chunk pass: the state entering every chunk (fields [B, H, N, ...]) and the final state."""
    S, C, m, G, h = state
    entering = []
    for (S_l, C_l, m_l, G_l, h_l), Kb, lam in zip(zip(*(x.unbind(2) for x in local), strict=True),
                                                  Kbar.unbind(2), total.unbind(2), strict=True):
        entering.append((S, C, m, G, h))
        lam2, lam1 = lam[..., None, None], lam[..., None]  # [B, H, 1, 1], [B, H, 1]
        G = lam2 * G + Kb @ C + G_l  # uses C entering the chunk (the previous C)
        h = lam1 * h + (Kb @ m.unsqueeze(-1)).squeeze(-1) + h_l
        S, C, m = lam2 * S + S_l, lam2 * C + C_l, lam1 * m + m_l
    stacked = HLA2State(*(torch.stack(f, dim=2) for f in zip(*entering, strict=True)))
    return stacked, HLA2State(S, C, m, G, h)


def hla2_chunk_core(q, k, v, log_gamma, *, initial_state, masked, chunk_size, ridge=0.0):
    """q, k: [B, T, H, K] (q already scaled); v: [B, T, H, V]; log_gamma: [B, T, H] or None; initial_state:
    HLA2State or None; masked: eq 3.3, else eq 3.1 (o_t = q_t^T S_t C_t); ridge: lambda of the read-out
    q_t^T (S_t + lambda I). Returns o: [B, T, H, V] and the HLA2State after the last token."""
    B, T, H, K = q.shape
    V = v.shape[-1]
    state = initial_state if initial_state is not None else zero_state(q, V)
    if T == 0:
        return v.new_zeros(B, 0, H, V), state
    g = log_gamma if log_gamma is not None else q.new_zeros(B, T, H)  # [B, T, H]
    # Step 0: pad T to N * C with zero tokens and zero gates (they leave the state unchanged), split into chunks.
    q, k, v = (split_chunks(x, chunk_size) for x in (q, k, v))  # [B, H, N, C, K|V]
    g = split_chunks(g, chunk_size)  # [B, H, N, C]
    D, D_prev, e_a, e_prev, to_end = _decay_factors(g)

    # Step 1: intra-chunk scores and the local part of P_i = k_i^T C_{i-1}.
    A = (q @ k.transpose(-1, -2)) * D  # [B, H, N, C, C], D_ti (q_t.k_i)
    Bk = (k @ q.transpose(-1, -2)) * D_prev  # [B, H, N, C, C], D_{i-1,j} (k_i.q_j), j < i
    P_loc, p_loc = Bk @ v, Bk.sum(-1)  # [B, H, N, C, V], [B, H, N, C]

    # Step 2: chunk summaries, weighted to the chunk end.
    kw = k * to_end.unsqueeze(-1)  # [B, H, N, C, K]
    local = (kw.transpose(-1, -2) @ k, (q * to_end.unsqueeze(-1)).transpose(-1, -2) @ v,
             (q * to_end.unsqueeze(-1)).sum(-2), kw.transpose(-1, -2) @ P_loc, (kw * p_loc.unsqueeze(-1)).sum(-2))
    Kbar = (kw * e_prev.unsqueeze(-1)).transpose(-1, -2) @ k  # [B, H, N, K, K]

    # Step 3: inter-chunk pass, the state entering every chunk.
    enter, final = _chunk_pass(local, Kbar, e_a[..., -1], state)

    # Step 4: outputs, o_t = q_t^T S_t C_t - q_t^T G_t.
    ea = e_a.unsqueeze(-1)  # [B, H, N, C, 1]
    U = ea * (q @ enter.S) + A @ k  # [B, H, N, C, K], rows q_t^T S_t
    if ridge:
        U = U + ridge * q  # rows q_t^T (S_t + lambda I), the stabilised read-out
    SC = ea * (U @ enter.C) + ((U @ q.transpose(-1, -2)) * D) @ v  # [B, H, N, C, V]
    P = e_prev.unsqueeze(-1) * (k @ enter.C) + P_loc  # [B, H, N, C, V], rows k_i^T C_{i-1}
    if not masked:
        return merge_chunks(SC, T), final  # eq 3.1
    qG = ea * (q @ enter.G) + A @ P  # [B, H, N, C, V]
    return merge_chunks(SC - qG, T), final
