"""Chunk-parallel form of the (gated) delta rule: the WY/UT representation within chunks, the state carried
across chunks.

Implements eq. (29)/(41) of *Test-time regression* (Wang, Shi, Fox; arXiv:2501.12352) by the chunkwise
algorithm of Yang et al. 2024 (*Parallelizing linear transformers with the delta rule over sequence length*,
arXiv:2406.06484, Sec. 3: WY representation of products of Householder matrices, chunkwise form) and its gated
version (Yang, Kautz, Hatamizadeh 2024, *Gated Delta Networks*, arXiv:2412.06464, Sec. 3). See DERIVATION.md.

With S_n the state entering chunk n, b_t = sum_{j<=t} g_j the log-decay from the chunk start (per key channel
for a diagonal gate) and u_t = beta_t (v_t - (e^{g_t} ⊙ S_{t-1})^T k_t) the pseudo-values,
    S_t = e^{b_t} ⊙ S_n + sum_{s<=t} (e^{b_t - b_s} ⊙ k_s) u_s^T,
so the pseudo-values of a chunk solve one unit-lower-triangular system (the UT transform)
    (I + A) U = diag(beta) V - diag(beta) (K ⊙ e^{b}) S_n,     A_ts = beta_t k_t^T (e^{b_t - b_s} ⊙ k_s), s < t,
i.e. U = U' - W S_n with the WY factors U' = (I + A)^{-1} diag(beta) V and W = (I + A)^{-1} diag(beta) (K ⊙ e^b).
Then  o_t = (q_t ⊙ e^{b_t})^T S_n + sum_{s<=t} q_t^T (e^{b_t - b_s} ⊙ k_s) u_s  and
      S_{n+1} = e^{b_C} ⊙ S_n + sum_s (k_s ⊙ e^{b_C - b_s}) u_s^T.
No exponent is ever positive: the decayed scores come from the gated-linear-attention kernels (direct sums of
the gates they span; a halving tree of blocks for a diagonal gate, ops/common/scores.py), so g = -20 per step
and g = 0 are both exact.

Legend: B batch, T time, H heads, K key dim, V value dim, N chunks, C chunk size.
"""

from __future__ import annotations

import torch
from einops import rearrange

from regmem.ops.common import chunk_decays, decayed_scores, fit_chunk, pad_time, segsum
from regmem.ops.delta.wy import chunk_state_scan, unit_lower_inverse


def delta_chunk_core(q, k, v, g, beta, *, initial_state, chunk_size):
    """q, k: [B, T, H, K] (q already scaled); v: [B, T, H, V]; g: None, [B, T, H] or [B, T, H, K];
    beta: [B, T, H]; initial_state: [B, H, K, V] or None. Returns o: [B, T, H, V] and S_T: [B, H, K, V]."""
    B, T, H, K = q.shape
    chunk_size = fit_chunk(chunk_size, T)  # a sequence shorter than a chunk: padded to its own length only
    V = v.shape[-1]
    S0 = initial_state if initial_state is not None else q.new_zeros(B, H, K, V)
    if T == 0:
        return v.new_zeros(B, 0, H, V), S0
    # Step 0: pad T to N * C with neutral tokens (k = v = 0, beta = 0, g = 0) and split into chunks, chunk-major
    # with batch and heads as one row dim R = B * H, so that each chunk of the state pass is one contiguous slice.
    q, k, v = (_chunk_major(x, chunk_size) for x in (q, k, v))  # [N, R, C, K|V]
    beta = _chunk_major(beta, chunk_size).unsqueeze(-1)  # [N, R, C, 1]
    g = _chunk_major(g, chunk_size) if g is not None else None  # [N, R, C] or [N, R, C, K]

    # Step 1: log-decays inside each chunk, each a direct sum of the gates it spans.
    beta_k_in, q_in, k_out, decay = _decayed_keys(q, k, g, beta)  # [N, R, C, K] x3, [N, R, K|1, 1]

    # Step 2: decayed scores within the chunk: key-key (strictly lower, the UT system) and query-key (s <= t).
    KK, P = _scores(q, k, g)  # [N, R, C, C] each

    # Step 3: UT transform: the WY factors W = (I + A)^{-1} diag(beta) (K ⊙ e^b), U' = (I + A)^{-1} diag(beta) V.
    inverse = unit_lower_inverse(beta * KK)  # [N, R, C, C]; reads (and differentiates) only the strict lower part
    W, U_prime = inverse @ beta_k_in, inverse @ (beta * v)  # [N, R, C, K], [N, R, C, V]

    # Step 4: inter-chunk pass: pseudo-values U = U' - W S_n from the entering state, then the state after the
    # chunk (wy.py: one loop each way, two fused matmuls per chunk).
    S_in, U, S = chunk_state_scan(W, U_prime, k_out, decay, S0.flatten(0, 1))  # [N, R, K, V], [N, R, C, V]

    # Step 5: outputs, from the entering state and from the chunk's own pseudo-values.
    o = torch.baddbmm((q_in @ S_in).flatten(0, 1), P.flatten(0, 1), U.flatten(0, 1)).unflatten(0, (-1, B * H))
    o = rearrange(o, "n (b h) c v -> b (n c) h v", b=B)[:, :T]  # [B, T, H, V]
    return o, S.unflatten(0, (B, H))


def _chunk_major(x, chunk_size):
    """[B, T, H, ...] -> [N, B * H, C, ...], T padded to N * C."""
    return rearrange(pad_time(x, chunk_size), "b (n c) h ... -> n (b h) c ...", c=chunk_size)


def _decayed_keys(q, k, g, beta):
    """beta_t k_t ⊙ e^{b_t}, q ⊙ e^{b_t}, k ⊙ e^{b_C - b_s} and the whole-chunk decay e^{b_C} ([N, R, K|1, 1])."""
    if g is None:
        return beta * k, q, k, q.new_ones(*q.shape[:2], 1, 1)
    g_channels = g.unsqueeze(-1) if g.ndim == 3 else g  # [N, R, C, K|1]
    # from the chunk start to t (inclusive), from s (exclusive) to the chunk end, across the whole chunk
    decay_in, decay_out, decay_total = chunk_decays(g_channels)  # [N, R, C, K|1] x2, [N, R, K|1]
    return k * (beta * decay_in), q * decay_in, k * decay_out, decay_total.unsqueeze(-1)


def _scores(q, k, g):
    """q, k: [N, R, C, K] -> the key-key and query-key scores [N, R, C, C] each,
    sum_k x_tk k_sk exp(sum_{s<j<=t} g_jk) for s <= t, else 0."""
    if g is None or g.ndim == 3:  # no gate or a scalar one: one decay matrix serves both products
        C = k.shape[2]
        causal = torch.ones(C, C, dtype=torch.bool, device=k.device).tril()
        L = causal if g is None else torch.exp(segsum(g))  # [C, C] or [N, R, C, C], zero above the diagonal
        return (k @ k.transpose(-1, -2)) * L, (q @ k.transpose(-1, -2)) * L
    # a diagonal gate: the per-channel decays are built once for both products (N, R play heads and chunks)
    both = decayed_scores(torch.stack([k, q]).unsqueeze(1), k.unsqueeze(0), g.unsqueeze(0))  # [2, 1, N, R, C, C]
    return both.squeeze(1).unbind(0)
