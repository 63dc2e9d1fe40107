"""Reference form of the Omega rule: one gradient step per token on the loss of a sliding window, literally, in
the paper's orientation.

Implements the Omega rule (*Atlas: Learning to Optimally Memorize the Context at Test Time*, Behrouz et al.,
arXiv:2505.23735, Sec. 3; restated in *Nested Learning*, arXiv:2512.24695, Sec. 5, eq. (68)) for a linear memory
M: [V, K] with identity kernel phi and the l2 objective l(M; k, v) = 1/2 ||M k - v||^2:
    grad_t = sum_{i=t-c+1}^{t} gamma_i (M_{t-1} k_i - v_i) k_i^T       (the window of the last c = window tokens)
    M_t = alpha_t M_{t-1} - eta_t grad_t,      y_t = M_t q_t
with alpha_t = exp(g_t), eta_t = beta_t. regmem stores S = M^T and the window cache (state.py).

Legend: B batch, T time, H heads, K key dim, V value dim, c window.
"""

from __future__ import annotations

import torch

from regmem.ops.omega.state import OmegaState, empty_state, extended, final_window


def omega_reference_core(q, k, v, g, beta, gamma, live, *, initial_state, window):
    """q, k: [B, T, H, K] (q already scaled); v: [B, T, H, V]; g, beta, gamma: [B, T, H]; live: [B, T, H] or None;
    initial_state: OmegaState or None. Returns o: [B, T, H, V] and the OmegaState after the last token."""
    B, T, H, K = q.shape
    V = v.shape[-1]
    state = initial_state if initial_state is not None else empty_state(B, H, K, V, window, q)
    ks, vs, gammas = extended(state, k, v, gamma)  # [B, c - 1 + T, H, ...], token t at position t + c - 1
    M = state.S.transpose(-1, -2)  # [B, H, V, K]
    outputs = []
    for t in range(T):
        grad = torch.zeros_like(M)  # [B, H, V, K]
        for i in range(t, t + window):  # the window t - c + 1 .. t, in positions of the extended sequence
            residual = torch.einsum("bhvk,bhk->bhv", M, ks[:, i]) - vs[:, i]  # [B, H, V], M_{t-1} k_i - v_i
            grad = grad + gammas[:, i][..., None, None] * residual.unsqueeze(-1) * ks[:, i].unsqueeze(-2)
        M = torch.exp(g[:, t])[..., None, None] * M - beta[:, t][..., None, None] * grad  # eq. (68)
        outputs.append(torch.einsum("bhvk,bhk->bhv", M, q[:, t]))
    o = torch.stack(outputs, dim=1) if outputs else v.new_zeros(B, 0, H, V)  # [B, T, H, V]
    return o, OmegaState(M.transpose(-1, -2), *final_window(ks, vs, gammas, live, window))
