"""A preconditioner that is itself an associative memory, learned in context (*Nested Learning: The Illusion of Deep
Learning Architecture*, Behrouz et al., arXiv:2512.24695, Sec. 4.2, eqs. 38-41).

Eq. 38 preconditions the gradient, W_{t+1} = W_t - eta P_{t+1}(g_{t+1}); eqs. 39-41 read P as a memory that maps
gradients g to a better coordinate system g^, trained by its own inner objective and gradient descent:

    min_P  L~(P(g); g^)                                                       (eq. 40)
    P_{t+1} = P_t - zeta_{t+1} grad_P L~(P_t; g_{t+1}, g^_{t+1})              (eq. 41)

The paper leaves P's form, L~ and g^ as design choices (identity g^ = g recovers the element-wise Adam/AdaGrad
memories of its App. B). regmem's choice, `LearnedPreconditioner`:
  - P is a linear map on the left of the gradient viewed as a matrix G = as_matrix(g): [a, b] (rows, rest), so
    P: [a, a] (Shampoo's left factor; a 1-D parameter gives a = 1, a learned scalar gain), starting at P_0 = I;
  - L~ is the l2 regression 1/2 ||P G - G^||_F^2 / s with s = ||G||_F^2 (normalize=True: the normalised LMS step,
    stable for zeta in (0, 2) whatever the gradient's scale) or s = 1;
  - the target G^ is the gradient in the coordinates one wants (`Target`): "identity" (G itself: P stays I),
    "normalized" (G / ||G||_F), "sign" (sign(G), signSGD's coordinates) or "orthogonal" (Newton-Schulz's polar
    factor of G, Muon's coordinates);
  - eq. 41 is one gradient step: P_{t+1} = P_t - zeta (P_t G - G^) G^T / s, a delta rule on P with the gradient as
    key and the target as value;
  - the value written into the momentum is the memory's read-out after the write, P_{t+1} G (eq. 38 uses P_{t+1}).
`ValueMomentum(preconditioner=LearnedPreconditioner(...))` keeps P per parameter in its state ("preconditioner").
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, get_args

import torch

from .newton_schulz import newton_schulz

Target = Literal["identity", "normalized", "sign", "orthogonal"]  # the coordinates g^ the memory maps g to


@dataclass(frozen=True)
class LearnedPreconditioner:
    """The preconditioner memory of eqs. 39-41 (module docstring)."""

    lr: float = 0.5  # zeta, the step of P's inner gradient descent (in (0, 2) with normalize)
    target: Target = "orthogonal"  # g^: Muon's coordinates by default
    normalize: bool = True  # divide the inner loss by ||G||_F^2 (normalised LMS)

    def __post_init__(self):
        if not self.lr > 0.0:
            raise ValueError(f"lr must be > 0, got {self.lr}")
        if self.target not in get_args(Target):
            raise ValueError(f"target must be one of {get_args(Target)}, got {self.target!r}")
        if not isinstance(self.normalize, bool):
            raise ValueError(f"normalize must be a bool, got {self.normalize!r}")


def preconditioner_target(G: torch.Tensor, target: Target) -> torch.Tensor:
    """G^ for a gradient G: [a, b] (module docstring)."""
    if target == "identity":
        return G
    if target == "normalized":
        return G / torch.linalg.vector_norm(G).clamp_min(torch.finfo(G.dtype).tiny)
    if target == "sign":
        return torch.sign(G)
    return newton_schulz(G)


def preconditioner_write(P: torch.Tensor, G: torch.Tensor, config: LearnedPreconditioner):
    """One step of eq. 41 on P: [a, a] with the key G: [a, b]; returns (P_{t+1}, the read-out P_{t+1} G: [a, b])."""
    error = P @ G - preconditioner_target(G, config.target)  # [a, b], P_t G - G^
    scale = torch.linalg.vector_norm(G).square().clamp_min(torch.finfo(G.dtype).tiny) if config.normalize else 1.0
    P = P - (config.lr / scale) * (error @ G.T)  # [a, a], the gradient of 1/2 ||P G - G^||^2 / s is error G^T / s
    return P, P @ G
