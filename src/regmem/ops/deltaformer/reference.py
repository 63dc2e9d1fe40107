"""Reference form of DeltaFormer: the matrix form of eqs. (96)-(97), arXiv:2505.19488 App. D, one triangular solve.

    U = (I + diag(beta) A)^{-1} (diag(alpha) V)      A strictly lower, A[t, i] = sum_j a_j kappa_1(w_t^j, k_i)
    O = kappa_2(Q K^T) U                             causal, diagonal included

With a cache of S pairs (keys and their u) the new rows also erase against it: the right-hand side becomes
alpha V - diag(beta) A[:, cache] U_cache. Materialises [B, H, T, S + T]; exists to be obviously right.

Core: q: [B, T, Hq, K]; k: [B, T, H, K]; v: [B, T, H, V]; w: [B, T, H, G, K]; alpha, beta: [B, T, H];
initial_state: KUState of S pairs or None. Returns o: [B, T, Hq, V] and the KUState of the S + T pairs.

Legend: B batch, T new tokens, S cached pairs, L = S + T, H key/value heads, Hq = H R query heads, G erase vectors
per head, K key dim, V value dim.
"""

from __future__ import annotations

import torch
from einops import rearrange

from regmem.ops.deltaformer.similarities import erase_allowed, erase_matrix, read_allowed, read_matrix
from regmem.ops.deltaformer.state import KUState, cached_pairs


def deltaformer_reference_core(q, k, v, w, alpha, beta, *, initial_state, erase_weights, erase_kernel, read_kernel,
                               scale, decimals, key_mask):
    """The literal matrix form: one unit-lower-triangular solve for u, one masked matrix for the read."""
    k_all, u_cache, S = cached_pairs(k, initial_state)
    T, L = q.shape[1], k_all.shape[1]
    kh = rearrange(k_all, "b l h k -> b h l k")  # [B, H, L, K]
    wh = rearrange(w, "b t h g k -> b h g t k")  # [B, H, G, T, K]
    A = erase_matrix(wh, kh, erase_allowed(S, T, L, key_mask, q.device), weights=erase_weights,
                     kernel=erase_kernel, scale=scale, decimals=decimals)  # [B, H, T, L]
    beta_h = rearrange(beta, "b t h -> b h t 1")  # [B, H, T, 1]
    rhs = rearrange(alpha.unsqueeze(-1) * v, "b t h v -> b h t v")  # [B, H, T, V]
    if u_cache is not None:
        rhs = rhs - beta_h * (A[..., :S] @ rearrange(u_cache, "b s h v -> b h s v"))
    # (I + diag(beta) A_new) u = rhs; unitriangular: the diagonal of the first argument is taken as one
    u = torch.linalg.solve_triangular(beta_h * A[..., S:], rhs, upper=False, unitriangular=True)  # [B, H, T, V]
    u_all = rearrange(u, "b h t v -> b t h v")
    if u_cache is not None:
        u_all = torch.cat([u_cache, u_all], dim=1)  # [B, L, H, V]
    o = read(q, k_all, u_all, S, key_mask, kernel=read_kernel, scale=scale, decimals=decimals)
    return o, KUState(k_all, u_all)


def read(q, k_all, u_all, S, key_mask, *, kernel, scale, decimals):
    """o [B, T, Hq, V] = kappa_2(q k^T) u over the pairs each query reads, by one materialised matrix.

    q: [B, T, Hq, K]; k_all: [B, L, H, K]; u_all: [B, L, H, V]; the T queries sit at absolute rows S..S+T-1."""
    T, L = q.shape[1], k_all.shape[1]
    repeats = q.shape[2] // k_all.shape[2]
    qh = rearrange(q, "b t h k -> b h t k")  # [B, Hq, T, K]
    kh = rearrange(k_all, "b l h k -> b h l k").repeat_interleave(repeats, dim=1)  # [B, Hq, L, K]
    uh = rearrange(u_all, "b l h v -> b h l v").repeat_interleave(repeats, dim=1)  # [B, Hq, L, V]
    P = read_matrix(qh, kh, read_allowed(S, T, L, key_mask, q.device), kernel=kernel, scale=scale,
                    decimals=decimals)  # [B, Hq, T, L]
    return rearrange(P @ uh, "b h t v -> b t h v")
