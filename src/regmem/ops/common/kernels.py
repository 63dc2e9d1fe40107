"""Elementwise similarity kernels kappa(x, y) = f(x.y) of *Understanding Transformer from the Perspective of
Associative Memory* (Zhong, Xu, Ao, Shi; arXiv:2505.19488): applied to a matrix of (scaled) dot products, they
give the write/erase similarity kappa_1 and the read similarity kappa_2 of DeltaFormer (Sec. 2.2, eqs. 41-42) and
the kernels whose retrieval signal-to-noise Sec. 2.1 compares (eqs. 7, 13, 15, 17).

    linear   f(s) = s                                   (eq. 7: linear attention)
    relu     f(s) = max(0, s)                           (eq. 15: the ReLU FFN)
    exp      f(s) = exp(s)                              (eq. 13: un-normalised softmax attention)
    solu     f(s) = s exp(s)                            (eq. 16: SoLU)
    round    f(s) = round(s, decimals)                  (Theorem 1's snapping kernel, App. E; Fig. 4 rounds to two
                                                         decimals), with a straight-through gradient
    softmax  exp(s) normalised over the positions a mask allows (eq. 2); not elementwise, so it takes the mask

`decimals` (round only) counts decimal places: 0 is integer rounding, 2 rounds 1.236 to 1.24.

Shapes: any; `score_kernel(name, s, mask)` keeps the shape of s, mask broadcasts against it (True = allowed).
"""

from __future__ import annotations

from typing import Literal, get_args

import torch

ScoreKernel = Literal["linear", "relu", "exp", "solu", "round", "softmax"]
SCORE_KERNELS = get_args(ScoreKernel)


class _RoundSTE(torch.autograd.Function):
    """round(x, decimals) forward, identity backward (the straight-through estimator)."""

    @staticmethod
    def forward(ctx, x, decimals):
        return torch.round(x, decimals=decimals)

    @staticmethod
    def backward(ctx, grad):
        return grad, None


def round_ste(x: torch.Tensor, decimals: int = 0) -> torch.Tensor:
    """Rounds x to `decimals` places; the gradient passes straight through (d round(x) / dx := 1)."""
    return _RoundSTE.apply(x, decimals)


def check_score_kernel(argument: str, name: ScoreKernel, decimals: int = 0) -> None:
    """Raises ValueError naming `argument` unless `name` is one of SCORE_KERNELS and `decimals` a non-negative int."""
    if name not in SCORE_KERNELS:
        raise ValueError(f"{argument} must be one of {SCORE_KERNELS}, got {name!r}")
    if not isinstance(decimals, int) or isinstance(decimals, bool) or decimals < 0:
        raise ValueError(f"decimals must be a non-negative int, got {decimals!r}")


def score_kernel(name: ScoreKernel, scores: torch.Tensor, mask: torch.Tensor | None = None, *,
                 decimals: int = 0) -> torch.Tensor:
    """kappa applied to `scores` [..., Tq, Tk] (already scaled dot products); entries where `mask` is False are 0.

    "softmax" normalises each row over its allowed entries; a row with none is all zero (not NaN)."""
    if name == "softmax":
        if mask is None:
            return torch.softmax(scores, dim=-1)
        logits = scores.masked_fill(~mask, float("-inf"))
        empty = ~mask.any(dim=-1, keepdim=True)
        return torch.softmax(logits.masked_fill(empty, 0.0), dim=-1).masked_fill(~mask, 0.0)
    if name == "linear":
        out = scores
    elif name == "relu":
        out = torch.relu(scores)
    elif name == "exp":
        out = torch.exp(scores if mask is None else scores.masked_fill(~mask, 0.0))
    elif name == "solu":
        out = scores * torch.exp(scores if mask is None else scores.masked_fill(~mask, 0.0))
    elif name == "round":
        out = round_ste(scores, decimals)
    else:
        raise ValueError(f"kernel must be one of {SCORE_KERNELS}, got {name!r}")
    return out if mask is None else out.masked_fill(~mask, 0.0)
