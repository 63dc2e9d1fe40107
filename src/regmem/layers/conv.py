"""Causal depthwise short convolution with its own decode cache (TTR Sec. 6, eq. 56; H3, Fu et al. 2022).

k_t = sum_{i=0}^{W-1} w_i ⊙ x_{t-i} per channel, with x_{<=0} = 0. The cache holds the last W - 1 inputs
[B, D, W - 1], so decoding one token at a time equals the full convolution.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


class ShortConvolution(nn.Module):
    def __init__(self, channels: int, kernel_size: int = 4, activation: bool = True):
        super().__init__()
        if kernel_size < 1:
            raise ValueError(f"kernel_size must be >= 1, got {kernel_size}")
        self.kernel_size = kernel_size
        self.activation = activation
        self.conv = nn.Conv1d(channels, channels, kernel_size, groups=channels, padding=0, bias=False)

    def forward(self, x: torch.Tensor, cache: torch.Tensor | None = None):
        """x: [B, T, D]; cache: [B, D, W - 1] or None (zeros). Returns y: [B, T, D] and the new cache."""
        x = x.transpose(1, 2)  # [B, D, T]
        if cache is None:
            cache = x.new_zeros(x.shape[0], x.shape[1], self.kernel_size - 1)
        window = torch.cat([cache.to(x.dtype), x], dim=-1)  # [B, D, W - 1 + T]
        y = self.conv(window)  # [B, D, T]
        if self.activation:
            y = F.silu(y)
        new_cache = window[..., window.shape[-1] - (self.kernel_size - 1):]  # [B, D, W - 1]
        return y.transpose(1, 2), new_cache
