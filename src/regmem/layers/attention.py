"""Softmax attention on torch's scaled_dot_product_attention, with a KV cache, rotary positions and QK-norm.

It is one of the two mixers whose forward ends in SDPA rather than in a regmem op (the other is FoX, fox.py): the
`softmax_attn` op computes the same function (its chunk form is SDPA, and
`tests/layers/test_attention_is_the_op.py` checks the layer against the op), but its contract would cost this
layer what it exists for. The op computes bf16/fp16 inputs in float32, which takes SDPA's half-precision kernels
away on a GPU, and its cache `KVState(k, v)` holds one key and value per query head and is concatenated inside
the op, so a decoding step would copy the whole cache twice and could not keep grouped (GQA) heads (measured:
1.2 ms against 6 ms per token at 2048 cached tokens, d_model 512, 8 heads, this project's 2-core CPU).

In the TTR view (arXiv:2501.12352, eq. 50) it is the Nadaraya-Watson (local constant) regressor with weights
s(k_i, q_t) = exp(k_i.q_t / sqrt(K)); with QK-norm and a learnable temperature tau it is a Gaussian-kernel
regressor of bandwidth 2 tau (eq. 51), so the temperature is the kernel bandwidth.

Padding: padded keys stay in the KV cache with mask False, and rotary positions count the real tokens of each
row, so a left- or right-padded prefill followed by one-token steps equals the unpadded run.

`head_norm=True` applies a per-head RMSNorm to the attention output before W_o. The softmax denominator is a
positive scalar per (query, head) and RMSNorm is scale invariant up to its eps, so this equals un-normalised exp
attention followed by the same norm (Zhong et al., arXiv:2505.19488, Sec. 2.1, eq. 18 and its normalisation
paragraph): the softmax arm of that paper's multi-head experiment (Sec. 3.1, Fig. 2), run on the SDPA kernel.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import torch
import torch.nn.functional as F
from torch import nn

from regmem.layers.base import Mixer, check_mixer_input, repeat_heads, split_heads
from regmem.layers.conv import ShortConvolution
from regmem.layers.norm import l2_normalize
from regmem.layers.rotary import RotaryEmbedding
from regmem.ops.nonparametric.similarity import allowed_pairs


class KVCache(NamedTuple):
    """k, v: [B, T_past, H_kv, D] after rotary; mask: [B, T_past] bool, False at padded tokens."""

    k: torch.Tensor
    v: torch.Tensor
    mask: torch.Tensor


class AttentionState(NamedTuple):
    conv: tuple[torch.Tensor, ...] | None
    kv: KVCache


class SoftmaxAttention(Mixer):
    recipe_name = "softmax_attn"

    def __init__(
        self,
        d_model: int,
        n_heads: int,
        head_dim: int | None = None,  # None means d_model // n_heads
        n_kv_heads: int | None = None,  # grouped-query attention; None means n_heads
        rotary: bool = True,
        rope_base: float = 10000.0,
        qk_norm: bool = False,  # unit-norm q, k with a learnable temperature (initialised at sqrt(head_dim))
        short_conv: int = 0,  # kernel of a causal depthwise conv on q, k, v; 0 = off
        head_norm: bool = False,  # per-head RMSNorm on the attention output (module docstring)
        norm_eps: float = 1e-5,  # eps of that norm
    ):
        super().__init__()
        n_kv_heads = n_kv_heads or n_heads
        if n_heads % n_kv_heads:
            raise ValueError(f"n_heads ({n_heads}) must be a multiple of n_kv_heads ({n_kv_heads})")
        self.d_model, self.n_heads, self.n_kv_heads = d_model, n_heads, n_kv_heads
        self.head_dim, self.short_conv = head_dim or d_model // n_heads, short_conv
        dims = (n_heads * self.head_dim, n_kv_heads * self.head_dim, n_kv_heads * self.head_dim)
        self.q_proj, self.k_proj, self.v_proj = (nn.Linear(d_model, d, bias=False) for d in dims)
        self.convs = nn.ModuleList(ShortConvolution(d, short_conv) for d in dims) if short_conv else None
        self.rotary = RotaryEmbedding(self.head_dim, rope_base) if rotary else None
        self.log_temperature = nn.Parameter(torch.tensor(0.5 * math.log(self.head_dim))) if qk_norm else None
        self.head_norm = nn.RMSNorm(self.head_dim, eps=norm_eps) if head_norm else None
        self.o_proj = nn.Linear(n_heads * self.head_dim, d_model, bias=False)

    def forward(self, x, state=None, *, attention_mask=None):
        q, k, v, conv_cache, past, given_mask, mask = self._prologue(x, state, attention_mask)
        offset = past.k.shape[1] if past is not None else 0
        if past is not None:
            k, v, mask = torch.cat([past.k, k], 1), torch.cat([past.v, v], 1), torch.cat([past.mask, mask], 1)
        o = self._attend(q, k, v, mask, offset, plain=past is None and given_mask is None)
        return self._output(o), AttentionState(conv_cache, KVCache(k, v, mask))

    def _prologue(self, x, state, attention_mask):
        """The checked input's q, k, v (`_project`), the new conv caches, the past KV cache (or None), the given mask
        as bool (or None) and the mask of this call's tokens ([B, T], all True without one)."""
        check_mixer_input(x, attention_mask, self.d_model)
        B, T = x.shape[:2]
        conv_cache, past = state if state is not None else (None, None)
        given_mask = attention_mask.bool() if attention_mask is not None else None
        q, k, v, conv_cache = self._project(x, conv_cache, given_mask, past)
        mask = given_mask if given_mask is not None else torch.ones(B, T, dtype=torch.bool, device=x.device)
        return q, k, v, conv_cache, past, given_mask, mask

    def _project(self, x, conv_cache, given_mask, past):
        """q: [B, T, H, D] and k, v: [B, T, H_kv, D] after the convs and rotary; the new conv caches."""
        q, k, v = self.q_proj(x), self.k_proj(x), self.v_proj(x)
        if self.convs is not None:
            if given_mask is not None:
                q, k, v = (t.masked_fill(~given_mask.unsqueeze(-1), 0.0) for t in (q, k, v))
            caches = conv_cache if conv_cache is not None else (None, None, None)
            (q, cq), (k, ck), (v, cv) = (
                conv(t, c, given_mask) for conv, t, c in zip(self.convs, (q, k, v), caches, strict=True)
            )
            conv_cache = (cq, ck, cv)
        q, k, v = split_heads(q, self.head_dim), split_heads(k, self.head_dim), split_heads(v, self.head_dim)
        if self.rotary is not None:
            positions = self._positions(x.shape[1], given_mask, past, x.device)
            q, k = self.rotary(q, positions), self.rotary(k, positions)
        return q, k, v, conv_cache

    def _output(self, o):
        """o: [B, T, H, D] -> [B, T, d_model], through the per-head norm when there is one."""
        if self.head_norm is not None:
            o = self.head_norm(o)
        return self.o_proj(o.flatten(-2))

    @staticmethod
    def _positions(T, mask, past, device):
        """Rotary positions: each token's index among its row's real tokens, so padding (left or right) moves
        no real token and decoding continues where the real tokens ended. Returns [T] or [B, T]."""
        positions = torch.arange(T, device=device) if mask is None else (mask.cumsum(1) - 1).clamp(min=0)
        if past is not None:  # the real tokens already cached, per row
            positions = past.mask.sum(1, keepdim=True) + positions  # [B, T]
        return positions

    def _scaled(self, q, k):
        """q, k and the logit scale: with QK-norm, unit q, k with the learnable temperature on q in place of
        1 / sqrt(D); else SDPA's 1 / sqrt(D) (scale None)."""
        if self.log_temperature is None:
            return q, k, None
        return l2_normalize(q) * torch.exp(self.log_temperature), l2_normalize(k), 1.0

    def _heads_first(self, q, k, v):
        """q [B, T, H, D], k, v [B, S, H_kv, D] as SDPA reads them: [B, H, ., D], QK-norm applied, k and v repeated
        to every query head; and the scale (None: SDPA's 1 / sqrt(D))."""
        q, k, scale = self._scaled(q, k)
        q, k, v = (t.transpose(1, 2) for t in (q, repeat_heads(k, self.n_heads), repeat_heads(v, self.n_heads)))
        return q, k, v, scale

    def _attend(self, q, k, v, key_mask, offset, plain, log_decay=None):
        """q: [B, T, H, D]; k, v: [B, S, H_kv, D] with S = offset + T (the cache, then the new pairs); key_mask:
        [B, S]; log_decay: None or an additive bias on the scores [B, H, T, S] (ForgettingAttention's log forget
        gates). torch's SDPA on the grouped heads (module docstring: why not the op). Returns [B, T, H, D]."""
        q, k, v, scale = self._heads_first(q, k, v)
        if plain and log_decay is None:  # no cache, no padding, no bias: the causal kernel
            o = F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=scale)
        else:
            allowed = allowed_pairs(q.shape[2], k.shape[2], offset, key_mask, device=q.device)  # [B, 1, T, S]
            bias = allowed  # SDPA adds a float mask to the scores; a bool one keeps the True entries
            if log_decay is not None:
                bias = log_decay.to(q.dtype).masked_fill(~allowed, float("-inf"))  # [B, H, T, S]
            o = F.scaled_dot_product_attention(q, k, v, attn_mask=bias, scale=scale)
        return o.transpose(1, 2)  # [B, T, H, D]

    def levels(self) -> list[dict]:
        """Softmax attention is a non-parametric memory that keeps every pair (Nested Learning, Sec. 5, eq. 62):
        its KV cache grows at every token."""
        return [{"tensors": "KV cache (every key and value)", "period": 1,
                 "objective": "non-parametric: Nadaraya-Watson regression at each query"}]

    def state_floats(self, seq_len: int) -> int:
        conv = sum(c.conv.in_channels for c in self.convs) * (self.short_conv - 1) if self.convs is not None else 0
        return 2 * self.n_kv_heads * self.head_dim * seq_len + conv
