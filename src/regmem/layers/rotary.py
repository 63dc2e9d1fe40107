"""Rotary position embedding (RoPE; Su et al. 2021), rotating half-split pairs of channels."""

from __future__ import annotations

import torch
from torch import nn


class RotaryEmbedding(nn.Module):
    def __init__(self, head_dim: int, base: float = 10000.0):
        super().__init__()
        if head_dim % 2:
            raise ValueError(f"rotary needs an even head_dim, got {head_dim}")
        self.head_dim, self.base = head_dim, base
        self.register_buffer("inv_freq", self._inv_freq(), persistent=False)

    def _inv_freq(self) -> torch.Tensor:
        return self.base ** (-torch.arange(0, self.head_dim, 2, dtype=torch.float32) / self.head_dim)  # [D / 2]

    def reset_buffers(self) -> None:
        """Recomputes `inv_freq` (not saved with the weights; a loader that builds modules on the meta device, as
        transformers' does, must restore it: regmem/hf.py)."""
        self.inv_freq = self._inv_freq().to(self.inv_freq.device)

    def forward(self, x: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        """x: [B, T, H, D]; positions: [T] or [B, T] absolute token indices."""
        angles = positions.to(torch.float32).unsqueeze(-1) * self.inv_freq  # [(B,) T, D / 2]
        if angles.ndim == 2:
            angles = angles.unsqueeze(0)
        cos, sin = angles.cos().unsqueeze(2), angles.sin().unsqueeze(2)  # [B|1, T, 1, D / 2]
        x1, x2 = x.float().chunk(2, dim=-1)
        rotated = torch.cat([x1 * cos - x2 * sin, x1 * sin + x2 * cos], dim=-1)
        return rotated.to(x.dtype)
