"""The state of every nonparametric memory: its key-value cache.

`KVState(k [N, S, H, K], v [N, S, H, V])` holds the S pairs seen before this call. A form extends it by the T new
pairs (`with_cache`); query t may then use pairs j <= S + t (causal, inclusive), and the final state is the
extended cache. With `cu_seqlens` there is no state: sequences of different lengths share no [N, S, H, *] cache,
and the padded pairs of the frame's padded batch sit after every real query, so causality keeps them out.
"""

from __future__ import annotations

from typing import NamedTuple

import torch


class KVState(NamedTuple):
    """The memory of a nonparametric op: k: [N, S, H, K] and v: [N, S, H, V], the S pairs seen so far."""

    k: torch.Tensor
    v: torch.Tensor


def with_cache(k: torch.Tensor, v: torch.Tensor, initial_state: KVState | None):
    """The cache followed by the new pairs: k [B, S + T, H, K], v [B, S + T, H, V], and S (the offset of the first
    new query)."""
    if initial_state is None:
        return k, v, 0
    return torch.cat([initial_state.k, k], dim=1), torch.cat([initial_state.v, v], dim=1), initial_state.k.shape[1]
