"""Chunk-parallel form of (gated) linear attention: matmuls within chunks, the state carried across chunks.

Implements eq. (4)/(16) of *Test-time regression* (Wang, Shi, Fox; arXiv:2501.12352) by the chunkwise
decomposition of GLA (Yang et al. 2024, arXiv:2312.06635, Sec. 3) and SSD (Dao & Gu 2024, arXiv:2405.21060).
For chunk n with state S_n entering it, and t, s positions inside the chunk:
    o_t = sum_{s<=t} (q_t ⊙ L_ts)^T k_s v_s + (q_t ⊙ e^{b_t})^T S_n                  (intra + inter)
    S_{n+1} = e^{b_C} ⊙ S_n + sum_s (k_s ⊙ e^{b_C - b_s}) v_s^T                    (state pass)
where b_t = sum_{j<=t} g_j is the log-decay from the chunk start. No exponent is ever positive: every decay is
a direct sum of the gates it spans (ops/common/decay.py), or a difference of sums over at most 8 steps, so
g = -20 per step and g = 0 are both exact. With a diagonal gate, decays inside a chunk are per key channel;
the scores come from a halving tree of blocks whose pairs factor their decay through the boundary between the
block's halves (ops/common/scores.py; GLA's secondary chunking taken down to single tokens).

Legend: B batch, T time, H heads, K key (feature) dim, V value dim, N chunks, C chunk size.
"""

from __future__ import annotations

import torch

from regmem.ops.common import chunk_decays, decayed_scores, fit_chunk, merge_chunks, split_chunks


def gla_chunk_core(q, k, v, g, *, initial_state, chunk_size):
    """q, k: [B, T, H, K] (q already scaled); v: [B, T, H, V]; g: None, [B, T, H] or [B, T, H, K];
    initial_state: [B, H, K, V] or None. Returns o: [B, T, H, V] and S_T: [B, H, K, V]."""
    B, T, H, K = q.shape
    chunk_size = fit_chunk(chunk_size, T)  # a sequence shorter than a chunk: padded to its own length only
    V = v.shape[-1]
    S0 = initial_state if initial_state is not None else q.new_zeros(B, H, K, V)
    if T == 0:
        return v.new_zeros(B, 0, H, V), S0
    # Step 0: pad T to N * C with neutral tokens (q = k = v = 0, g = 0) and split into chunks.
    q, k, v = (split_chunks(x, chunk_size) for x in (q, k, v))  # [B, H, N, C, K|V]
    if g is None:
        o, S = _ungated(q, k, v, S0)
        return merge_chunks(o, T), S
    g = split_chunks(g, chunk_size)  # [B, H, N, C] or [B, H, N, C, K]
    g_channels = g.unsqueeze(-1) if g.ndim == 4 else g  # [B, H, N, C, K|1]

    # Step 1: decays inside each chunk, each exponent a direct sum of the gates it spans: from the chunk start to
    # t (inclusive), from s to the chunk end, across the whole chunk.
    decay_in, decay_out, decay_total = chunk_decays(g_channels)  # [B, H, N, C, K|1] x2, [B, H, N, K|1]

    # Step 2: intra-chunk scores A_ts = sum_k q_tk k_sk L_tsk (s <= t), then their outputs.
    A = decayed_scores(q, k, g)  # [B, H, N, C, C]
    o = A @ v  # [B, H, N, C, V]

    # Step 3: what each chunk adds to the state, decayed to the chunk end.
    U = torch.einsum("bhnck,bhncv->bhnkv", k * decay_out, v)  # [B, H, N, K, V]

    # Step 4: inter-chunk pass, one step per chunk: S_{n+1} = e^{b_total} ⊙ S_n + U_n.
    # unbind, not U[:, :, n]: the backward of indexing would zero-fill all of U once per chunk (O(N^2)).
    entering = []
    S = S0
    for decay_n, U_n in zip(decay_total.unsqueeze(-1).unbind(dim=2), U.unbind(dim=2), strict=True):
        entering.append(S)
        S = decay_n * S + U_n
    S_in = torch.stack(entering, dim=2)  # [B, H, N, K, V], state entering each chunk

    # Step 5: outputs from the state entering the chunk.
    o = o + torch.einsum("bhnck,bhnkv->bhncv", q * decay_in, S_in)
    return merge_chunks(o, T), S


def _ungated(q, k, v, S0):
    """Linear attention (gamma = 1): causal scores in-chunk, states by a prefix sum over chunks."""
    C = q.shape[3]
    causal = torch.ones(C, C, dtype=torch.bool, device=q.device).tril()
    A = (q @ k.transpose(-1, -2)).masked_fill(~causal, 0.0)  # [B, H, N, C, C]
    U = k.transpose(-1, -2) @ v  # [B, H, N, K, V]
    S_after = S0.unsqueeze(2) + U.cumsum(dim=2)  # [B, H, N, K, V], state after each chunk
    S_in = torch.cat([S0.unsqueeze(2), S_after[:, :, :-1]], dim=2)  # [B, H, N, K, V], state entering each chunk
    o = A @ v + q @ S_in  # [B, H, N, C, V]
    return o, S_after[:, :, -1]
