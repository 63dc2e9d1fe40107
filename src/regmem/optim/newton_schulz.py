"""Newton-Schulz orthogonalisation as an inner gradient descent (Behrouz et al., *Nested Learning: The Illusion of
Deep Learning Architectures*, arXiv:2512.24695, Sec. 4.2, eqs. 43-44).

Eq. 43 maps a gradient g to an (almost) orthogonal matrix O by minimising the orthogonality objective

    L(O) = 1/2 ||O^T O - I||_F^2            (optionally + 1/2 ||O - g||_F^2, the proximity term of eq. 44)

with gradient descent from O_0 = g. Its gradient is dL/dO = 2 O (O^T O - I), so one step of size zeta = 1/4 is

    O <- O - 1/4 * 2 O (O^T O - I) = 1.5 O - 0.5 O O^T O,

the cubic Newton-Schulz step: `orthogonality_gd_step(o, zeta=0.25)` and `newton_schulz_step(o, CUBIC)` compute
the same matrix. k steps from g / ||g||_F converge to the polar factor U V^T of g = U S V^T (cubic iteration:
every singular value follows s <- 1.5 s - 0.5 s^3, whose fixed point 1 attracts all of (0, sqrt(3))).

Muon (Jordan et al., 2024) replaces the cubic with the quintic X <- a X + (b A + c A^2) X, A = X X^T,
(a, b, c) = QUINTIC = (3.4445, -4.7750, 2.0315): a steeper slope at zero orthogonalises in fewer steps, but the
singular values end up scattered around 1 (roughly in [0.7, 1.2]), not at 1 -- it approximates U V^T.

Every function takes a 2-D matrix [m, n]. `newton_schulz` works on the wide orientation (transposes when
m > n, so A = X X^T is the smaller Gram matrix) and normalises by the Frobenius norm first (so that the spectral
norm is at most 1); its operation order is `torch.optim.Muon`'s, so with `compute_dtype=torch.bfloat16` it
reproduces that optimiser's orthogonalisation bit for bit.
"""

from __future__ import annotations

import functools

import torch

CUBIC = (1.5, -0.5, 0.0)  # the GD step of eq. 44 with zeta = 1/4 (no proximity term)
QUINTIC = (3.4445, -4.7750, 2.0315)  # Muon's coefficients (Jordan et al., 2024); not a GD step, see module doc


def fast_bfloat16(device: torch.device) -> bool:
    """Whether bfloat16 matmuls run natively on `device`: a CUDA device, or a CPU with AVX512-BF16 or AMX (torch's
    CPU capability probes; False where this torch lacks them). Elsewhere they are emulated: a bfloat16
    Newton-Schulz step then costs ~27x the float32 one (benchmarks/results/optim/2026-11-25-optim.md, torch's Muon
    against MuonMemory in float32 on such a CPU)."""
    if device.type == "cuda":
        return True
    return device.type == "cpu" and _cpu_has_native_bfloat16()


@functools.cache
def _cpu_has_native_bfloat16() -> bool:
    """The CPU probes, asked once per process (an optimiser asks every step)."""
    probes = [getattr(torch.cpu, name, None) for name in ("_is_avx512_bf16_supported", "_is_amx_tile_supported")]
    return any(probe is not None and probe() for probe in probes)


def _check_matrix(x: torch.Tensor, name: str) -> None:
    if x.ndim != 2:
        raise ValueError(f"{name} must be a 2-D matrix [m, n], got shape {tuple(x.shape)}")


def orthogonality_loss(o: torch.Tensor) -> torch.Tensor:
    """The orthogonality objective of eq. 43, 1/2 ||O^T O - I||_F^2, for O [m, n] (I is n x n)."""
    _check_matrix(o, "o")
    eye = torch.eye(o.shape[1], dtype=o.dtype, device=o.device)
    return 0.5 * (o.mT @ o - eye).square().sum()


def orthogonality_grad(o: torch.Tensor) -> torch.Tensor:
    """Gradient of `orthogonality_loss`: 2 O (O^T O - I), shape [m, n]."""
    _check_matrix(o, "o")
    eye = torch.eye(o.shape[1], dtype=o.dtype, device=o.device)
    return 2.0 * o @ (o.mT @ o - eye)


def orthogonality_gd_step(o: torch.Tensor, zeta: float = 0.25, anchor: torch.Tensor | None = None) -> torch.Tensor:
    """One gradient step of eq. 44: O - zeta * [(O - g) + 2 O (O^T O - I)].

    o:      [m, n], the current mapping O_i.
    zeta:   step size; 1/4 makes the step the cubic Newton-Schulz step.
    anchor: [m, n], the gradient g of the proximity term 1/2 ||O - g||_F^2, or None to drop that term. From
            O_0 = g the term is zero, so the first step is the same either way.
    """
    step = orthogonality_grad(o)
    if anchor is not None:
        if anchor.shape != o.shape:
            raise ValueError(f"anchor must have the shape of o {tuple(o.shape)}, got {tuple(anchor.shape)}")
        step = step + (o - anchor)
    return o - zeta * step


def newton_schulz_step(x: torch.Tensor, coefficients: tuple[float, float, float] = CUBIC) -> torch.Tensor:
    """One odd-polynomial step X <- a X + (b A + c A^2) X with A = X X^T, for X [m, n], no normalisation.

    With CUBIC this is 1.5 X - 0.5 X X^T X, i.e. `orthogonality_gd_step(x, 0.25)` (eq. 44)."""
    _check_matrix(x, "x")
    a, b, c = coefficients
    gram = x @ x.mT  # [m, m]
    poly = torch.addmm(gram, gram, gram, beta=b, alpha=c)  # b A + c A^2
    return torch.addmm(x, poly, x, beta=a)


def newton_schulz(
    x: torch.Tensor,
    steps: int = 5,
    coefficients: tuple[float, float, float] = QUINTIC,
    *,
    eps: float = 1e-7,
    compute_dtype: torch.dtype | None = None,
) -> torch.Tensor:
    """Orthogonalise x [m, n]: `steps` Newton-Schulz steps from x / max(||x||_F, eps) (module docstring).

    compute_dtype: dtype of the iteration (None: x's dtype); the result is returned in that dtype, as
    `torch.optim.Muon` does with bfloat16. A zero matrix maps to zero.
    """
    _check_matrix(x, "x")
    if steps < 0:
        raise ValueError(f"steps must be >= 0, got {steps}")
    if len(coefficients) != 3:
        raise ValueError(f"coefficients must be three floats (a, b, c), got {coefficients!r}")
    out = x.to(compute_dtype) if compute_dtype is not None else x.clone()
    tall = x.shape[0] > x.shape[1]
    if tall:
        out = out.mT  # [n, m]: iterate on the smaller Gram matrix
    out = out / out.norm().clamp(min=eps)  # ||.||_2 <= ||.||_F <= 1
    for _ in range(steps):
        out = newton_schulz_step(out, coefficients)
    return out.mT if tall else out
