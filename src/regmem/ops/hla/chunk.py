"""Chunk-parallel forms of the HLA ops (the training forms). For hla2: intra-chunk terms for all chunks at once by
matmuls, a short inter-chunk pass over the chunk summaries (the masked scan of eq 4.1, with the decay erratum
fixed), then the outputs of all chunks at once. No per-token [K, K] or [K, V] tensor is formed.

Implements Theorem 3.1 (eq 3.3) and the chunk scan of sec. 4 of *Higher-order Linear Attention* (Zhang, Qin,
Wang, Gu; arXiv:2510.27258), corrected (DERIVATION.md, errata 1-2). For token t of a chunk entering with
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

ahla (Fig. 2C, corrected) and hla3 (sec. 7): see the docstrings of their cores and DERIVATION.md.
"""

from __future__ import annotations

import torch

from regmem.ops.common import fit_chunk, merge_chunks, segsum, split_chunks, suffix_exclusive
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


def hla2_chunk_core(q, k, v, log_gamma, *, initial_state, masked, chunk_size, ridge):
    """q, k: [B, T, H, K] (q already scaled); v: [B, T, H, V]; log_gamma: [B, T, H] or None; initial_state:
    HLA2State or None; masked: eq 3.3, else eq 3.1 (o_t = q_t^T S_t C_t); ridge: lambda of the read-out
    q_t^T (S_t + lambda I). Returns o: [B, T, H, V] and the HLA2State after the last token."""
    B, T, H, K = q.shape
    chunk_size = fit_chunk(chunk_size, T)  # a sequence shorter than a chunk: padded to its own length only
    V = v.shape[-1]
    state = initial_state if initial_state is not None else hla2_zero_state(q, V)
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



def _ahla_chunk_pass(local, Rk, total, state: AHLAState):
    """The state entering every chunk (fields [B, H, N, ...]) and the final state. local: per-chunk (P, m, E, n)
    weighted to the chunk end; Rk: [B, H, N, K, K] undecayed sum_i k_i q_i^T; total: [B, H, N] = e^{a_C}."""
    P, m, E, n = state
    entering = []
    for (P_l, m_l, E_l, n_l), R, lam in zip(zip(*(x.unbind(2) for x in local), strict=True), Rk.unbind(2),
                                             total.unbind(2), strict=True):
        entering.append((P, m, E, n))
        lam2, lam1 = lam[..., None, None], lam[..., None]  # [B, H, 1, 1], [B, H, 1]
        E = lam2 * (E + R @ P) + E_l  # eq 6.2 merge, uses P entering the chunk
        n = lam1 * (n + (R @ m.unsqueeze(-1)).squeeze(-1)) + n_l
        P, m = lam2 * P + P_l, lam1 * m + m_l
    stacked = AHLAState(*(torch.stack(f, dim=2) for f in zip(*entering, strict=True)))
    return stacked, AHLAState(P, m, E, n)


def ahla_chunk_core(q, k, v, log_gamma, *, initial_state, chunk_size):
    """Same contract as ahla_reference_core; chunk-parallel (the training form)."""
    B, T, H, K = q.shape
    chunk_size = fit_chunk(chunk_size, T)  # a sequence shorter than a chunk: padded to its own length only
    V = v.shape[-1]
    state = initial_state if initial_state is not None else ahla_zero_state(k, V)
    if T == 0:
        return v.new_zeros(B, 0, H, V), state
    g = log_gamma if log_gamma is not None else q.new_zeros(B, T, H)  # [B, T, H]
    # Pad T to N * C with zero tokens and zero gates (neutral), split into chunks.
    q, k, v = (split_chunks(x, chunk_size) for x in (q, k, v))  # [B, H, N, C, K|V]
    g = split_chunks(g, chunk_size)  # [B, H, N, C]
    D = torch.exp(segsum(g))  # [B, H, N, C(t), C(i)], e^{a_t - a_i} for i <= t
    e_a = g.cumsum(-1).exp()  # [B, H, N, C], e^{a_t}
    to_end = suffix_exclusive(g, dim=-1).exp().unsqueeze(-1)  # [B, H, N, C, 1], e^{a_C - a_i}

    A = (q @ k.transpose(-1, -2)) * D  # [B, H, N, C, C], D_ti (q_t.k_i), inclusive diagonal
    r_loc, s_loc = A @ v, A.sum(-1)  # [B, H, N, C, V], [B, H, N, C]: local q_t^T P_t, q_t^T m_t
    kw = k * to_end  # [B, H, N, C, K]
    local = (kw.transpose(-1, -2) @ v, kw.sum(-2), kw.transpose(-1, -2) @ r_loc, (kw * s_loc.unsqueeze(-1)).sum(-2))
    Rk = k.transpose(-1, -2) @ q  # [B, H, N, K, K], undecayed R^{KQ} of the chunk
    enter, final = _ahla_chunk_pass(local, Rk, e_a[..., -1], state)

    ea = e_a.unsqueeze(-1)  # [B, H, N, C, 1]
    r = ea * (q @ enter.P) + r_loc  # [B, H, N, C, V], q_t^T P_t
    o = ea * (q @ enter.E) + A @ r  # [B, H, N, C, V], q_t^T E_t
    return merge_chunks(o, T), final



def _entering(x0: torch.Tensor, per_chunk: torch.Tensor) -> torch.Tensor:
    """x0: [B, H, ...] the state before chunk 1; per_chunk: [B, H, N, ...] each chunk's increment -> the state
    entering every chunk, x0 + the exclusive prefix sum over chunks: [B, H, N, ...]."""
    shifted = torch.cat([torch.zeros_like(per_chunk[:, :, :1]), per_chunk[:, :, :-1]], dim=2)  # chunk n-1 at n
    return x0.unsqueeze(2) + shifted.cumsum(2)


def hla3_causal_chunk_core(q, k, v, *, initial_state, chunk_size):
    """Same contract as hla3_causal_reference_core; chunk-parallel (the training form). The reference's masked
    matrix form per chunk: for a chunk entering with (S_0, P_0, F_0) and W = L ⊙ Q K^T of the chunk,
        Y = Q S_0^T + W K   (row u = (S_u q_u)^T),      R = Q P_0 + W V   (row u = q_u^T P_u),
        M = (Q Y^T) ⊙ L     (M_tu = q_t^T S_u q_u),     O = Q F_0 + M R,
    carry S += K^T K, P += K^T V, F += Y^T R. Without decay the carries are plain sums, so S_0, P_0 entering
    every chunk are prefix sums of the chunks' K^T K, K^T V; then Y, R of every chunk, then F_0 entering every
    chunk is the prefix sum of their Y^T R: no serial pass over chunks."""
    B, T, H, K = q.shape
    chunk_size = fit_chunk(chunk_size, T)  # a sequence shorter than a chunk: padded to its own length only
    V = v.shape[-1]
    S0, P0, F0 = initial_state if initial_state is not None else hla3_zero_state(k, V)
    if T == 0:
        return v.new_zeros(B, 0, H, V), HLA3State(S0, P0, F0)
    # Step 0: pad T to N * C with zero tokens (they add nothing to S, P, F; their outputs are dropped), split.
    q, k, v = (split_chunks(x, chunk_size) for x in (q, k, v))  # [B, H, N, C, K|V]
    # Step 1: each chunk's increments of S and P, and the S, P entering every chunk.
    dS, dP = k.transpose(-1, -2) @ k, k.transpose(-1, -2) @ v  # [B, H, N, K, K], [B, H, N, K, V]
    S, P = _entering(S0, dS), _entering(P0, dP)  # [B, H, N, K, K], [B, H, N, K, V]
    # Step 2: intra-chunk scores and the rows (S_u q_u)^T, q_u^T P_u of every token.
    L = torch.ones(chunk_size, chunk_size, dtype=torch.bool, device=q.device).tril()
    W = (q @ k.transpose(-1, -2)).masked_fill(~L, 0)  # [B, H, N, C, C]
    Y = q @ S.transpose(-1, -2) + W @ k  # [B, H, N, C, K]
    R = q @ P + W @ v  # [B, H, N, C, V]
    # Step 3: each chunk's increment of F and the F entering every chunk.
    dF = Y.transpose(-1, -2) @ R  # [B, H, N, K, V]
    F = _entering(F0, dF)  # [B, H, N, K, V]
    # Step 4: outputs, o_t = q_t^T F_0 + sum_{u<=t in chunk} (q_t^T S_u q_u)(q_u^T P_u).
    M = (q @ Y.transpose(-1, -2)).masked_fill(~L, 0)  # [B, H, N, C(t), C(u)]
    o = q @ F + M @ R  # [B, H, N, C, V]
    final = HLA3State(S0 + dS.sum(2), P0 + dP.sum(2), F0 + dF.sum(2))
    return merge_chunks(o, T), final



def hla3_paper_chunk_core(q, k, v, *, initial_state, chunk_size):
    """The paper's third-order recurrence (Alg. 3, gamma = 1) chunk-parallel; same contract as
    hla3_paper_reference_core. Per chunk entering with (SK_0, SQ_0, P_0, G_0), with L the inclusive and L_s the
    strict lower-triangular [C, C] masks and U_s = L_s^T the strict upper one:
        A = Q SK_0 + (L ⊙ Q K^T) K               (row t = q_t^T SK_t)
        Z = A SQ_0 + (L ⊙ A Q^T) Q               (row t = q_t^T SK_t SQ_t)
        num = Z P_0 + (L ⊙ Z K^T) V              (row t = q_t^T SK_t SQ_t P_t)
    and q_t^T G_t = q_t^T G_0 + sum_{s<=t in chunk} q_t^T (G1_s + G2_s + G3_s) with the increments of recurrent.py,
        q_t^T G1_s = (q_t.k_s) r1_s,   r1 rows k_s^T SQ_{s-1} P_{s-1}:   X = K SQ_0 + (L_s ⊙ K Q^T) Q,
                                                                        R1 = X P_0 + (L_s ⊙ X K^T) V
        q_t^T G2_s = (q_t^T SK_{s-1} q_s)(q_s^T P_{s-1}):   M2 = Q SK_0 Q^T + (Q K^T)((K Q^T) ⊙ U_s),
                                                           R2 = Q P_0 + (L_s ⊙ Q K^T) V
        q_t^T G3_s = (q_t^T SK_{s-1} n_s) v_s,  n_s = SQ_{s-1} k_s:  N = K SQ_0^T + (L_s ⊙ K Q^T) Q (rows n_s),
                                                           M3 = Q SK_0 N^T + (Q K^T)((K N^T) ⊙ U_s)
    so o = num - Q G_0 - (L ⊙ Q K^T) R1 - (L ⊙ M2) R2 - (L ⊙ M3) V. The chunk's G increment is
        K^T R1 + Y^T R2 + W^T V,   Y = Q SK_0^T + (L_s ⊙ Q K^T) K (rows (SK_{s-1} q_s)^T),
                                   W = N SK_0^T + (L_s ⊙ N K^T) K (rows (SK_{s-1} n_s)^T).
    Every carry is a plain sum, so the states entering all chunks are prefix sums over chunks (as for the causal
    variant): nothing runs serially. O(C^2 (K + V) + C^3) per chunk."""
    B, T, H, K = q.shape
    chunk_size = fit_chunk(chunk_size, T)  # a sequence shorter than a chunk: padded to its own length only
    V = v.shape[-1]
    SK0, SQ0, P0, G0 = initial_state if initial_state is not None else hla3_paper_zero_state(k, V)
    if T == 0:
        return v.new_zeros(B, 0, H, V), HLA3PaperState(SK0, SQ0, P0, G0)
    # Step 0: pad T to N * C with zero tokens (they add nothing to any summary; their outputs are dropped), split.
    q, k, v = (split_chunks(x, chunk_size) for x in (q, k, v))  # [B, H, N, C, K|V]
    # Step 1: the SK, SQ, P entering every chunk (prefix sums over chunks).
    dSK, dSQ, dP = k.transpose(-1, -2) @ k, q.transpose(-1, -2) @ q, k.transpose(-1, -2) @ v
    SK, SQ, P = _entering(SK0, dSK), _entering(SQ0, dSQ), _entering(P0, dP)  # [B, H, N, K, K|V]
    incl = torch.ones(chunk_size, chunk_size, dtype=torch.bool, device=q.device).tril()
    strict = incl.tril(-1)
    QK, KQ = q @ k.transpose(-1, -2), k @ q.transpose(-1, -2)  # [B, H, N, C, C]
    QK_in, QK_s, KQ_s = QK.masked_fill(~incl, 0), QK.masked_fill(~strict, 0), KQ.masked_fill(~strict, 0)
    KQ_upper = KQ.masked_fill(~strict.T, 0)  # (k_i.q_s) for i < s

    # Step 2: the numerator q_t^T SK_t SQ_t P_t.
    A = q @ SK + QK_in @ k  # [B, H, N, C, K]
    Z = A @ SQ + (A @ q.transpose(-1, -2)).masked_fill(~incl, 0) @ q  # [B, H, N, C, K]
    num = Z @ P + (Z @ k.transpose(-1, -2)).masked_fill(~incl, 0) @ v  # [B, H, N, C, V]

    # Step 3: the G increments of every token, read by every query of the chunk.
    X = k @ SQ + KQ_s @ q  # [B, H, N, C, K], rows k_s^T SQ_{s-1}
    R1 = X @ P + (X @ k.transpose(-1, -2)).masked_fill(~strict, 0) @ v  # [B, H, N, C, V]
    R2 = q @ P + QK_s @ v  # [B, H, N, C, V], rows q_s^T P_{s-1}
    M2 = q @ SK @ q.transpose(-1, -2) + QK @ KQ_upper  # [B, H, N, C(t), C(s)], q_t^T SK_{s-1} q_s
    Nn = k @ SQ.transpose(-1, -2) + KQ_s @ q  # [B, H, N, C, K], rows n_s = SQ_{s-1} k_s
    M3 = q @ SK @ Nn.transpose(-1, -2) + QK @ (k @ Nn.transpose(-1, -2)).masked_fill(~strict.T, 0)  # [.., C, C]
    qG_local = QK_in @ R1 + M2.masked_fill(~incl, 0) @ R2 + M3.masked_fill(~incl, 0) @ v  # [B, H, N, C, V]

    # Step 4: each chunk's G increment, the G entering every chunk, and the outputs.
    Y = q @ SK.transpose(-1, -2) + QK_s @ k  # [B, H, N, C, K], rows (SK_{s-1} q_s)^T
    W = Nn @ SK.transpose(-1, -2) + (Nn @ k.transpose(-1, -2)).masked_fill(~strict, 0) @ k  # rows (SK_{s-1} n_s)^T
    dG = k.transpose(-1, -2) @ R1 + Y.transpose(-1, -2) @ R2 + W.transpose(-1, -2) @ v  # [B, H, N, K, V]
    G = _entering(G0, dG)  # [B, H, N, K, V]
    o = num - q @ G - qG_local  # [B, H, N, C, V]
    final = HLA3PaperState(SK0 + dSK.sum(2), SQ0 + dSQ.sum(2), P0 + dP.sum(2), G0 + dG.sum(2))
    return merge_chunks(o, T), final
