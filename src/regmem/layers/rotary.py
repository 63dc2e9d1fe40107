"""Rotary position embedding (RoPE; Su et al. 2021, arXiv:2104.09864): channel pair i of a head is rotated by the
angle position * base^(-2i / D). The pairs are the two halves' i-th channels (half-split, GPT-NeoX and Llama's
layout; the default) or neighbouring channels (2i, 2i + 1) with `interleaved=True` (the paper's and GPT-J's layout,
which official TTT's JAX-trained weights use: ttt-lm-pytorch permutes q and k around a half-split rotation to get
it). The angles are computed in float32, or in float64 for float64 inputs."""

from __future__ import annotations

import torch
from torch import nn


class RotaryEmbedding(nn.Module):
    def __init__(self, head_dim: int, base: float = 10000.0, *, interleaved: bool = False):
        super().__init__()
        if head_dim % 2:
            raise ValueError(f"rotary needs an even head_dim, got {head_dim}")
        self.head_dim, self.base, self.interleaved = head_dim, base, interleaved
        self.register_buffer("inv_freq", self._inv_freq(), persistent=False)

    def _inv_freq(self, dtype: torch.dtype = torch.float32) -> torch.Tensor:
        return self.base ** (-torch.arange(0, self.head_dim, 2, dtype=dtype) / self.head_dim)  # [D / 2]

    def reset_buffers(self) -> None:
        """Recomputes `inv_freq` (not saved with the weights; a loader that builds modules on the meta device, as
        transformers' does, must restore it: regmem/hf.py)."""
        self.inv_freq = self._inv_freq().to(self.inv_freq.device)

    def forward(self, x: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        """x: [B, T, H, D]; positions: [T] or [B, T] token indices."""
        dtype = torch.promote_types(x.dtype, torch.float32)
        inv_freq = self.inv_freq if dtype == torch.float32 else self._inv_freq(dtype).to(x.device)
        angles = positions.to(dtype).unsqueeze(-1) * inv_freq  # [(B,) T, D / 2]
        if angles.ndim == 2:
            angles = angles.unsqueeze(0)
        cos, sin = angles.cos().unsqueeze(2), angles.sin().unsqueeze(2)  # [B|1, T, 1, D / 2]
        out_dtype, x = x.dtype, x.to(dtype)
        if self.interleaved:
            x1, x2 = x[..., 0::2], x[..., 1::2]
            rotated = torch.stack([x1 * cos - x2 * sin, x1 * sin + x2 * cos], dim=-1).flatten(-2)
        else:
            x1, x2 = x.chunk(2, dim=-1)
            rotated = torch.cat([x1 * cos - x2 * sin, x1 * sin + x2 * cos], dim=-1)
        return rotated.to(out_dtype)
