"""Zero-order-hold discretisation of Mamba-1's diagonal continuous system, shared by the three forms.

Per channel d and state index n (Gu & Dao, arXiv:2312.00752, Sec. 2, eq. 4):
    Abar_t[d, n] = exp(delta_t[d] A[d, n]),
    Bbar_t[d, n] = (exp(delta_t[d] A[d, n]) - 1) / A[d, n] * B_t[n]   ("zoh", limit delta_t[d] B_t[n] as A -> 0)
                 = delta_t[d] B_t[n]                                    ("simple": Mamba's first-order term)

Legend: T time (or any leading dims), D channels, N state size.
"""

from __future__ import annotations

from typing import Literal, get_args

import torch

Discretization = Literal["zoh", "simple"]  # exact zero-order hold | Mamba's Bbar = delta B
DISCRETIZATIONS = get_args(Discretization)


def zoh_input_weight(delta: torch.Tensor, A: torch.Tensor) -> torch.Tensor:
    """The zero-order-hold input weight per unit B, (exp(delta A) - 1) / A = delta * expm1(z) / z with z = delta A,
    and its limit delta (1 + z/2 + z^2/6) as z -> 0 (A = 0 or delta = 0), smooth for gradients too.
    delta: [..., D, 1] and A: [D, N] broadcast to [..., D, N]."""
    z = delta * A
    small = z.abs() < 1e-4
    safe = torch.where(small, torch.ones_like(z), z)
    ratio = torch.where(small, 1.0 + z / 2 + z * z / 6, torch.expm1(safe) / safe)
    return delta * ratio


def discretize(x: torch.Tensor, delta: torch.Tensor, A: torch.Tensor, B: torch.Tensor,
               discretization: Discretization) -> tuple[torch.Tensor, torch.Tensor]:
    """x, delta: [..., D]; A: [D, N]; B: [..., N] -> (log Abar = delta A, Bbar x): [..., D, N] each."""
    step = delta.unsqueeze(-1)  # [..., D, 1]
    log_decay = step * A  # [..., D, N]
    weight = zoh_input_weight(step, A) if discretization == "zoh" else step  # [..., D, N] or [..., D, 1]
    return log_decay, (weight * x.unsqueeze(-1)) * B.unsqueeze(-2)  # [..., D, N]
