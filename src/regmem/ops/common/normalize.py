"""The normalised read-out shared by every op that divides by a denominator memory.

Normalised linear attention (Katharopoulos et al. 2020, arXiv:2006.16236, eq. 6), normalised second-order HLA
(arXiv:2510.27258, eq. 3.4) and normalised AHLA (Theorem 6.1) all read out num_t / den_t where den_t is the
numerator's read-out for a value column of ones: the denominator's memory (z, m, h, n) is exactly the numerator's
memory of that column. So an op runs its unchanged core on v' = [v, 1] with each value-carrying state field
extended by its denominator field as one more column, splits the last column off as den, and divides.

The division is sign-safe: num / (den + eps * sign(den)) with sign(0) := +1, so a negative denominator moves away
from zero (den - eps), never through it; eps = 0 is the plain division.
"""

from __future__ import annotations

import torch


def append_ones(v: torch.Tensor) -> torch.Tensor:
    """v: [..., V] -> [v, 1]: [..., V + 1]."""
    return torch.cat([v, torch.ones_like(v[..., :1])], dim=-1)


def append_column(x: torch.Tensor, column: torch.Tensor) -> torch.Tensor:
    """x: [..., V] and column: [...] -> [..., V + 1], the state field of v' = [v, 1]."""
    return torch.cat([x, column.unsqueeze(-1)], dim=-1)


def split_column(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """[..., V + 1] -> ([..., V], [...]): the value part and the ones column."""
    return x[..., :-1], x[..., -1]


def sign_safe_divide(num: torch.Tensor, den: torch.Tensor, eps: float) -> torch.Tensor:
    """num / (den + eps * sign(den)) with sign(0) := +1: a negative den is pushed away from zero, not through it."""
    return num / torch.where(den >= 0, den + eps, den - eps)


def divide_by_ones_column(o: torch.Tensor, eps: float) -> torch.Tensor:
    """o: [..., V + 1], the read-out of [v, 1] -> num / den: [..., V], sign-safe."""
    num, den = o[..., :-1], o[..., -1:]
    return sign_safe_divide(num, den, eps)
