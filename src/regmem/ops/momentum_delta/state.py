"""The state of the momentum delta rule (Titans linear memory), and how varlen padding stays neutral for it.

State layout: `MomentumState(S, P)`, both [N, H, K, V], in regmem's transposed orientation:
S = M^T is the memory read as o_t = scale * S_t^T q_t, and P is the transpose of the paper's momentum ("surprise")
matrix. N = B, or the number of sequences with `cu_seqlens`.

Varlen: the common frame pads each packed sequence with zero tokens. A zero token is not neutral for this
recurrence (S_t = gamma S_{t-1} + P_t keeps adding the momentum), so with `cu_seqlens` the frame also carries
`live` = 1 per real token (0 on padding) and the cores write S_t = gamma_t S_{t-1} + live_t P_t; with g = log_mu
= beta = 0 on padding this leaves (S, P) unchanged. The chunk form uses the same mask for its own padding.
"""

from __future__ import annotations

from typing import NamedTuple

import torch


class MomentumState(NamedTuple):
    """State of the momentum delta rule: S: [N, H, K, V] the memory (S = M^T, o_t = scale * S_t^T q_t) and
    P: [N, H, K, V] the momentum of the memory's updates (the paper's surprise S_t, transposed)."""

    S: torch.Tensor
    P: torch.Tensor
