"""Causal depthwise short convolution with its own decode cache (TTR Sec. 6, eq. 56; H3, Fu et al. 2022).

k_t = sum_{i=0}^{W-1} w_i ⊙ x_{t-i} per channel, with x_{<=0} = 0. The cache holds the last W - 1 inputs
[B, D, W - 1], so decoding one token at a time equals the full convolution.

Padding (regmem/ops/common/padding.py): the caller zeroes padded inputs. Left padding then reads as the zeros before
a fresh sequence. With right padding the last W - 1 inputs are zeros, not the row's last real inputs, so given the
mask the cache is taken from the W - 1 inputs that end at each row's last real token (`real_end`): decoding after a
right-padded prefill continues the real tokens.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from regmem.ops.common import real_end


class ShortConvolution(nn.Module):
    def __init__(self, channels: int, kernel_size: int = 4, activation: bool = True, bias: bool = False):
        super().__init__()
        if kernel_size < 1:
            raise ValueError(f"kernel_size must be >= 1, got {kernel_size}")
        self.kernel_size = kernel_size
        self.activation = activation
        # bias: mamba_ssm's convolutions have one (conv_bias=True); regmem's and fla's do not by default
        self.conv = nn.Conv1d(channels, channels, kernel_size, groups=channels, padding=0, bias=bias)

    def forward(self, x: torch.Tensor, cache: torch.Tensor | None = None, mask: torch.Tensor | None = None):
        """x: [B, T, D], zero at padded tokens; cache: [B, D, W - 1] or None (zeros); mask: [B, T] bool (True at
        real tokens) or None. Returns y: [B, T, D] and the new cache."""
        x = x.transpose(1, 2)  # [B, D, T]
        if cache is None:
            cache = x.new_zeros(x.shape[0], x.shape[1], self.kernel_size - 1)
        window = torch.cat([cache.to(x.dtype), x], dim=-1)  # [B, D, W - 1 + T]
        y = self.conv(window)  # [B, D, T]
        if self.activation:
            y = F.silu(y)
        W1 = self.kernel_size - 1
        if mask is None:
            new_cache = window[..., window.shape[-1] - W1:]  # [B, D, W - 1]
        else:  # the W - 1 window slots ending at the last real token (the old cache if the row has none)
            end = real_end(mask)  # [B], last real index + 1
            slots = end.unsqueeze(-1) + torch.arange(W1, device=mask.device)  # [B, W - 1], window coordinates
            new_cache = window.gather(-1, slots.unsqueeze(1).expand(-1, window.shape[1], -1))  # [B, D, W - 1]
        return y.transpose(1, 2), new_cache
