"""Recurrent form of DeltaFormer: one token at a time against the growing key-u cache (the decode step).

arXiv:2505.19488, eqs. (41)-(42) (eqs. 94-95 for the softmax kernels, eq. 111 for G erase vectors per head):

    u_t = alpha_t v_t - beta_t sum_{i < t} A[t, i] u_i      A[t, i] = sum_j a_j kappa_1(w_t^j, k_i)
    o_t = sum_{i <= t} kappa_2(q_t, k_i) u_i

Each step costs O(S (K + V)) in the number S of pairs before it (Sec. 2.2.1 / App. D.3: the u of a token depends on
every earlier u, and the exp kernel has no finite state, so the cache is the memory).

Memory under autograd: a step reads the whole history, so gathering it into one tensor per step would keep O(T^2 V)
floats for the backward pass. Instead the scores are elementwise products with views of one key tensor, and the u
are kept in blocks of `HISTORY_BLOCK` tokens, each concatenated once: a step saves its score row and one partial
block, O(T^2 / 2 + T HISTORY_BLOCK V) floats per head over the sequence.

Core: as reference.py. Legend: B batch, T new tokens, S cached pairs, H heads, R = Hq / H query heads per key/value
head, G erase vectors, K key dim, V value dim, L pairs seen.
"""

from __future__ import annotations

import torch
from einops import rearrange

from regmem.ops.common import score_kernel
from regmem.ops.deltaformer.similarities import erase_allowed, read_allowed
from regmem.ops.deltaformer.state import KUState, cached_pairs

HISTORY_BLOCK = 64  # u per stored block of the history


class _History:
    """The u seen so far, [B, H, L, V] in blocks: full blocks (each one tensor) and the current partial block."""

    def __init__(self, u_cache: torch.Tensor | None):
        self.blocks = [] if u_cache is None else [u_cache]  # [B, H, n, V] each
        self.pending: list[torch.Tensor] = []  # [B, H, 1, V] each, fewer than HISTORY_BLOCK

    def append(self, u_t: torch.Tensor) -> None:
        self.pending.append(u_t)
        if len(self.pending) == HISTORY_BLOCK:
            self.blocks.append(torch.cat(self.pending, dim=2))
            self.pending = []

    def weighted_sum(self, P: torch.Tensor) -> torch.Tensor:
        """P [B, H, X, L] (L = every u so far) -> sum_i P[..., i] u_i: [B, H, X, V]."""
        pieces = [*self.blocks, torch.cat(self.pending, dim=2)] if self.pending else self.blocks
        total, offset = None, 0
        for block in pieces:
            term = P[..., offset:offset + block.shape[2]] @ block
            total = term if total is None else total + term
            offset += block.shape[2]
        return total

    def all(self) -> torch.Tensor:
        return torch.cat([*self.blocks, *self.pending], dim=2)


def deltaformer_recurrent_core(q, k, v, w, alpha, beta, *, initial_state, erase_weights, erase_kernel, read_kernel,
                               scale, decimals, key_mask):
    """Token by token: erase against the pairs before t, append u_t, read with q_t."""
    k_all, u_cache, S = cached_pairs(k, initial_state)
    B, T, Hq, _ = q.shape
    H, V = k.shape[2], v.shape[-1]
    kh = rearrange(k_all, "b l h k -> b h l k")  # [B, H, S + T, K]
    qg = rearrange(q, "b t (h r) k -> b t h r k", h=H)  # [B, T, H, R, K]
    history = _History(None if u_cache is None else rearrange(u_cache, "b s h v -> b h s v"))
    outputs = []
    for t in range(T):
        row = S + t
        u_t = alpha[:, t, :, None] * v[:, t]  # [B, H, V]
        if row:
            scores = (kh[:, :, None, :row] * w[:, t, :, :, None]).sum(-1) * scale  # [B, H, G, row]
            kappa = score_kernel(erase_kernel, scores, erase_allowed(row, 1, row, key_mask, q.device)[:, None],
                                 decimals=decimals)  # [B, H, G, row]
            A = torch.einsum("bhgl,hg->bhl", kappa, erase_weights).unsqueeze(2)  # [B, H, 1, row]
            u_t = u_t - beta[:, t, :, None] * history.weighted_sum(A).squeeze(2)
        history.append(u_t.unsqueeze(2))
        scores = (kh[:, :, None, :row + 1] * qg[:, t, :, :, None]).sum(-1) * scale  # [B, H, R, row + 1]
        P = score_kernel(read_kernel, scores, read_allowed(row, 1, row + 1, key_mask, q.device)[:, None],
                         decimals=decimals)  # [B, H, R, row + 1]
        outputs.append(rearrange(history.weighted_sum(P), "b h r v -> b (h r) v"))  # [B, Hq, V]
    o = torch.stack(outputs, dim=1) if outputs else v.new_zeros(B, 0, Hq, V)
    u_all = history.all() if history.blocks or history.pending else v.new_zeros(B, H, 0, V)
    return o, KUState(k_all, rearrange(u_all, "b h l v -> b l h v"))
