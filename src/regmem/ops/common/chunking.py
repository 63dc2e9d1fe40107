"""Chunk helpers for the chunk-parallel forms: pad time to a multiple of the chunk size, split into chunks."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from einops import rearrange


def pad_time(x: torch.Tensor, multiple: int) -> torch.Tensor:
    """Right-pads dim 1 (time) of x: [B, T, ...] with zeros up to a multiple of `multiple`."""
    pad = (-x.shape[1]) % multiple
    if pad == 0:
        return x
    widths = [0, 0] * (x.ndim - 2) + [0, pad]  # F.pad lists dims from last to first
    return F.pad(x, widths)


def fit_chunk(chunk_size: int, T: int) -> int:
    """The chunk size for a sequence of T tokens: chunk_size, or the smallest power of two >= T where that is
    smaller. A short sequence is then padded to less than twice its length instead of to a whole chunk: the chunk
    forms' time and memory grow with the padded length (least squares holds an [F, F] matrix per padded token:
    at F = 4096, T = 4 and chunk_size = 64, 17 GB instead of ~1 GB). The result is the same, a chunk's padding
    being neutral tokens."""
    return min(chunk_size, 1 << max(T - 1, 0).bit_length())


def split_chunks(x: torch.Tensor, chunk_size: int) -> torch.Tensor:
    """[B, T, H, D] -> [B, H, N, C, D] or [B, T, H] -> [B, H, N, C], with T padded to N * C."""
    x = pad_time(x, chunk_size)
    if x.ndim == 3:
        return rearrange(x, "b (n c) h -> b h n c", c=chunk_size)
    return rearrange(x, "b (n c) h d -> b h n c d", c=chunk_size)


def merge_chunks(x: torch.Tensor, length: int) -> torch.Tensor:
    """[B, H, N, C, D] -> [B, T, H, D], dropping the padding past `length`."""
    x = rearrange(x, "b h n c d -> b (n c) h d")  # [B, N * C, H, D]
    return x[:, :length]
