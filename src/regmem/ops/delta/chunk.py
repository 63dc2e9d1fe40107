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
the gates they span; sub-chunks of 8 with explicit per-channel decays for a diagonal gate), so g = -20 per step
and g = 0 are both exact.

Legend: B batch, T time, H heads, K key dim, V value dim, N chunks, C chunk size.
"""

from __future__ import annotations

import torch

from regmem.ops.common import decayed_scores, merge_chunks, split_chunks, suffix_exclusive


def delta_chunk_core(q, k, v, g, beta, *, initial_state, chunk_size):
    """q, k: [B, T, H, K] (q already scaled); v: [B, T, H, V]; g: None, [B, T, H] or [B, T, H, K];
    beta: [B, T, H]; initial_state: [B, H, K, V] or None. Returns o: [B, T, H, V] and S_T: [B, H, K, V]."""
    B, T, H, K = q.shape
    V = v.shape[-1]
    S0 = initial_state if initial_state is not None else q.new_zeros(B, H, K, V)
    if T == 0:
        return v.new_zeros(B, 0, H, V), S0
    # Step 0: pad T to N * C with neutral tokens (k = v = 0, beta = 0, g = 0) and split into chunks.
    q, k, v = (split_chunks(x, chunk_size) for x in (q, k, v))  # [B, H, N, C, K|V]
    beta = split_chunks(beta, chunk_size).unsqueeze(-1)  # [B, H, N, C, 1]
    g = split_chunks(g, chunk_size) if g is not None else None  # [B, H, N, C] or [B, H, N, C, K]

    # Step 1: log-decays inside each chunk, each a direct sum of the gates it spans.
    k_in, q_in, k_out, decay = _decayed_keys(q, k, g)  # [B, H, N, C, K] x3, [B, H, N, K|1, 1]

    # Step 2: decayed scores within the chunk: key-key (strictly lower, the UT system) and query-key (s <= t).
    strictly_lower = torch.ones(chunk_size, chunk_size, dtype=torch.bool, device=q.device).tril(-1)
    KK, P = _scores(torch.stack([k, q]), k, g).unbind(0)  # [B, H, N, C, C] each, one decay construction
    A = (beta * KK).masked_fill(~strictly_lower, 0.0)  # [B, H, N, C, C]

    # Step 3: UT transform, one unit-lower-triangular solve per chunk for both WY factors at once.
    rhs = torch.cat([beta * k_in, beta * v], dim=-1)  # [B, H, N, C, K + V]
    WU = torch.linalg.solve_triangular(A, rhs, upper=False, unitriangular=True)  # [B, H, N, C, K + V]
    W, U_prime = WU.split([K, V], dim=-1)  # [B, H, N, C, K], [B, H, N, C, V]

    # Step 4: inter-chunk pass: pseudo-values from the entering state, then the state after the chunk.
    # unbind, not W[:, :, n]: the backward of indexing would zero-fill all of W once per chunk (O(N^2)).
    entering, pseudo_values = [], []
    S = S0
    for W_n, U_n, k_n, decay_n in zip(W.unbind(2), U_prime.unbind(2), k_out.unbind(2), decay.unbind(2),
                                      strict=True):
        entering.append(S)
        U_n = U_n - W_n @ S  # [B, H, C, V], u_t = beta_t (v_t - (e^{g_t} ⊙ S_{t-1})^T k_t)
        pseudo_values.append(U_n)
        S = decay_n * S + k_n.transpose(-1, -2) @ U_n  # [B, H, K, V]
    S_in = torch.stack(entering, dim=2)  # [B, H, N, K, V], state entering each chunk
    U = torch.stack(pseudo_values, dim=2)  # [B, H, N, C, V]

    # Step 5: outputs, from the entering state and from the chunk's own pseudo-values.
    o = q_in @ S_in + P @ U  # [B, H, N, C, V]
    return merge_chunks(o, T), S


def _decayed_keys(q, k, g):
    """k ⊙ e^{b_t}, q ⊙ e^{b_t}, k ⊙ e^{b_C - b_s} and the whole-chunk decay e^{b_C} ([B, H, N, K|1, 1])."""
    if g is None:
        return k, q, k, q.new_ones(*q.shape[:3], 1, 1)
    g_channels = g.unsqueeze(-1) if g.ndim == 4 else g  # [B, H, N, C, K|1]
    b_in = g_channels.cumsum(dim=3)  # [B, H, N, C, K|1], from the chunk start to t (inclusive)
    b_out = suffix_exclusive(g_channels, dim=3)  # [B, H, N, C, K|1], from s (exclusive) to the chunk end
    b_total = g_channels.sum(dim=3)  # [B, H, N, K|1], across the whole chunk
    return k * torch.exp(b_in), q * torch.exp(b_in), k * torch.exp(b_out), torch.exp(b_total).unsqueeze(-1)


def _scores(x, y, g):
    """x: [..., B, H, N, C, K], y: [B, H, N, C, K] -> [..., B, H, N, C, C],
    sum_k x_tk y_sk exp(sum_{s<j<=t} g_jk) for s <= t, else 0."""
    if g is None:
        C = y.shape[3]
        causal = torch.ones(C, C, dtype=torch.bool, device=x.device).tril()
        return (x @ y.transpose(-1, -2)).masked_fill(~causal, 0.0)
    return decayed_scores(x, y, g)
