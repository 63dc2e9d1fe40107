"""Decayed intra-chunk scores, shared by every chunk form with log gates (linear attention, delta rules).

A_ts = sum_k q_tk k_sk exp(sum_{s<j<=t} g_jk) for s <= t and 0 above the diagonal, over chunks:
q: [..., B, H, N, C, K]; k: [B, H, N, C, K]; g: [B, H, N, C] (scalar) or [B, H, N, C, K] (diagonal). Leading
dims of q share one decay construction: a caller needing scores of several queries against the same keys
(the delta rule: keys and queries) stacks them and pays for the decay tensors once. No exponent is positive.
"""

from __future__ import annotations

import functools

import torch
import torch.nn.functional as F

from regmem.ops.common.decay import segsum


def decayed_scores(q: torch.Tensor, k: torch.Tensor, g: torch.Tensor) -> torch.Tensor:
    """[..., B, H, N, C, K] x [B, H, N, C, K] with a scalar or diagonal log gate -> A: [..., B, H, N, C, C]."""
    return scalar_decayed_scores(q, k, g) if g.ndim == 4 else diagonal_decayed_scores(q, k, g)


def scalar_decayed_scores(q, k, g):
    """Scalar gate g: [B, H, N, C]: A_ts = q_t.k_s exp(sum_{s<j<=t} g_j)."""
    L = torch.exp(segsum(g))  # [B, H, N, C, C], zero above the diagonal
    return (q @ k.transpose(-1, -2)) * L


def diagonal_decayed_scores(q, k, g):
    """Diagonal gate g: [B, H, N, C, K]: A_ts = sum_k q_tk k_sk exp(sum_{s<j<=t} g_jk), by halving the chunk.

    The chunk (padded to a power of two P) is a binary tree of blocks. A pair s < t belongs to exactly one block
    whose left half holds s and right half holds t; its decay factors through the boundary m between the halves,
        exp(sum_{s<j<=t} g_j) = exp(sum_{m<=j<=t} g_j) * exp(sum_{s<j<m} g_j),
    a prefix sum inside the right half and a suffix sum inside the left half, both <= 0. So the block's scores are
    one matmul (q_right ⊙ e^{prefix}) (k_left ⊙ e^{suffix})^T, and each level of the tree scales q and k once: the
    work is log2(P) elementwise passes over q and k plus the [C, C] matmul's flops. GLA's secondary chunking (explicit
    [c, c, K] decays inside sub-chunks of 8, arXiv:2312.06635 Sec. 4) materialises 8 K floats per token and query
    and ran 4-6x slower on CPU. Every sum is a direct sum of the gates it spans, built level by level from block
    totals. The backward is written out (`_DiagonalScores`)."""
    return _DiagonalScores.apply(q, k, g)


@functools.lru_cache(maxsize=64)
def _score_layout(C: int, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """Where each score lives. The forward concatenates [diagonal (P), level-1 blocks (P/2 x 1 x 1), level-2 blocks
    (P/4 x 2 x 2), ..., one zero] into a source row of P + P (P - 1) / 2 + 1 entries. `gather` [C * C] picks A's
    entries from it row-major (the zero above the diagonal and for padding); `scatter` [P + P (P - 1) / 2] gives each
    source entry its place in the padded, flattened [P, P], so the backward gathers dA the other way."""
    P = _padded(C)
    place = [[-1] * P for _ in range(P)]  # plain lists: no data-dependent tensor ops for torch.compile to trace
    for t in range(P):
        place[t][t] = t
    offset, h = P, 1
    while h < P:
        for b in range(P // (2 * h)):
            for i in range(h):
                for j in range(h):
                    place[2 * b * h + h + i][2 * b * h + j] = offset + (b * h + i) * h + j
        offset, h = offset + (P // (2 * h)) * h * h, 2 * h
    scatter = [0] * offset
    for t in range(P):
        for s in range(P):
            if place[t][s] >= 0:
                scatter[place[t][s]] = t * P + s
    gather = [place[t][s] if place[t][s] >= 0 else offset for t in range(C) for s in range(C)]
    return (torch.tensor(gather, dtype=torch.long, device=device),
            torch.tensor(scatter, dtype=torch.long, device=device))


def _padded(C: int) -> int:
    return 1 << max(C - 1, 0).bit_length()


class _DiagonalScores(torch.autograd.Function):
    """Forward: the halving tree above. Backward: per level, dq_right = (dA_block k_left) ⊙ e^{prefix} and
    dk_left = (dA_block^T q_right) ⊙ e^{suffix}; the gate's gradient then follows from A depending on g only
    through b_t - b_s (b the in-chunk cumulative gate): db_t = q_t ⊙ dq_t - k_t ⊙ dk_t, dg_j = sum_{t >= j} db_t."""

    @staticmethod
    def forward(ctx, q, k, g):
        C = k.shape[-2]
        P = _padded(C)
        if P != C:
            q, k, g = (F.pad(x, (0, 0, 0, P - C)) for x in (q, k, g))
        parts = [(q * k).sum(dim=-1)]  # [..., P], A_tt
        prefix = g.clone()  # inclusive sum from the start of each aligned block of size h
        suffix = torch.zeros_like(g)  # exclusive sum to the end of each aligned block of size h
        totals = g  # [B, H, N, P / h, K], each block's sum
        decays = []
        h = 1
        while h < P:
            nb = P // (2 * h)
            pre, suf = prefix.unflatten(-2, (nb, 2, h)), suffix.unflatten(-2, (nb, 2, h))  # [.., nb, 2, h, K]
            e_right, e_left = torch.exp(pre[..., 1, :, :]), torch.exp(suf[..., 0, :, :])  # [B, H, N, nb, h, K]
            q_right = q.unflatten(-2, (nb, 2, h))[..., 1, :, :] * e_right  # [..., nb, h, K]
            k_left = k.unflatten(-2, (nb, 2, h))[..., 0, :, :] * e_left
            parts.append((q_right @ k_left.transpose(-1, -2)).flatten(-3))  # [..., nb * h * h]
            decays += [e_right, e_left, q_right, k_left]
            if 2 * h < P:  # the sums for blocks of 2h: the right half adds the left's total, and vice versa
                tot = totals.unflatten(-2, (nb, 2))  # [B, H, N, nb, 2, K]
                pre[..., 1, :, :] += tot[..., 0:1, :]
                suf[..., 0, :, :] += tot[..., 1:2, :]
                totals = tot.sum(dim=-2)
            h *= 2
        lead = parts[0].shape[:-1]  # q's and k's leading dims broadcast
        parts = [p.expand(*lead, p.shape[-1]) for p in parts]
        source = torch.cat([*parts, parts[0].new_zeros(*lead, 1)], dim=-1)
        gather, _ = _score_layout(C, source.device)
        ctx.save_for_backward(q, k, *decays)
        ctx.shapes = (C, k.shape, g.shape)
        return source.index_select(-1, gather).unflatten(-1, (C, C))

    @staticmethod
    def backward(ctx, dA):
        q, k, *decays = ctx.saved_tensors
        C, k_shape, g_shape = ctx.shapes
        P = q.shape[-2]
        _, scatter = _score_layout(C, dA.device)
        dA = F.pad(dA, (0, P - C, 0, P - C)) if P != C else dA
        d_source = dA.flatten(-2).index_select(-1, scatter)  # [..., P + sum of level sizes]
        d_diag, d_source = d_source.split([P, d_source.shape[-1] - P], dim=-1)
        dq = d_diag.unsqueeze(-1) * k  # [..., P, K], in the broadcast shape (accumulated into below)
        dk = d_diag.unsqueeze(-1) * q
        h, offset = 1, 0
        for e_right, e_left, q_right, k_left in zip(*(decays[i::4] for i in range(4)), strict=True):
            nb = P // (2 * h)
            dX = d_source[..., offset:offset + nb * h * h].unflatten(-1, (nb, h, h))
            dq.unflatten(-2, (nb, 2, h))[..., 1, :, :].addcmul_(dX @ k_left, e_right)
            dk.unflatten(-2, (nb, 2, h))[..., 0, :, :].addcmul_(dX.transpose(-1, -2) @ q_right, e_left)
            offset, h = offset + nb * h * h, 2 * h
        db = (q * dq - k * dk).sum_to_size(g_shape)  # [B, H, N, P, K]
        # dg_j = sum_{t >= j} db_t = -sum_{t < j} db_t (the db_t sum to 0); dg_0 = 0: no in-chunk decay holds g_0
        dg = torch.cat([torch.zeros_like(db[..., :1, :]), db[..., :-1, :].cumsum(-2).neg_()], dim=-2)
        return dq.sum_to_size(q.shape)[..., :C, :], dk.sum_to_size(k_shape)[..., :C, :], dg[..., :C, :]
