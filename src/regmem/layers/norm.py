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


class GroupGatedRMSNorm(nn.Module):
    """mamba_ssm's gated norm (`RMSNormGated` with `group_size`): over the flattened heads [..., width], RMSNorm
    within each of `groups` contiguous groups of channels, one weight per channel; the gate silu(z) multiplies the
    input before the norm (`norm_before_gate=False`, mamba_ssm's default) or the output after it."""

    def __init__(self, width: int, groups: int, eps: float = 1e-5, norm_before_gate: bool = False):
        super().__init__()
        if width % groups:
            raise ValueError(f"groups ({groups}) must divide the width ({width})")
        self.groups, self.eps, self.norm_before_gate = groups, eps, norm_before_gate
        self.weight = nn.Parameter(torch.ones(width))

    def forward(self, x: torch.Tensor, gate: torch.Tensor) -> torch.Tensor:
        if not self.norm_before_gate:
            x = x * F.silu(gate)
        grouped = x.unflatten(-1, (self.groups, -1))
        y = (grouped * torch.rsqrt(grouped.pow(2).mean(-1, keepdim=True) + self.eps)).flatten(-2) * self.weight
        return y * F.silu(gate) if self.norm_before_gate else y


def l2_normalize(x: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    """x / ||x|| over the last dim (QK-norm)."""
    return F.normalize(x, dim=-1, eps=eps)
