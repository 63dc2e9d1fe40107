"""The state of DeltaFormer: its key-u cache (arXiv:2505.19488, Sec. 2.2.1 and App. D.3).

DeltaFormer stores every key k_i and its *processed* value u_i (the value with the delta rule's erase applied,
eq. 41), so a decode step reads and erases against the whole cache: O(S (K + V)) per step and per head, like a
KV cache. The paper's O(d^2) recall assumes a finite feature map; with the exp kernel there is none, so the cache is
the state. With `cu_seqlens` there is no state: packed sequences share no [N, S, H, *] cache.
"""

from __future__ import annotations

from typing import NamedTuple

import torch


class KUState(NamedTuple):
    """k: [N, S, H, K] the cached keys; u: [N, S, H, V] their processed values (eq. 41)."""

    k: torch.Tensor
    u: torch.Tensor


def cached_pairs(k: torch.Tensor, initial_state: KUState | None):
    """The cached keys followed by the new ones, k [B, S + T, H, K]; the cached u [B, S, H, V] (or None); and S."""
    if initial_state is None:
        return k, None, 0
    return torch.cat([initial_state.k, k], dim=1), initial_state.u, initial_state.k.shape[1]
