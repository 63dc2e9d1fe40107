"""Chunk-parallel form of Oja's rule: one unit-lower-triangular solve per chunk (DeltaNet's UT/WY trick with keys
and values exchanged), matmuls for the outputs and the chunk-end states, S carried across chunks.

Implements *Nested Learning* (arXiv:2512.24695), Sec. 5, eq. (66) in regmem's layout (DERIVATION.md beside this
file). Write the update as S_t = alpha_t S_{t-1} + u_t v_t^T with the error u_t = beta_t (k_t - S_{t-1} v_t): [K].
Inside a chunk, with S_0 entering it, token positions i, r and alpha = exp(g):
    S_i = a_i S_0 + sum_{r<=i} D_ir u_r v_r^T,       a_i = prod_{j<=i} alpha_j,  D_ir = prod_{r<j<=i} alpha_j
and the errors (rows of U) solve one unit-lower-triangular system per chunk,
    (I + L) U = beta ⊙ K - (beta a_prev ⊙ V) S_0^T,      L_ir = beta_i D_{i-1,r} v_i.v_r  (r < i),
with a_prev_i = a_{i-1} (a_0 = 1). Outputs: o_i = a_i S_0^T q_i + sum_{r<=i} D_ir (u_r.q_i) v_r.
Every decay factor is exp of a direct sum of log retentions (<= 0), so g = -20 per step and g = 0 are exact.

Legend: B batch, T time, H heads, K key dim, V value dim, N chunks, C chunk size.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from regmem.ops.common import fit_chunk, merge_chunks, segsum, split_chunks


def oja_chunk_core(q, k, v, g, beta, *, initial_state, chunk_size):
    """q, k: [B, T, H, K] (q already scaled); v: [B, T, H, V]; g, beta: [B, T, H]; initial_state: [B, H, K, V] or
    None. Returns o: [B, T, H, V] and the state after the last token, [B, H, K, V]."""
    B, T, H, K = q.shape
    chunk_size = fit_chunk(chunk_size, T)  # a sequence shorter than a chunk: padded to its own length only
    V = v.shape[-1]
    S = initial_state if initial_state is not None else q.new_zeros(B, H, K, V)
    if T == 0:
        return v.new_zeros(B, 0, H, V), S
    # Step 0: split into chunks; the zero padding past T is neutral (g = 0, beta = 0 leave S unchanged).
    q, k, v = (split_chunks(x, chunk_size) for x in (q, k, v))  # [B, H, N, C, K|V]
    g, beta = (split_chunks(x, chunk_size) for x in (g, beta))  # [B, H, N, C]

    # Step 1: decay kernels of the chunk, every factor <= 1.
    D = torch.exp(segsum(g))  # [B, H, N, C(i), C(r)], prod_{r<j<=i} alpha_j, zero above the diagonal
    a = torch.exp(g.cumsum(dim=-1))  # [B, H, N, C], prod_{j<=i} alpha_j
    D_prev = F.pad(D[..., :-1, :], (0, 0, 1, 0))  # [B, H, N, C, C], row i = D_{i-1}, row 0 = 0
    a_prev = F.pad(a[..., :-1], (1, 0), value=1.0)  # [B, H, N, C], a_{i-1}, a_0 = 1

    # Step 2: the triangular system for the errors, solved once per chunk for both right-hand sides (WY form):
    # U = U_k - W_v S_0^T.
    L = beta.unsqueeze(-1) * D_prev * (v @ v.transpose(-1, -2))  # [B, H, N, C, C], strictly lower
    rhs = torch.cat([beta.unsqueeze(-1) * k, (beta * a_prev).unsqueeze(-1) * v], dim=-1)  # [B, H, N, C, K + V]
    U_k, W_v = torch.linalg.solve_triangular(L, rhs, upper=False, unitriangular=True).split([K, V], dim=-1)

    # Step 3: what each error contributes to the chunk-end state.
    v_end = v * D[..., -1, :].unsqueeze(-1)  # [B, H, N, C, V], D_{C,r} v_r
    a_end = a[..., -1][..., None, None]  # [B, H, N, 1, 1]

    # Step 4: inter-chunk pass, one step per chunk (unbind keeps the backward linear in the number of chunks).
    S_in, errors = [], []
    for U_n, W_n, v_n, a_n in zip(*(x.unbind(dim=2) for x in (U_k, W_v, v_end, a_end)), strict=True):
        S_in.append(S)
        E_n = U_n - W_n @ S.transpose(-1, -2)  # [B, H, C, K], u_i = beta_i (k_i - S_{i-1} v_i)
        errors.append(E_n)
        S = a_n * S + E_n.transpose(-1, -2) @ v_n  # [B, H, K, V]
    S_in, U = torch.stack(S_in, dim=2), torch.stack(errors, dim=2)  # [B, H, N, K, V], [B, H, N, C, K]

    # Step 5: outputs o_i = S_i^T q_i from the entering state and the chunk's errors.
    A = (q @ U.transpose(-1, -2)) * D  # [B, H, N, C, C], D_ir u_r.q_i (r <= i)
    o = (q * a.unsqueeze(-1)) @ S_in + A @ v  # [B, H, N, C, V]
    return merge_chunks(o, T), S
