"""The two similarities of DeltaFormer, eqs. (41)-(42) and (111) of arXiv:2505.19488, shared by the three forms.

Erase (kappa_1): row t of A holds A[t, i] = sum_j a_j kappa_1(scale * w_t^j . k_i) over the earlier pairs i < t
that take part, with G erase vectors w_t^1..w_t^G per head mixed by the weights a_j (the GQA erase kernel of eq.
111; G = 1 and a = 1 is eq. 41). "softmax" normalises each w_t^j's row over those pairs (Z^(1)_t of eq. 94), so
the normalisation of a block of rows is exact when the block's keys are all the pairs the rows can see.

Read (kappa_2): o_t = sum_{i <= t} kappa_2(scale * q_t . k_i) u_i over the pairs that take part plus the query's own
pair, which every query sees (so no softmax row is empty; eq. 42, Z^(2)_t of eq. 95).

Shapes: w: [B, H, G, R, K] (R rows), k: [B, H, L, K] (L pairs), allowed: [B or 1, R, L] bool -> A: [B, H, R, L].
"""

from __future__ import annotations

import torch

from regmem.ops.common import score_kernel
from regmem.ops.nonparametric.similarity import allowed_pairs


def erase_allowed(first_row: int, rows: int, pairs: int, key_mask: torch.Tensor | None, device) -> torch.Tensor:
    """[B or 1, rows, pairs] bool: absolute row first_row + r may erase against pair i iff i < first_row + r and
    key_mask[i] (True = the pair takes part; None = all)."""
    row = torch.arange(first_row, first_row + rows, device=device).unsqueeze(-1)  # [R, 1]
    pair = torch.arange(pairs, device=device)  # [L]
    allowed = (pair < row).unsqueeze(0)  # [1, R, L]
    if key_mask is not None:
        allowed = allowed & key_mask[:, None, :pairs]  # [B, R, L]
    return allowed


def read_allowed(first_row: int, rows: int, pairs: int, key_mask: torch.Tensor | None, device) -> torch.Tensor:
    """[B or 1, rows, pairs] bool: row first_row + r reads pair i iff i <= first_row + r and key_mask[i], and always
    its own pair: the nonparametric memories' `allowed_pairs`, with its head axis dropped."""
    allowed = allowed_pairs(rows, pairs, first_row, key_mask, device=device)  # [R, L] or [B, 1, R, L]
    return allowed.unsqueeze(0) if key_mask is None else allowed.squeeze(1)


def erase_matrix(w, k, allowed, *, weights, kernel, scale, decimals):
    """A [B, H, R, L] = sum_j weights[h, j] kappa_1(scale w^j . k) on the allowed entries, 0 elsewhere.

    w: [B, H, G, R, K]; k: [B, H, L, K]; allowed: [B or 1, R, L]; weights: [H, G]."""
    scores = torch.einsum("bhgrk,bhlk->bhgrl", w, k) * scale  # [B, H, G, R, L]
    mask = allowed[:, None, None]  # [B or 1, 1, 1, R, L]
    kappa = score_kernel(kernel, scores, mask, decimals=decimals)  # [B, H, G, R, L]
    return torch.einsum("bhgrl,hg->bhrl", kappa, weights)  # [B, H, R, L]


def read_matrix(q, k, allowed, *, kernel, scale, decimals):
    """kappa_2(scale q . k) on the allowed entries, 0 elsewhere: q: [B, Hq, R, K]; k: [B, Hq, L, K] (already
    repeated to the query heads); allowed: [B or 1, R, L] -> [B, Hq, R, L]."""
    scores = torch.einsum("bhrk,bhlk->bhrl", q, k) * scale  # [B, Hq, R, L]
    return score_kernel(kernel, scores, allowed[:, None], decimals=decimals)
