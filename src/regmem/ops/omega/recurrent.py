"""Recurrent form of the Omega rule: one update of S per token and a rolling cache of the last window - 1 tokens,
constant memory in T (what decoding uses).

Implements the Omega rule (Atlas, arXiv:2505.23735, Sec. 3; *Nested Learning*, arXiv:2512.24695, eq. (68)) in
regmem's layout S = M^T, for the window W_t = {t - c + 1, ..., t}:
    S_t = exp(g_t) S_{t-1} + beta_t sum_{i in W_t} gamma_i k_i (v_i - S_{t-1}^T k_i)^T,      o_t = S_t^T q_t.
A token that is not live (varlen padding, state.py) leaves S and the cache unchanged.

Legend: B batch, T time, H heads, K key dim, V value dim, c window.
"""

from __future__ import annotations

import torch

from regmem.ops.omega.state import OmegaState, empty_state


def omega_recurrent_core(q, k, v, g, beta, gamma, live, *, initial_state, window):
    """q, k: [B, T, H, K] (q already scaled); v: [B, T, H, V]; g, beta, gamma: [B, T, H]; live: [B, T, H] or None;
    initial_state: OmegaState or None. Returns o: [B, T, H, V] and the OmegaState after the last token."""
    B, T, H, K = q.shape
    V = v.shape[-1]
    S, ck, cv, cg = initial_state if initial_state is not None else empty_state(B, H, K, V, window, q)
    lives = live.unbind(dim=1) if live is not None else [None] * T
    outputs = []
    steps = zip(q.unbind(1), k.unbind(1), v.unbind(1), g.unbind(1), beta.unbind(1), gamma.unbind(1), lives,
                strict=True)
    for q_t, k_t, v_t, g_t, beta_t, gamma_t, live_t in steps:
        wk = torch.cat([ck, k_t.unsqueeze(2)], dim=2)  # [B, H, c, K], the window, oldest first
        wv = torch.cat([cv, v_t.unsqueeze(2)], dim=2)  # [B, H, c, V]
        wg = torch.cat([cg, gamma_t.unsqueeze(2)], dim=2)  # [B, H, c]
        errors = (wv - wk @ S) * (beta_t.unsqueeze(-1) * wg).unsqueeze(-1)  # [B, H, c, V], beta_t gamma_i e_i
        S = torch.exp(g_t)[..., None, None] * S + wk.transpose(-1, -2) @ errors  # [B, H, K, V]
        outputs.append(torch.einsum("bhk,bhkv->bhv", q_t, S))
        if live_t is None:
            ck, cv, cg = wk[:, :, 1:], wv[:, :, 1:], wg[:, :, 1:]
        else:  # a padded token does not enter the window
            keep = live_t > 0  # [B, H]
            ck = torch.where(keep[..., None, None], wk[:, :, 1:], ck)
            cv = torch.where(keep[..., None, None], wv[:, :, 1:], cv)
            cg = torch.where(keep[..., None], wg[:, :, 1:], cg)
    o = torch.stack(outputs, dim=1) if outputs else v.new_zeros(B, 0, H, V)  # [B, T, H, V]
    return o, OmegaState(S, ck, cv, cg)
