"""Stability of DeltaFormer's two passes, Sec. 3.2 eqs. (50)-(52) of *Understanding Transformer from the
Perspective of Associative Memory* (Zhong, Xu, Ao, Shi; arXiv:2505.19488).

A DeltaFormer layer computes its processed values by a linear solve and reads them by a matrix product (eq. 50):

    U = A_1^{-1} V      A_1 = I + beta * strict_lower(kappa_1(W K^T / sqrt(D)))    (the value pass, eqs. 96-97)
    O = A_2 U           A_2 = causal(kappa_2(Q K^T / sqrt(D)))                      (the read, eq. 40)

and the paper compares how a perturbation of each matrix moves the result:

    ||(A_1 + dA)^{-1} V - A_1^{-1} V||  ~  ||A_1^{-1} dA A_1^{-1} V||  <=  ||A_1^{-1}||^2 ||dA|| ||V||     (eq. 51)
    ||(A_2 + dA_2) U - A_2 U||  =  ||dA_2 U||  <=  ||dA_2|| ||U||                                        (eq. 52)

so an error in kappa_1 is amplified by ||A_1^{-1}||^2 and one in kappa_2 only by ||U||: "the calculation of u is less
stable than that of o", which is why kappa_1 must trade expressivity for stability (App. E.2).

Norms (the paper leaves them unnamed; our choice): the matrices A_1, A_2 and their perturbations take the spectral
norm (largest singular value), V, U and the errors the Frobenius norm, so every "<=" above is a theorem
(||X Y||_F <= ||X||_2 ||Y||_F). Eq. 51's middle term is the first-order term of the Neumann series; the difference
itself obeys it only to first order. The exact bound is the classical one,

    ||(A + dA)^{-1} V - A^{-1} V|| <= ||A^{-1}||^2 ||dA|| ||V|| / (1 - ||A^{-1}|| ||dA||)  when ||A^{-1}|| ||dA|| < 1,

which `value_pass_exact_bound` returns (infinite when the hypothesis fails: the perturbed matrix may be singular).

Shapes: A_1, dA, A_2, dA_2 [T, T]; V, U [T, D] (or [T]); Q, K, W [T, K]. Everything is a float tensor of one dtype;
float64 for checks.
"""

from __future__ import annotations

import torch

from regmem.ops.common import ScoreKernel, check_score_kernel, score_kernel


def _square(name: str, A: torch.Tensor) -> None:
    if A.ndim != 2 or A.shape[0] != A.shape[1]:
        raise ValueError(f"{name} must be a square matrix [T, T], got shape {tuple(A.shape)}")


def _check(A_name: str, A: torch.Tensor, dA: torch.Tensor, X_name: str, X: torch.Tensor) -> None:
    _square(A_name, A)
    if dA.shape != A.shape:
        raise ValueError(f"the perturbation must have the shape of {A_name} {tuple(A.shape)}, got {tuple(dA.shape)}")
    if X.ndim not in (1, 2) or X.shape[0] != A.shape[0]:
        raise ValueError(f"{X_name} must be [T] or [T, D] with T = {A.shape[0]}, got shape {tuple(X.shape)}")


def spectral_norm(A: torch.Tensor) -> torch.Tensor:
    """||A||_2, the largest singular value of A [T, T] (a 0-dim tensor)."""
    _square("A", A)
    return torch.linalg.matrix_norm(A, ord=2)


def value_pass_error(A1: torch.Tensor, dA: torch.Tensor, V: torch.Tensor) -> torch.Tensor:
    """||(A_1 + dA)^{-1} V - A_1^{-1} V||_F, the left side of eq. (51), by two solves."""
    _check("A1", A1, dA, "V", V)
    return torch.linalg.norm(torch.linalg.solve(A1 + dA, V) - torch.linalg.solve(A1, V))


def value_pass_first_order(A1: torch.Tensor, dA: torch.Tensor, V: torch.Tensor) -> torch.Tensor:
    """||A_1^{-1} dA A_1^{-1} V||_F, the first-order term of eq. (51) (the "~" of the paper)."""
    _check("A1", A1, dA, "V", V)
    return torch.linalg.norm(torch.linalg.solve(A1, dA @ torch.linalg.solve(A1, V)))


def value_pass_bound(A1: torch.Tensor, dA: torch.Tensor, V: torch.Tensor) -> torch.Tensor:
    """||A_1^{-1}||_2^2 ||dA||_2 ||V||_F, the right side of eq. (51)."""
    _check("A1", A1, dA, "V", V)
    inverse_norm = spectral_norm(torch.linalg.inv(A1))
    return inverse_norm ** 2 * spectral_norm(dA) * torch.linalg.norm(V)


def value_pass_exact_bound(A1: torch.Tensor, dA: torch.Tensor, V: torch.Tensor) -> torch.Tensor:
    """The rigorous form of eq. (51) (module docstring): ||A_1^{-1}||^2 ||dA|| ||V|| / (1 - ||A_1^{-1}|| ||dA||),
    +inf when ||A_1^{-1}||_2 ||dA||_2 >= 1."""
    _check("A1", A1, dA, "V", V)
    inverse_norm, perturbation = spectral_norm(torch.linalg.inv(A1)), spectral_norm(dA)
    margin = 1.0 - inverse_norm * perturbation
    bound = inverse_norm ** 2 * perturbation * torch.linalg.norm(V) / margin.clamp(min=torch.finfo(A1.dtype).tiny)
    return torch.where(margin > 0, bound, torch.full_like(bound, float("inf")))


def read_error(A2: torch.Tensor, dA2: torch.Tensor, U: torch.Tensor) -> torch.Tensor:
    """||(A_2 + dA_2) U - A_2 U||_F, the left side of eq. (52) (equal to ||dA_2 U||_F up to rounding)."""
    _check("A2", A2, dA2, "U", U)
    return torch.linalg.norm((A2 + dA2) @ U - A2 @ U)


def read_bound(A2: torch.Tensor, dA2: torch.Tensor, U: torch.Tensor) -> torch.Tensor:
    """||dA_2||_2 ||U||_F, the right side of eq. (52)."""
    _check("A2", A2, dA2, "U", U)
    return spectral_norm(dA2) * torch.linalg.norm(U)


def deltaformer_pass_matrices(q: torch.Tensor, k: torch.Tensor, w: torch.Tensor, *, erase_kernel: ScoreKernel,
                              read_kernel: ScoreKernel, beta: float = 1.0,
                              decimals: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """(A_1, A_2) of eq. (50) for one head: q, k, w [T, K] (queries, keys, erase vectors) ->
    A_1 = I + beta * strict_lower(kappa_1(w k^T / sqrt(K))) and A_2 = causal(kappa_2(q k^T / sqrt(K))), both
    [T, T]; kappa_1 = "softmax" normalises over the strictly earlier keys (Z^(1) of eq. 94), kappa_2 = "softmax"
    over the keys up to and including t (Z^(2) of eq. 95)."""
    check_score_kernel("erase_kernel", erase_kernel, decimals)
    check_score_kernel("read_kernel", read_kernel, decimals)
    if q.ndim != 2 or k.shape != q.shape or w.shape != q.shape:
        raise ValueError(f"q, k and w must all be [T, K], got {tuple(q.shape)}, {tuple(k.shape)}, {tuple(w.shape)}")
    T, scale = q.shape[0], q.shape[1] ** -0.5
    causal = torch.ones(T, T, dtype=torch.bool, device=q.device).tril()
    strict = causal.tril(-1)
    erase = score_kernel(erase_kernel, (w @ k.T) * scale, strict, decimals=decimals)  # [T, T]
    A1 = torch.eye(T, dtype=q.dtype, device=q.device) + beta * erase
    A2 = score_kernel(read_kernel, (q @ k.T) * scale, causal, decimals=decimals)  # [T, T]
    return A1, A2
