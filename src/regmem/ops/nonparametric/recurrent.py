"""Recurrent forms of the nonparametric memories: one query at a time against the growing cache (the decode step).

*Test-time regression* (Wang, Shi, Fox; arXiv:2501.12352), Sec. 4 Vignette 4. Every pair's weight depends on the
query, so a decode step costs O(S) (softmax, local polynomial) or more (kernel regression) in the cache length S:
  - softmax attention (eq. 50): query t against the S + t + 1 pairs it sees;
  - local linear attention (eq. 54): the chunk form's closed-form fit with one query per block;
  - local polynomial regression (eqs. 48-49): the reference's per-query fit, one query at a time;
  - kernel regression (eq. 43): the cache is factorised once (L L^T = k(K, K) + ridge I), then the Cholesky factor
    grows by one row per pair (l = L^{-1} k(K, k_new), d = sqrt(k(k_new, k_new) + ridge - l.l)), W = L^{-1} V by
    (v_new - W^T l) / d, and each query is one triangular solve against the grown factor. The state is only the
    cache, so every call refactorises it (O(S^3)); a decoder carrying L could step in O(S^2).

Every core: q: [B, T, H, K]; k: [B, T, H, K]; v: [B, T, H, V]; initial_state: KVState of S cached pairs or None.
Query t uses pairs j <= S + t (state.py). Returns o: [B, T, H, V] and the KVState of the S + T pairs.

Legend: B batch, T new tokens, S cached pairs, H heads, K key dim, V value dim.
"""

from __future__ import annotations

import torch
from einops import rearrange

from regmem.ops.common import cholesky_or_nan
from regmem.ops.nonparametric.chunk import local_linear_fit
from regmem.ops.nonparametric.reference import local_polynomial_fit
from regmem.ops.nonparametric.similarity import (
    causal_logits,
    heads_first,
    make_gram,
    ridged_gram,
    softmax_features,
)
from regmem.ops.nonparametric.state import KVState, with_cache


def softmax_recurrent_core(q, k, v, *, initial_state, scale, bandwidth, qk_norm, key_mask):
    """Token by token: query t attends to the S + t + 1 pairs it sees."""
    k, v, offset = with_cache(k, v, initial_state)
    qh, kh, vh, scale = softmax_features(q, k, v, scale=scale, bandwidth=bandwidth, qk_norm=qk_norm)
    outputs = []
    for t in range(qh.shape[2]):
        seen = offset + t + 1
        logits = causal_logits(qh[:, :, t:t + 1], kh[:, :, :seen], scale, offset + t, key_mask)  # [B, H, 1, seen]
        outputs.append(logits.softmax(dim=-1) @ vh[:, :, :seen])  # [B, H, 1, V]
    o = torch.cat(outputs, dim=2) if outputs else vh.new_zeros(*vh.shape[:2], 0, vh.shape[-1])  # [B, H, T, V]
    return rearrange(o, "b h t v -> b t h v"), KVState(k, v)


def _one_query_at_a_time(fit, q, k, v, offset, key_mask, **options):
    """fit(q_t [B, 1, H, K], k, v over the S + t + 1 pairs query t sees, offset=S + t, key_mask) for every t."""
    outputs = []
    for t in range(q.shape[1]):
        seen = offset + t + 1
        mask = None if key_mask is None else key_mask[:, :seen]
        outputs.append(fit(q[:, t:t + 1], k[:, :seen], v[:, :seen], offset=offset + t, key_mask=mask, **options))
    if not outputs:
        return v.new_zeros(q.shape[0], 0, q.shape[2], v.shape[-1])
    return torch.cat(outputs, dim=1)  # [B, T, H, V]


def local_linear_recurrent_core(q, k, v, *, initial_state, scale, bandwidth, qk_norm, ridge, key_mask):
    """Token by token: each query's closed-form fit (eq. 54) over all the pairs it sees."""
    k, v, offset = with_cache(k, v, initial_state)
    o = _one_query_at_a_time(local_linear_fit, q, k, v, offset, key_mask, scale=scale, bandwidth=bandwidth,
                             qk_norm=qk_norm, ridge=ridge, chunk_size=1)
    return o, KVState(k, v)


def local_polynomial_recurrent_core(q, k, v, *, initial_state, degree, scale, bandwidth, qk_norm, ridge, key_mask):
    """Token by token: each query's weighted least squares (eqs. 48-49) over all the pairs it sees."""
    k, v, offset = with_cache(k, v, initial_state)
    o = _one_query_at_a_time(local_polynomial_fit, q, k, v, offset, key_mask, degree=degree, scale=scale,
                             bandwidth=bandwidth, qk_norm=qk_norm, ridge=ridge)
    return o, KVState(k, v)


def kernel_recurrent_core(q, k, v, *, initial_state, kernel, scale, bandwidth, ridge):
    """Token by token: grow L (and W = L^{-1} V) by one row per pair, then answer the query."""
    k, v, offset = with_cache(k, v, initial_state)
    gram = make_gram(kernel, scale, bandwidth, q.shape[-1])
    qh, kh, vh = heads_first(q, k, v)
    B, H, T, _ = qh.shape
    L = kh.new_zeros(B, H, 0, 0)  # [B, H, p, p], the factor of the pairs so far
    W = vh.new_zeros(B, H, 0, vh.shape[-1])  # [B, H, p, V]
    if offset:
        L = cholesky_or_nan(ridged_gram(gram, kh[:, :, :offset], ridge))  # [B, H, S, S]
        W = torch.linalg.solve_triangular(L, vh[:, :, :offset], upper=False)  # [B, H, S, V]
    outputs = []
    for t in range(T):
        p = offset + t
        L, W = _append_pair(L, W, kh[:, :, :p], kh[:, :, p:p + 1], vh[:, :, p:p + 1], gram, ridge)
        u = torch.linalg.solve_triangular(L, gram(kh[:, :, :p + 1], qh[:, :, t:t + 1]), upper=False)  # [B, H, p+1, 1]
        outputs.append(u.transpose(-1, -2) @ W)  # [B, H, 1, V]
    o = torch.cat(outputs, dim=2) if outputs else vh.new_zeros(B, H, 0, vh.shape[-1])  # [B, H, T, V]
    return rearrange(o, "b h t v -> b t h v"), KVState(k, v)


def _append_pair(L, W, k_old, k_new, v_new, gram, ridge):
    """One Cholesky row: L': [B, H, p+1, p+1] = [[L, 0], [l^T, d]] and W' = [W; (v_new - l^T W) / d].

    L: [B, H, p, p]; W: [B, H, p, V]; k_old: [B, H, p, K]; k_new: [B, H, 1, K]; v_new: [B, H, 1, V]."""
    diag = gram(k_new, k_new) + ridge  # [B, H, 1, 1]
    if L.shape[-1] == 0:
        d = diag.sqrt()  # [B, H, 1, 1]
        return d, v_new / d
    l_col = torch.linalg.solve_triangular(L, gram(k_old, k_new), upper=False)  # [B, H, p, 1]
    l_row = l_col.transpose(-1, -2)  # [B, H, 1, p]
    d = (diag - l_row @ l_col).sqrt()  # [B, H, 1, 1]
    top = torch.cat([L, torch.zeros_like(l_col)], dim=-1)  # [B, H, p, p+1]
    L = torch.cat([top, torch.cat([l_row, d], dim=-1)], dim=-2)  # [B, H, p+1, p+1]
    W = torch.cat([W, (v_new - l_row @ W) / d], dim=-2)  # [B, H, p+1, V]
    return L, W
