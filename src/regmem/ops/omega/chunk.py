"""Chunk-parallel form of the Omega rule: one unit-lower-triangular solve per chunk over the chunk's C * c
(token, window slot) errors, matmuls for the outputs and the chunk-end states, S carried across chunks.

Implements the Omega rule (Atlas, arXiv:2505.23735, Sec. 3; *Nested Learning*, arXiv:2512.24695, eq. (68)) in
regmem's layout (DERIVATION.md beside this file). Write the update as S_t = alpha_t S_{t-1} + sum_j kw_tj u_tj^T over
the c slots j of token t's window (kw_tj, vw_tj, gw_tj: the window's keys, values, weights), with the errors
u_tj = beta_t gw_tj (vw_tj - S_{t-1}^T kw_tj): [V]. Inside a chunk, with S_0 entering it and alpha = exp(g):
    S_i = a_i S_0 + sum_{r<=i} D_ir sum_j kw_rj u_rj^T,     a_i = prod_{j<=i} alpha_j,  D_ir = prod_{r<j<=i} alpha_j
and the errors, indexed n = (i, j) in order, solve one unit-lower-triangular system per chunk,
    (I + L) U = b ⊙ Vw - (b a_prev ⊙ Kw) S_0,     L_nm = b_n D_{i-1,r} kw_n.kw_m  (m = (r, l), r < i),
with b_n = beta_i gw_ij and a_prev_i = a_{i-1} (a_0 = 1). Outputs: o_i = a_i S_0^T q_i + sum_{m: r<=i} D_ir
(kw_m.q_i) u_m. Every decay factor is exp of a direct sum of log retentions (<= 0).

Legend: B batch, T time, H heads, K key dim, V value dim, N chunks, C chunk size, c window.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from einops import rearrange

from regmem.ops.common import fit_chunk, merge_chunks, segsum, split_chunks
from regmem.ops.omega.state import OmegaState, empty_state, extended, final_window


def omega_chunk_core(q, k, v, g, beta, gamma, live, *, initial_state, window, chunk_size):
    """q, k: [B, T, H, K] (q already scaled); v: [B, T, H, V]; g, beta, gamma: [B, T, H]; live: [B, T, H] or None;
    initial_state: OmegaState or None. Returns o: [B, T, H, V] and the OmegaState after the last token."""
    B, T, H, K = q.shape
    chunk_size = fit_chunk(chunk_size, T)  # a sequence shorter than a chunk: padded to its own length only
    V = v.shape[-1]
    c = window
    state = initial_state if initial_state is not None else empty_state(B, H, K, V, window, q)
    ks, vs, gammas = extended(state, k, v, gamma)  # [B, c - 1 + T, H, ...]
    cache = final_window(ks, vs, gammas, live, window)
    if T == 0:
        return v.new_zeros(B, 0, H, V), OmegaState(state.S, *cache)
    # Step 0: each token's window (positions t .. t + c - 1 of the extended sequence), split into chunks; the
    # zero padding past T is neutral (g = 0, beta = 0 leave S unchanged).
    kw = rearrange(ks.unfold(1, c, 1), "b t h k c -> b t h (c k)")  # [B, T, H, c * K]
    vw = rearrange(vs.unfold(1, c, 1), "b t h v c -> b t h (c v)")  # [B, T, H, c * V]
    gw = gammas.unfold(1, c, 1)  # [B, T, H, c]
    q = split_chunks(q, chunk_size)  # [B, H, N, C, K]
    kw = rearrange(split_chunks(kw, chunk_size), "b h n i (c k) -> b h n (i c) k", c=c)  # [B, H, N, C * c, K]
    vw = rearrange(split_chunks(vw, chunk_size), "b h n i (c v) -> b h n (i c) v", c=c)  # [B, H, N, C * c, V]
    gw = rearrange(split_chunks(gw, chunk_size), "b h n i c -> b h n (i c)")  # [B, H, N, C * c]
    g, beta = (split_chunks(x, chunk_size) for x in (g, beta))  # [B, H, N, C]

    # Step 1: decay kernels of the chunk, every factor <= 1, expanded over the window slots.
    D = torch.exp(segsum(g))  # [B, H, N, C(i), C(r)], prod_{r<j<=i} alpha_j, zero above the diagonal
    a = torch.exp(g.cumsum(dim=-1))  # [B, H, N, C], prod_{j<=i} alpha_j
    D_prev = F.pad(D[..., :-1, :], (0, 0, 1, 0))  # [B, H, N, C, C], row i = D_{i-1}, row 0 = 0
    a_prev = F.pad(a[..., :-1], (1, 0), value=1.0)  # [B, H, N, C], a_{i-1}, a_0 = 1
    D_slots = D.repeat_interleave(c, dim=-1)  # [B, H, N, C, C * c], D_{i, r(m)}
    D_prev_slots = D_prev.repeat_interleave(c, dim=-1).repeat_interleave(c, dim=-2)  # [B, H, N, Cc, Cc]
    b = beta.repeat_interleave(c, dim=-1) * gw  # [B, H, N, C * c], beta_i gw_ij

    # Step 2: the triangular system for the errors, solved once per chunk for both right-hand sides (WY form):
    # U = U_v - W_k S_0.
    L = b.unsqueeze(-1) * D_prev_slots * (kw @ kw.transpose(-1, -2))  # [B, H, N, Cc, Cc], strictly lower
    rhs_k = (b * a_prev.repeat_interleave(c, dim=-1)).unsqueeze(-1) * kw  # [B, H, N, Cc, K]
    rhs = torch.cat([b.unsqueeze(-1) * vw, rhs_k], dim=-1)  # [B, H, N, Cc, V + K]
    U_v, W_k = torch.linalg.solve_triangular(L, rhs, upper=False, unitriangular=True).split([V, K], dim=-1)

    # Step 3: what each error contributes to the chunk-end state.
    k_end = kw * D_slots[..., -1, :].unsqueeze(-1)  # [B, H, N, Cc, K], D_{C,r} kw_m
    a_end = a[..., -1][..., None, None]  # [B, H, N, 1, 1]

    # Step 4: inter-chunk pass, one step per chunk (unbind keeps the backward linear in the number of chunks).
    S = state.S
    S_in, errors = [], []
    for U_n, W_n, k_n, a_n in zip(*(x.unbind(dim=2) for x in (U_v, W_k, k_end, a_end)), strict=True):
        S_in.append(S)
        E_n = U_n - W_n @ S  # [B, H, Cc, V], u_m = beta_i gw_m (vw_m - S_{i-1}^T kw_m)
        errors.append(E_n)
        S = a_n * S + k_n.transpose(-1, -2) @ E_n  # [B, H, K, V]
    S_in, U = torch.stack(S_in, dim=2), torch.stack(errors, dim=2)  # [B, H, N, K, V], [B, H, N, Cc, V]

    # Step 5: outputs o_i = S_i^T q_i from the entering state and the chunk's errors.
    A = (q @ kw.transpose(-1, -2)) * D_slots  # [B, H, N, C, Cc], D_{i,r} kw_m.q_i (r <= i)
    o = (q * a.unsqueeze(-1)) @ S_in + A @ U  # [B, H, N, C, V]
    return merge_chunks(o, T), OmegaState(S, *cache)
