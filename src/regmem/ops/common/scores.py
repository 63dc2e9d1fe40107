"""Decayed intra-chunk scores, shared by every chunk form with log gates (linear attention, delta rules).

A_ts = sum_k q_tk k_sk exp(sum_{s<j<=t} g_jk) for s <= t and 0 above the diagonal, over chunks:
q: [..., B, H, N, C, K]; k: [B, H, N, C, K]; g: [B, H, N, C] (scalar) or [B, H, N, C, K] (diagonal). Leading
dims of q share one decay construction: a caller needing scores of several queries against the same keys
(the delta rule: keys and queries) stacks them and pays for the decay tensors once. No exponent is positive.
"""

from __future__ import annotations

import torch
from einops import rearrange

from regmem.ops.common.decay import segsum, suffix_exclusive

SUB_CHUNK = 8  # secondary chunk for diagonal gates: bounds the explicit [c, c, K] decay tensor


def decayed_scores(q: torch.Tensor, k: torch.Tensor, g: torch.Tensor) -> torch.Tensor:
    """[..., B, H, N, C, K] x [B, H, N, C, K] with a scalar or diagonal log gate -> A: [..., B, H, N, C, C]."""
    return scalar_decayed_scores(q, k, g) if g.ndim == 4 else diagonal_decayed_scores(q, k, g)


def scalar_decayed_scores(q, k, g):
    """Scalar gate g: [B, H, N, C]: A_ts = q_t.k_s exp(sum_{s<j<=t} g_j)."""
    L = torch.exp(segsum(g))  # [B, H, N, C, C], zero above the diagonal
    return (q @ k.transpose(-1, -2)) * L


def diagonal_decayed_scores(q, k, g):
    """Diagonal gate g: [B, H, N, C, K]: A_ts = sum_k q_tk k_sk exp(sum_{s<j<=t} g_jk), via sub-chunks."""
    C = k.shape[3]
    c = min(SUB_CHUNK, C)
    qs, ks, gs = (rearrange(x, "... (i c) k -> ... i c k", c=c) for x in (q, k, g))  # [(..), B, H, N, I, c, K]
    I = ks.shape[3]

    # Pairs inside one sub-chunk: the explicit per-channel decay tensor, channel-last. Within c <= 8 steps the
    # difference of two in-block cumsums keeps float32 accuracy (|sum| <= 8 max|g|), unlike a chunk-long cumsum.
    a = gs.cumsum(dim=4)  # [B, H, N, I, c, K], from the sub-chunk start to t (inclusive)
    causal = torch.ones(c, c, dtype=torch.bool, device=q.device).tril().unsqueeze(-1)  # [c(t), c(s), 1]
    log_L = (a.unsqueeze(-2) - a.unsqueeze(-3)).masked_fill(~causal, float("-inf"))  # [B, H, N, I, c, c, K]
    W = torch.exp(log_L) * ks.unsqueeze(-3)  # [B, H, N, I, c(t), c(s), K], W_ts = L_ts ⊙ k_s
    A_diag = (W * qs.unsqueeze(-2)).sum(dim=-1)  # [(..), B, H, N, I, c(t), c(s)], A_ts = W_ts . q_t

    # Pairs in sub-chunks j < i: decay t <- start of i, start of i <- end of j, end of j <- s.
    q_in = qs * torch.exp(a)  # [(..), B, H, N, I, c, K]
    k_out = ks * torch.exp(suffix_exclusive(gs, dim=4))  # [B, H, N, I, c, K]
    log_through = segsum(rearrange(gs.sum(dim=4), "b h n i k -> b h n k i"))  # [B, H, N, K, I, I]
    # sum_{m=j+1}^{i-1} of sub-chunk totals = log_through[i - 1, j]; row i = 0 has no earlier sub-chunk
    no_earlier = torch.full_like(log_through[..., :1, :], float("-inf"))  # [B, H, N, K, 1, I]
    log_between = torch.cat([no_earlier, log_through[..., :-1, :]], dim=-2)  # [B, H, N, K, I(i), I(j)]
    between = rearrange(torch.exp(log_between), "... k i j -> ... j i 1 k")  # [B, H, N, I(j), I(i), 1, K], 0 if j >= i
    # Sub-chunk j's keys against every query decayed to j's end: one [(I c), K] x [K, c] matmul per j, laid out
    # j-major so the batch of matmuls is contiguous (an einsum over these dims ran per-slice copies on CPU).
    q_through = rearrange(q_in.unsqueeze(-4) * between, "... j i t k -> ... j (i t) k")  # [(..), B, H, N, I, I c, K]
    A_off = rearrange(q_through @ k_out.transpose(-1, -2), "... j (i t) s -> ... i t j s", i=I)  # [.., I, c, I, c]

    # The diagonal blocks (i = j, where A_off is 0) take the in-sub-chunk scores.
    A = torch.diagonal_scatter(A_off, rearrange(A_diag, "... i t s -> ... t s i"), dim1=-4, dim2=-2)
    return rearrange(A, "... i t j s -> ... (i t) (j s)")  # [(..), B, H, N, C, C]
