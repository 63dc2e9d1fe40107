"""Factorisations shared by the forms that solve linear systems."""

from __future__ import annotations

import torch


def cholesky_or_nan(A: torch.Tensor) -> torch.Tensor:
    """The lower Cholesky factor of symmetric matrices A: [..., n, n], with NaN from the row where a factorisation
    fails (a NaN entry, or a matrix not positive definite) to the last row.

    A NaN input must give a NaN output in every form of an op (the op contract). torch.linalg.cholesky raises
    instead, after reading LAPACK's status on the host (a device sync on a GPU), where the forms that solve by LU
    return NaN; torch.linalg.cholesky_ex stops at the failing column and leaves the rows below as it found them,
    possibly finite, so a solve with that factor could turn a NaN into a number. Here the status stays on the
    device and every row from the failing one is NaN: a solve gives NaN wherever it reads a failed row, while the
    leading rows, the factor of the leading block (which did factorise), stay exact."""
    L, info = torch.linalg.cholesky_ex(A)  # info: [...], 0 or the 1-based order of the failing leading minor
    rows = torch.arange(1, A.shape[-1] + 1, device=A.device)  # [n], 1-based
    failed = (info.unsqueeze(-1) > 0) & (rows >= info.unsqueeze(-1))  # [..., n]
    return L.masked_fill(failed.unsqueeze(-1), float("nan"))
