"""Chunk-parallel form of multi-step gradient descent: the statistics entering each chunk by a prefix sum over
chunks, then the I gradient steps of all tokens of all chunks at once, by matmuls; no loop over tokens or chunks.

Implements eqs. (18)-(23) of *Test-time regression* (Wang, Shi, Fox; arXiv:2501.12352, Sec. 4 Vignette 3). As in the
recurrent form, the steps run on the read-out (DERIVATION.md): (S_t^(I))^T q_t = C_t^T z_t^(I) with
z^(i) = z^(i-1) - beta^(i) (R_t^T z^(i-1) - q_t). For token t of chunk n, with R_n, C_n the statistics entering
the chunk, R_t = R_n + sum_{s<=t in chunk} k_s k_s^T and C_t = C_n + sum_{s<=t} k_s v_s^T, so for all t at once
    (R_t^T z_t)_t = Z R_n + tril(Z K^T) K,     o_t = Z C_n + tril(Z K^T) V,
which never forms a per-token [K, K] or [K, V] matrix: O(T I (K^2 + C K)) work, O(T K) memory per step.

Legend: B batch, T time, H heads, K key dim, V value dim, N chunks, C chunk size, I gradient steps.
"""

from __future__ import annotations

import torch

from regmem.ops.common import fit_chunk, merge_chunks, split_chunks
from regmem.ops.gd.state import GDStats


def gd_chunk_core(q, k, v, beta, *, initial_state, chunk_size):
    """q, k: [B, T, H, K] (q already scaled); v: [B, T, H, V]; beta: [B, T, H, I]; initial_state: GDStats of
    R [B, H, K, K], C [B, H, K, V] or None. Returns o: [B, T, H, V] and the GDStats after the last token."""
    B, T, H, K = q.shape
    chunk_size = fit_chunk(chunk_size, T)  # a sequence shorter than a chunk: padded to its own length only
    V = v.shape[-1]
    R0, C0 = initial_state if initial_state is not None else (q.new_zeros(B, H, K, K), q.new_zeros(B, H, K, V))
    if T == 0:
        return v.new_zeros(B, 0, H, V), GDStats(R0, C0)
    # Step 0: pad T to N * C with zero tokens (they add nothing to R, C) and split into chunks.
    q, k, v, beta = (split_chunks(x, chunk_size) for x in (q, k, v, beta))  # [B, H, N, C, K|V|I]

    # Step 1: chunk statistics, and the statistics entering each chunk by a prefix sum over chunks.
    R_after = R0.unsqueeze(2) + (k.transpose(-1, -2) @ k).cumsum(dim=2)  # [B, H, N, K, K]
    C_after = C0.unsqueeze(2) + (k.transpose(-1, -2) @ v).cumsum(dim=2)  # [B, H, N, K, V]
    R_in = torch.cat([R0.unsqueeze(2), R_after[:, :, :-1]], dim=2)  # [B, H, N, K, K]
    C_in = torch.cat([C0.unsqueeze(2), C_after[:, :, :-1]], dim=2)  # [B, H, N, K, V]

    # Step 2: I gradient steps for every token at once, on z_t (the adjoint of the memory iterate).
    causal = torch.ones(chunk_size, chunk_size, dtype=torch.bool, device=q.device).tril()
    z = torch.zeros_like(q)  # [B, H, N, C, K]
    for beta_i in beta.unbind(dim=-1):  # [B, H, N, C], one gradient step
        scores = (z @ k.transpose(-1, -2)).masked_fill(~causal, 0.0)  # [B, H, N, C, C], z_t.k_s for s <= t
        Rz = z @ R_in + scores @ k  # [B, H, N, C, K], rows R_t^T z_t
        z = z - beta_i.unsqueeze(-1) * (Rz - q)

    # Step 3: read-out o_t = C_t^T z_t.
    scores = (z @ k.transpose(-1, -2)).masked_fill(~causal, 0.0)  # [B, H, N, C, C]
    o = z @ C_in + scores @ v  # [B, H, N, C, V]
    return merge_chunks(o, T), GDStats(R_after[:, :, -1], C_after[:, :, -1])
