"""Reference form of the selective scan: Mamba-1's time-varying system unrolled, every state materialised
(Gu & Dao, arXiv:2312.00752, Sec. 2, eqs. 2-3 with the selective Abar_t, Bbar_t of Sec. 3.2):

    h_t = (prod_{j<=t} Abar_j) ⊙ h_0 + sum_{s<=t} (prod_{j=s+1}^{t} Abar_j) ⊙ Bbar_s x_s,    y_t = C_t^T h_t

per channel d and state index n, the products taken as exp of sums of log Abar_j = delta_j[d] A[d, n] (segsum).
It is the parallel (convolution-like) form of the recurrence that recurrent.py runs token by token.

Legend: B batch, T time, D channels, N state size.
"""

from __future__ import annotations

import torch

from regmem.ops.common import segsum
from regmem.ops.ssm.discretize import Discretization, discretize


def selective_scan_reference_core(x, delta, B, C, *, initial_state, A, discretization: Discretization):
    """x, delta: [B, T, D]; B, C: [B, T, N]; A: [D, N]; initial_state: [B, D, N] or None. Returns y: [B, T, D] and
    h_T: [B, D, N]."""
    Bsz, T, D = x.shape
    h0 = initial_state if initial_state is not None else x.new_zeros(Bsz, D, A.shape[1])  # [B, D, N]
    if T == 0:
        return x.new_zeros(Bsz, 0, D), h0
    log_decay, inputs = discretize(x, delta, A, B, discretization)  # [B, T, D, N]: log Abar_t, Bbar_t x_t
    L = torch.exp(segsum(log_decay.permute(0, 2, 3, 1)))  # [B, D, N, T, T], L_ts = prod_{j=s+1}^t Abar_j
    from_start = torch.exp(log_decay.cumsum(dim=1))  # [B, T, D, N], prod_{j<=t} Abar_j
    h = torch.einsum("bdnts,bsdn->btdn", L, inputs) + from_start * h0.unsqueeze(1)  # [B, T, D, N], every h_t
    y = torch.einsum("btdn,btn->btd", h, C)  # [B, T, D]
    return y, h[:, -1]
