"""Recurrent form of the selective scan: Mamba-1's recurrence token by token on the state h: [B, D, N], constant
memory; what decoding uses (Gu & Dao, arXiv:2312.00752, Sec. 3.2, Algorithm 2):

    h_t = Abar_t ⊙ h_{t-1} + Bbar_t x_t,    y_t = C_t^T h_t.

Legend: B batch, T time, D channels, N state size.
"""

from __future__ import annotations

import torch

from regmem.ops.ssm.discretize import Discretization, discretize


def selective_scan_recurrent_core(x, delta, B, C, *, initial_state, A, discretization: Discretization):
    """x, delta: [B, T, D]; B, C: [B, T, N]; A: [D, N]; initial_state: [B, D, N] or None. Returns y: [B, T, D] and
    h_T: [B, D, N]."""
    Bsz, T, D = x.shape
    h = initial_state if initial_state is not None else x.new_zeros(Bsz, D, A.shape[1])  # [B, D, N]
    ys = []
    for t in range(T):
        log_decay, inputs = discretize(x[:, t], delta[:, t], A, B[:, t], discretization)  # [B, D, N]
        h = torch.exp(log_decay) * h + inputs
        ys.append(torch.einsum("bdn,bn->bd", h, C[:, t]))  # [B, D]
    y = torch.stack(ys, dim=1) if ys else x.new_zeros(Bsz, 0, D)  # [B, T, D]
    return y, h
