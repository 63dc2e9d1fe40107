"""The state of multi-step gradient descent: the sufficient statistics of the least-squares loss.

`GDStats(R, C)` for L_t(S) = 1/2 sum_{s<=t} ||v_s - S^T k_s||^2 (*Test-time regression*, arXiv:2501.12352,
eqs. 18-23):
    R: [N, H, K, K], R_t = sum_{s<=t} k_s k_s^T          C: [N, H, K, V], C_t = sum_{s<=t} k_s v_s^T
(C is the paper's V_t^T K_t transposed into regmem's layout). Both are prefix sums, so state passing and varlen
packing are exact; a zero (padding) token leaves them unchanged. N = B, or the number of sequences with
`cu_seqlens`.
"""

from __future__ import annotations

from typing import NamedTuple

import torch


class GDStats(NamedTuple):
    """State of multi-step GD: R: [N, H, K, K] = sum_s k_s k_s^T and C: [N, H, K, V] = sum_s k_s v_s^T."""

    R: torch.Tensor
    C: torch.Tensor
