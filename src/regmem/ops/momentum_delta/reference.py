"""Reference form of the momentum delta rule: the Titans linear memory, literally, in the paper's orientation.

Implements the long-term memory update of *Titans: Learning to Memorize at Test Time* (Behrouz, Zhong, Mirrokni;
arXiv:2501.00663, Sec. 3.1, eqs. 9-15) for a linear memory M: [V, K] (in *Test-time regression*,
arXiv:2501.12352, Fig. 1 "+ Momentum"):
    grad_t = d/dM 1/2 ||M k_t - v_t||^2 at M_{t-1} = (M_{t-1} k_t - v_t) k_t^T
    P_t = eta_t P_{t-1} - theta_t grad_t                      (momentum of the surprise; eqs. 10, 14)
    M_t = (1 - alpha_t) M_{t-1} + P_t                          (forgetting; eq. 13)
    y_t = M_t q_t                                              (retrieval; eq. 15)
with 1 - alpha_t = exp(g_t), eta_t = exp(log_mu_t) (regmem's mu), theta_t = beta_t. The paper's loss
||M k - v||^2 has no 1/2; its factor 2 is absorbed in theta. regmem stores S = M^T and P^T (state.MomentumState).

Legend: B batch, T time, H heads, K key dim, V value dim.
"""

from __future__ import annotations

import torch

from regmem.ops.momentum_delta.state import MomentumState


def momentum_reference_core(q, k, v, g, beta, log_mu, live, *, initial_state):
    """q, k: [B, T, H, K] (q already scaled); v: [B, T, H, V]; g, beta, log_mu: [B, T, H]; live: [B, T, H] or
    None (all ones); initial_state: MomentumState of [B, H, K, V] or None. Returns o: [B, T, H, V] and the
    MomentumState after the last token."""
    B, T, H, K = q.shape
    V = v.shape[-1]
    if initial_state is None:
        M = q.new_zeros(B, H, V, K)
        P = q.new_zeros(B, H, V, K)
    else:
        M = initial_state.S.transpose(-1, -2)  # [B, H, V, K], the paper's memory
        P = initial_state.P.transpose(-1, -2)  # [B, H, V, K], the paper's momentum
    if live is None:
        live = torch.ones_like(beta)
    outputs = []
    for t in range(T):
        k_t, v_t, q_t = k[:, t], v[:, t], q[:, t]  # [B, H, K], [B, H, V], [B, H, K]
        retain = torch.exp(g[:, t])[..., None, None]  # [B, H, 1, 1], 1 - alpha_t
        eta = torch.exp(log_mu[:, t])[..., None, None]  # [B, H, 1, 1]
        theta = beta[:, t][..., None, None]  # [B, H, 1, 1]
        residual = torch.einsum("bhvk,bhk->bhv", M, k_t) - v_t  # [B, H, V], M_{t-1} k_t - v_t
        grad = residual.unsqueeze(-1) * k_t.unsqueeze(-2)  # [B, H, V, K]
        P = eta * P - theta * grad
        M = retain * M + live[:, t][..., None, None] * P
        outputs.append(torch.einsum("bhvk,bhk->bhv", M, q_t))
    o = torch.stack(outputs, dim=1) if outputs else v.new_zeros(B, 0, H, V)  # [B, T, H, V]
    return o, MomentumState(M.transpose(-1, -2), P.transpose(-1, -2))
