"""Chunk form of DeltaFormer: Listing 1 of arXiv:2505.19488 (App. D.2-D.3), cleaned, for any kernel pair.

u depends on every earlier u, so the T new tokens are processed in chunks of C rows. For the chunk of rows
[s, e) (absolute rows S + s .. S + e - 1 after S cached pairs):

  1. A_c = erase weights of the chunk's rows against all the pairs they can see, [C, S + e] (similarities.py). For
     kappa_1 = softmax the row normalisation Z^(1)_t of eq. 94 runs over the previous pairs and the earlier rows of
     the chunk together. Listing 1 computes it as two partial softmaxes and mixes them by their shares of the mass
     (its Z_intra / Z_inter names are swapped); one softmax over the [C, S + e] block is the same number.
  2. Right-hand side: P_c = alpha_c V_c - beta_c A_c[:, previous] U_previous  (O(C (S + s) V) per chunk).
  3. U_c = (I + beta_c A_c[:, chunk])^{-1} P_c, the chunk block being strictly lower triangular:
       solver="triangular": torch.linalg.solve_triangular (forward substitution, exact);
       solver="doubling": App. D.3.1, eq. (100): (I + A)^{-1} = (I - A) prod_{i >= 1} (I + A^(2^i)), exact because
       A is nilpotent (A^C = 0); log2(C) - 1 rounds of matmuls instead of C sequential steps.
  4. Read, eq. (42): kappa_2 = softmax is causal softmax attention with the u as values, one fused
     `scaled_dot_product_attention` call; any other kappa_2 is a masked [C, S + e] matrix per chunk of queries.

Listing 1 needs T divisible by C and silently drops a remainder; here the last chunk is shorter. Cost: O(T^2 K) for
the erase scores and reads plus O(T C V) for the solves (App. D.3's O(T^2 d + T C d + T C^2)), T/C sequential steps.

Core: as reference.py, plus `chunk_size` (C) and `solver`. Legend: B batch, T new tokens, S cached pairs, H heads,
Hq query heads, G erase vectors per head, K key dim, V value dim, C chunk size.
"""

from __future__ import annotations

import math

import torch
from einops import rearrange

from regmem.ops.deltaformer.reference import read
from regmem.ops.deltaformer.similarities import erase_allowed, erase_matrix
from regmem.ops.deltaformer.state import KUState, cached_pairs
from regmem.ops.nonparametric.chunk import softmax_chunk_core
from regmem.ops.nonparametric.state import KVState

SOLVERS = ("triangular", "doubling")


def deltaformer_chunk_core(q, k, v, w, alpha, beta, *, initial_state, erase_weights, erase_kernel, read_kernel,
                           scale, decimals, key_mask, chunk_size, solver="triangular"):
    """Chunks of C rows: erase weights against everything seen (step 1), right-hand side (2), block solve (3);
    then one read over all rows (4)."""
    if solver not in SOLVERS:
        raise ValueError(f"solver must be one of {SOLVERS}, got {solver!r}")
    k_all, u_cache, S = cached_pairs(k, initial_state)
    T = q.shape[1]
    kh = rearrange(k_all, "b l h k -> b h l k")  # [B, H, S + T, K]
    wh = rearrange(w, "b t h g k -> b h g t k")  # [B, H, G, T, K]
    rhs_all = rearrange(alpha.unsqueeze(-1) * v, "b t h v -> b h t v")  # [B, H, T, V]
    beta_h = rearrange(beta, "b t h -> b h t 1")  # [B, H, T, 1]
    us = [] if u_cache is None else [rearrange(u_cache, "b s h v -> b h s v")]  # pieces [B, H, *, V]
    for s in range(0, T, chunk_size):
        e = min(s + chunk_size, T)
        # Step 1: erase weights of rows S+s..S+e-1 against the S + e pairs they can see.
        A = erase_matrix(wh[:, :, :, s:e], kh[:, :, :S + e], erase_allowed(S + s, e - s, S + e, key_mask, q.device),
                         weights=erase_weights, kernel=erase_kernel, scale=scale, decimals=decimals)  # [B, H, C, S+e]
        # Step 2: what the previous pairs erase.
        rhs = rhs_all[:, :, s:e]  # [B, H, C, V]
        if S + s:
            rhs = rhs - beta_h[:, :, s:e] * (A[..., :S + s] @ torch.cat(us, dim=2))
        # Step 3: the chunk's own unit-lower-triangular system.
        block = beta_h[:, :, s:e] * A[..., S + s:]  # [B, H, C, C], strictly lower
        if solver == "triangular":
            us.append(torch.linalg.solve_triangular(block, rhs, upper=False, unitriangular=True))
        else:
            us.append(unit_lower_inverse(block) @ rhs)
    u_all = torch.cat(us, dim=2) if us else v.new_zeros(v.shape[0], v.shape[2], 0, v.shape[-1])  # [B, H, S+T, V]
    u_all = rearrange(u_all, "b h l v -> b l h v")
    o = chunked_read(q, k_all, u_all, S, key_mask, read_kernel=read_kernel, scale=scale, decimals=decimals,
                     chunk_size=chunk_size)  # step 4
    return o, KUState(k_all, u_all)


def chunked_read(q, k_all, u_all, S, key_mask, *, read_kernel, scale, decimals, chunk_size):
    """Step 4, o [B, T, Hq, V]: one SDPA call for kappa_2 = softmax, else a masked [C, S + e] matrix per chunk of
    queries. q: [B, T, Hq, K]; k_all: [B, L, H, K]; u_all: [B, L, H, V]."""
    T = q.shape[1]
    if read_kernel == "softmax":
        return softmax_read(q, k_all, u_all, S, key_mask, scale)
    if not T:
        return u_all.new_zeros(q.shape[0], 0, q.shape[2], u_all.shape[-1])
    return torch.cat([read(q[:, s:s + chunk_size], k_all[:, :S + s + chunk_size], u_all[:, :S + s + chunk_size],
                           S + s, key_mask, kernel=read_kernel, scale=scale, decimals=decimals)
                      for s in range(0, T, chunk_size)], dim=1)


def unit_lower_inverse(A: torch.Tensor) -> torch.Tensor:
    """(I + A)^{-1} for strictly lower-triangular A [..., C, C], by eq. (100) of arXiv:2505.19488 (App. D.3.1):
    X_0 = I - A, Y_0 = A^2; X_i = X_{i-1} + X_{i-1} Y_{i-1}, Y_i = Y_{i-1}^2, for i < ceil(log2 C)."""
    C = A.shape[-1]
    X = torch.eye(C, dtype=A.dtype, device=A.device) - A
    Y = A @ A
    for _ in range(1, math.ceil(math.log2(C)) if C > 1 else 1):
        X = X + X @ Y
        Y = Y @ Y
    return X


def softmax_read(q, k_all, u_all, S, key_mask, scale):
    """Causal softmax attention with the u as values (eq. 42 with kappa_2 = softmax): the fused SDPA form of
    `softmax_attn`, the S cached pairs as its cache and the key/value heads repeated to the query heads.

    q: [B, T, Hq, K]; k_all: [B, L, H, K]; u_all: [B, L, H, V] -> o: [B, T, Hq, V]."""
    repeats = q.shape[2] // k_all.shape[2]
    k_all, u_all = (x.repeat_interleave(repeats, dim=2) for x in (k_all, u_all))  # [B, L, Hq, *]
    cache = KVState(k_all[:, :S], u_all[:, :S]) if S else None
    o, _ = softmax_chunk_core(q, k_all[:, S:], u_all[:, S:], initial_state=cache, scale=scale, bandwidth=None,
                              qk_norm=False, key_mask=key_mask, chunk_size=0)
    return o
