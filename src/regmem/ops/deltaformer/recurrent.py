"""Recurrent form of DeltaFormer: one token at a time against the growing key-u cache (the decode step).

arXiv:2505.19488, eqs. (41)-(42) (eqs. 94-95 for the softmax kernels, eq. 111 for G erase vectors per head):

    u_t = alpha_t v_t - beta_t sum_{i < t} A[t, i] u_i      A[t, i] = sum_j a_j kappa_1(w_t^j, k_i)
    o_t = sum_{i <= t} kappa_2(q_t, k_i) u_i

Each step costs O(S (K + V)) in the number S of pairs before it (Sec. 2.2.1 / App. D.3: the u of a token depends on
every earlier u, and the exp kernel has no finite state, so the cache is the memory).

Core: as reference.py. Legend: B batch, T new tokens, S cached pairs, H heads, Hq query heads, G erase vectors,
K key dim, V value dim.
"""

from __future__ import annotations

import torch
from einops import rearrange

from regmem.ops.deltaformer.reference import read
from regmem.ops.deltaformer.scores import erase_allowed, erase_matrix
from regmem.ops.deltaformer.state import KUState, cached_pairs


def deltaformer_recurrent_core(q, k, v, w, alpha, beta, *, initial_state, erase_weights, erase_kernel, read_kernel,
                               scale, decimals, key_mask):
    """Token by token: erase against the pairs before t, append (k_t, u_t), read with q_t."""
    k_all, u_cache, S = cached_pairs(k, initial_state)
    kh = rearrange(k_all, "b l h k -> b h l k")  # [B, H, S + T, K]
    us = [] if u_cache is None else [rearrange(u_cache, "b s h v -> b h s v")]  # pieces of [B, H, *, V]
    outputs = []
    for t in range(q.shape[1]):
        row = S + t
        seen = torch.cat(us, dim=2) if us else v.new_zeros(v.shape[0], v.shape[2], 0, v.shape[-1])  # [B, H, row, V]
        A = erase_matrix(rearrange(w[:, t:t + 1], "b t h g k -> b h g t k"), kh[:, :, :row],
                         erase_allowed(row, 1, row, key_mask, q.device), weights=erase_weights, kernel=erase_kernel,
                         scale=scale, decimals=decimals)  # [B, H, 1, row]
        u_t = alpha[:, t, :, None, None] * rearrange(v[:, t], "b h v -> b h 1 v") - beta[:, t, :, None, None] * (
            A @ seen)  # [B, H, 1, V]
        us.append(u_t)
        u_all = rearrange(torch.cat(us, dim=2), "b h l v -> b l h v")  # [B, row + 1, H, V]
        outputs.append(read(q[:, t:t + 1], k_all[:, :row + 1], u_all, row, key_mask, kernel=read_kernel, scale=scale,
                            decimals=decimals))  # [B, 1, Hq, V]
    u_all = rearrange(torch.cat(us, dim=2), "b h l v -> b l h v") if us else v.new_zeros(*v.shape[:1], 0,
                                                                                          *v.shape[2:])
    o = torch.cat(outputs, dim=1) if outputs else v.new_zeros(q.shape[0], 0, q.shape[2], v.shape[-1])
    return o, KUState(k_all, u_all)
