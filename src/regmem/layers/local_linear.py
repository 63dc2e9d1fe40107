"""Local linear attention as a token mixer: softmax attention plus a local regression correction toward the query.

The layer of *Test-time regression* (Wang, Shi, Fox; arXiv:2501.12352, Sec. 4 Vignette 4, eqs. 52-54): each
query fits a linear function of the keys around itself to the cached pairs, weighted by the softmax weights,
and answers with its intercept
    o_t = v_bar + C_vk (C_kk + ridge I)^{-1} (q_t - k_bar)        (eq. 54; `local_linear_attn`)
then y = W_o RMSNorm(o) with one RMSNorm per head. Everything else is `SoftmaxAttention`: q/k/v projections,
an optional short conv, grouped-query heads, the KV cache with its key mask, and padding through that mask
(padded pairs leave every regression; a padded query regresses on itself alone: no empty fits).

QK-norm (default): q, k <- sqrt(tau) unit(q), sqrt(tau) unit(k) with a learnable temperature tau (initialised at
sqrt(head_dim)) and scale 1 in the op. The logits are tau cos(q, k), QK-norm attention at temperature tau (the
Gaussian-kernel bandwidth 2 tau, eq. 51), and the regression, which is in these scaled keys, is the one in the
unit key space with ridge / tau: scaling keys and query by c = sqrt(tau) scales C_kk by c^2, C_vk and q - k_bar
by c, so o = v_bar + C_vk (C_kk + ridge / tau I)^{-1} (q - k_bar) in unit-space quantities.

Rotary positions are off by default: the regression fits v as a linear function of the keys themselves, and
rotating keys by their position would make that function depend on where each pair sits, not only on the
relative position that q.k sees.
"""

from __future__ import annotations

import torch
from torch import nn

from regmem.layers.attention import SoftmaxAttention
from regmem.layers.base import repeat_heads
from regmem.layers.norm import l2_normalize
from regmem.ops.nonparametric import KVState, local_linear_attn


class LocalLinearAttention(SoftmaxAttention):
    recipe_name = "local_linear_attn"

    def __init__(
        self,
        d_model: int,
        n_heads: int,
        head_dim: int | None = None,  # None means d_model // n_heads
        n_kv_heads: int | None = None,  # grouped-query attention; None means n_heads
        rotary: bool = False,  # off: the regression lives in key space (module docstring)
        rope_base: float = 10000.0,
        qk_norm: bool = True,  # sqrt(tau) unit(q), sqrt(tau) unit(k), learnable tau initialised at sqrt(head_dim)
        short_conv: int = 0,  # kernel of a causal depthwise conv on q, k, v; 0 = off
        ridge: float = 1e-2,  # added to C_kk, the slope block (weights normalised to sum 1)
        chunk_size: int = 64,  # queries per block of the chunk form
        norm_eps: float = 1e-5,  # of the per-head output RMSNorm
    ):
        super().__init__(d_model, n_heads, head_dim, n_kv_heads, rotary, rope_base, qk_norm, short_conv)
        self.ridge, self.chunk_size = ridge, chunk_size
        self.o_norm = nn.RMSNorm(self.head_dim, eps=norm_eps)

    def _attend(self, q, k, v, key_mask, offset, plain):
        """q: [B, T, H, D]; k, v: [B, S + T, H_kv, D], the cache (offset = S) then the new pairs; key_mask:
        [B, S + T]. Returns the per-head RMS-normalised regression outputs [B, T, H, D]."""
        scale = None  # the op's default, 1 / sqrt(D)
        if self.log_temperature is not None:  # logits tau cos(q, k); the fit has ridge / tau in unit space
            root_tau = torch.exp(0.5 * self.log_temperature)
            q, k, scale = l2_normalize(q) * root_tau, l2_normalize(k) * root_tau, 1.0
        k, v = repeat_heads(k, self.n_heads), repeat_heads(v, self.n_heads)  # [B, S + T, H, D]
        cache = KVState(k[:, :offset], v[:, :offset]) if offset else None  # [B, S, H, D] each
        # Decoding one token against a cache uses the recurrent form by name; a sequence or a prefill the chunk form.
        mode = "recurrent" if offset and q.shape[1] == 1 else "chunk"
        o, _ = local_linear_attn(
            q, k[:, offset:], v[:, offset:], scale=scale, ridge=self.ridge, initial_state=cache, mode=mode,
            chunk_size=self.chunk_size, key_mask=None if plain else key_mask,
        )  # [B, T, H, D]
        return self.o_norm(o)
