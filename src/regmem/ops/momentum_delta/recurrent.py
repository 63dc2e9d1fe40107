"""Recurrent form of the momentum delta rule: one update of (S, P) per token, constant memory in T.

Implements the Titans linear memory (Behrouz, Zhong, Mirrokni; arXiv:2501.00663, Sec. 3.1, eqs. 9-15) in
regmem's layout S = M^T, P = (momentum)^T:
    e_t = v_t - S_{t-1}^T k_t                         (the error of the memory before the token)
    P_t = exp(log_mu_t) P_{t-1} + beta_t k_t e_t^T    (momentum of the SGD updates)
    S_t = exp(g_t) S_{t-1} + P_t                        (weight decay, then the momentum step)
    o_t = S_t^T q_t
This is the form decoding uses.

Legend: B batch, T time, H heads, K key dim, V value dim.
"""

from __future__ import annotations

import torch

from regmem.ops.momentum_delta.state import MomentumState


def momentum_recurrent_core(q, k, v, g, beta, log_mu, live, *, initial_state):
    """q, k: [B, T, H, K] (q already scaled); v: [B, T, H, V]; g, beta, log_mu: [B, T, H]; live: [B, T, H] or
    None (all ones); initial_state: MomentumState of [B, H, K, V] or None. Returns o: [B, T, H, V] and the
    MomentumState after the last token."""
    B, T, H, K = q.shape
    V = v.shape[-1]
    S, P = initial_state if initial_state is not None else (q.new_zeros(B, H, K, V), q.new_zeros(B, H, K, V))
    # unbind, not q[:, t]: the backward of indexing would zero-fill all of q once per token (O(T^2)).
    lives = live.unbind(dim=1) if live is not None else [None] * T
    steps = zip(q.unbind(1), k.unbind(1), v.unbind(1), g.unbind(1), beta.unbind(1), log_mu.unbind(1), lives,
                strict=True)
    outputs = []
    for q_t, k_t, v_t, g_t, beta_t, log_mu_t, live_t in steps:
        e = v_t - torch.einsum("bhk,bhkv->bhv", k_t, S)  # [B, H, V]
        update = (beta_t.unsqueeze(-1) * k_t).unsqueeze(-1) * e.unsqueeze(-2)  # [B, H, K, V]
        P = torch.exp(log_mu_t)[..., None, None] * P + update
        step = P if live_t is None else live_t[..., None, None] * P
        S = torch.exp(g_t)[..., None, None] * S + step
        outputs.append(torch.einsum("bhk,bhkv->bhv", q_t, S))
    o = torch.stack(outputs, dim=1) if outputs else v.new_zeros(B, 0, H, V)  # [B, T, H, V]
    return o, MomentumState(S, P)
