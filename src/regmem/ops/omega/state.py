"""The state of the Omega rule, and the window cache every form shares.

State layout: `OmegaState(S, k, v, gamma)`: S: [N, H, K, V] the memory (S = M^T, read as o_t = scale * S_t^T q_t),
and the last window - 1 tokens, oldest first, that the next tokens' windows still contain: k: [N, H, window - 1, K],
v: [N, H, window - 1, V], gamma: [N, H, window - 1]. A zero state is an empty window (a zero key adds nothing to the
windowed loss). N = B, or the number of sequences with `cu_seqlens`.

Varlen: the common frame pads each packed sequence on the right with zero tokens. They leave S unchanged (beta = 0)
but would slide into the window, so with `cu_seqlens` the frame also carries `live` = 1 per real token (0 on the
padding after it), and the final window holds the last window - 1 *real* tokens. `live` is right-aligned: a row's
real tokens come first.
"""

from __future__ import annotations

from typing import NamedTuple

import torch


class OmegaState(NamedTuple):
    """State of the Omega rule: S: [N, H, K, V] the memory; k: [N, H, window - 1, K], v: [N, H, window - 1, V],
    gamma: [N, H, window - 1] the cached tokens of the sliding window, oldest first."""

    S: torch.Tensor
    k: torch.Tensor
    v: torch.Tensor
    gamma: torch.Tensor


def empty_state(B: int, H: int, K: int, V: int, window: int, like: torch.Tensor) -> OmegaState:
    """The zero state: S = 0 and an empty (zero) window of window - 1 tokens."""
    c = window - 1
    return OmegaState(like.new_zeros(B, H, K, V), like.new_zeros(B, H, c, K), like.new_zeros(B, H, c, V),
                      like.new_zeros(B, H, c))


def extended(state: OmegaState, k, v, gamma):
    """The cached tokens followed by the new ones, time first: k: [B, window - 1 + T, H, K], v: [..., V],
    gamma: [B, window - 1 + T, H]. Token t of the call sits at position t + window - 1."""
    k = torch.cat([state.k.permute(0, 2, 1, 3), k], dim=1)  # [B, c + T, H, K]
    v = torch.cat([state.v.permute(0, 2, 1, 3), v], dim=1)  # [B, c + T, H, V]
    gamma = torch.cat([state.gamma.transpose(1, 2), gamma], dim=1)  # [B, c + T, H]
    return k, v, gamma


def final_window(k, v, gamma, live, window: int):
    """The window cache after the call: the window - 1 positions of the extended sequence (`extended`) that end at
    the last real token. live: [B, T, H] right-aligned ones, or None (every token is real).
    Returns (k: [B, H, window - 1, K], v: [B, H, window - 1, V], gamma: [B, H, window - 1])."""
    B, total, H, K = k.shape
    c = window - 1
    T = total - c
    if live is None:
        ends = torch.full((B, H), T, dtype=torch.long, device=k.device)  # [B, H]
    else:
        ends = live.sum(dim=1).round().long()  # [B, H], the number of real tokens of each row
    index = ends.unsqueeze(1) + torch.arange(c, device=k.device)[None, :, None]  # [B, c, H]
    k = k.gather(1, index.unsqueeze(-1).expand(B, c, H, K))  # [B, c, H, K]
    v = v.gather(1, index.unsqueeze(-1).expand(B, c, H, v.shape[-1]))  # [B, c, H, V]
    gamma = gamma.gather(1, index)  # [B, c, H]
    return k.permute(0, 2, 1, 3), v.permute(0, 2, 1, 3), gamma.transpose(1, 2)
