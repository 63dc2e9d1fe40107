"""Norms: RMSNorm (torch.nn.RMSNorm), the gated output norm of GLA/Mamba-2, and L2 (QK) normalisation."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


class GatedRMSNorm(nn.Module):
    """y = RMSNorm(x) ⊙ silu(gate), per head over the last dim (Mamba-2's gated norm, GLA's output gate)."""

    def __init__(self, dim: int, eps: float = 1e-5):
        super().__init__()
        self.norm = nn.RMSNorm(dim, eps=eps)

    def forward(self, x: torch.Tensor, gate: torch.Tensor) -> torch.Tensor:
        return self.norm(x) * F.silu(gate)


def l2_normalize(x: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    """x / ||x|| over the last dim (QK-norm)."""
    return F.normalize(x, dim=-1, eps=eps)
