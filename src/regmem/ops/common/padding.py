"""Padding: how a padded batch reaches a memory, in one place for every mixer (regmem.layers) and the CMS
(regmem.nested, which sits below the layers and imports ops, so this module lives here).

A mixer takes `attention_mask` [B, T] (1 = token, 0 = padding, on the left or the right of a row) and promises that
padding changes no other token's output and that a padded prefill followed by one-token steps equals the unpadded
run (docs/architecture.md, "The mixer contract"). Every memory keeps that promise by one of two mechanisms, each a
named function here (mask: [B, T] bool, True on real tokens):

1. Neutral tokens: `zero_padding(x, mask)`. A memory whose update at a token is gated by that token's own inputs
   gets, at a padded token, the neutral value 0 of each of them: a zero key or step size writes nothing, a zero log
   retention (retention 1) keeps the whole state, a zero query adds nothing to a state that sums queries (HLA's
   C = sum q v^T) and reads 0, and a zero input adds nothing to a short convolution's window. A padded token
   anywhere in the row then changes nothing, with no data moved, no index arithmetic and no host read. Used by
   every memory mixer for its input, and for keys, gates and step sizes by linear attention, GLA, RetNet, the delta
   rules, DeltaProduct, Titans' linear memory, MesaNet, Mamba-1/2 (step 0) and HLA / AHLA (whose per-head decay
   goes to the op per token, so a padded token can get retention 1). The ops' own `cu_seqlens` packing pads with
   the same neutral zeros (varlen.py).
2. Real tokens first: `real_first_order(mask)`, then `permute_time` and `restore_time`. A memory that counts
   positions from a row's first token (TTT's inner mini-batches, the CMS's chunks) or that cannot be told to skip
   a token (torch.nn.LSTM) runs on rows whose real tokens come first, in order: left padding becomes right
   padding, which the memory skips after its last real token (`ttt(token_mask=...)`, the CMS's token weights,
   pack_padded_sequence's lengths), and the outputs go back to their positions. One gather each way, no host read.
   Used by the deep memories (layers/deep_memory.py), self-modifying Titans (layers/self_modifying.py), the CMS
   (nested/cms.py) and the LSTM (layers/lstm.py).

The short convolutions' decode caches end at each row's last real token, `real_end(mask)` (layers/conv.py).
The softmax-attention family masks padded keys instead (a padded key gets no weight): the ops' `key_mask`, and for
the `attn` and `fox` mixers, which end in SDPA, the same `allowed_pairs` mask (regmem/ops/nonparametric/
similarity.py).
"""

from __future__ import annotations

import torch


def zero_padding(x: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
    """x: [B, T, ...] with 0 at the padded tokens (mask: [B, T] bool, False there); a mask of None returns x."""
    if mask is None:
        return x
    return x.masked_fill(~mask.view(*mask.shape, *([1] * (x.ndim - 2))), 0.0)


def real_first_order(mask: torch.Tensor) -> torch.Tensor:
    """mask: [B, T] bool -> order: [B, T] int64, each row's time positions with its real tokens first, in order,
    then its padded ones: a left-padded row is rotated to right padding, a right-padded row stays as it is."""
    B, T = mask.shape
    positions = torch.arange(T, device=mask.device).expand(B, T)  # [B, T]
    return torch.where(mask, positions, positions + T).argsort(dim=1)  # the keys are distinct: a stable order


def permute_time(x: torch.Tensor | None, order: torch.Tensor) -> torch.Tensor | None:
    """x: [B, T, ...] -> out[b, t] = x[b, order[b, t]] (order from `real_first_order`); None passes through."""
    if x is None:
        return None
    return x.gather(1, _along_time(order, x))


def restore_time(y: torch.Tensor, order: torch.Tensor) -> torch.Tensor:
    """The inverse of `permute_time`: y: [B, T, ...] -> out[b, order[b, t]] = y[b, t]."""
    return torch.zeros_like(y).scatter(1, _along_time(order, y), y)


def real_end(mask: torch.Tensor) -> torch.Tensor:
    """mask: [B, T] bool -> [B] int64: one past each row's last real token (0 for a row without one)."""
    T = mask.shape[1]
    return (mask * torch.arange(1, T + 1, device=mask.device)).amax(1)


def _along_time(order: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """order [B, T] broadcast to x's shape [B, T, ...], the index of a gather or scatter along dim 1."""
    return order.view(*order.shape, *([1] * (x.ndim - 2))).expand_as(x)
