"""The skeleton shared by linear-memory mixers: projections, short convolutions, one op call, output norm.

    q, k, v = conv(W_q x), conv(W_k x), conv(W_v x)        short convs build the keys (TTR Sec. 6)
    o = memory op (q, k, v, gates)                           chunk form for a sequence, recurrent for one token
    y = W_o norm(o) [⊙ silu(W_g x)]                          per-head RMSNorm, optional output gate

Padding (regmem/ops/common/padding.py, "neutral tokens"): padded tokens are zeroed before the projections (so
they add nothing to conv windows), and each subclass zeroes their keys, log-gates or step sizes (so they leave the
memory unchanged): outputs of real tokens do not depend on padding. The conv caches end at each row's last real
token (conv.py), so a left- or right-padded prefill followed by one-token steps equals the unpadded run.
"""

from __future__ import annotations

from typing import Literal, NamedTuple, get_args

import torch
from torch import nn

from regmem.layers.base import Mixer, check_mixer_input, repeat_heads, split_heads
from regmem.layers.conv import ShortConvolution
from regmem.layers.norm import GatedRMSNorm, l2_normalize
from regmem.ops.common import zero_padding

ShortConvOn = Literal["q", "k", "v", "qk", "qv", "kv", "qkv"]  # the projections with a short conv


class MemoryState(NamedTuple):
    """Decoding state of a memory mixer: conv caches [B, D, W - 1] for q, k, v (None without convs, or for a
    projection without one) and the op state."""

    conv: tuple[torch.Tensor, ...] | None
    memory: torch.Tensor


class MemoryMixer(Mixer):
    def __init__(
        self,
        d_model: int,
        n_heads: int,
        head_dim: int | None = None,  # key dim per head; None means d_model // n_heads
        expand_v: float = 1.0,  # value dim per head = expand_v * head_dim
        n_kv_heads: int | None = None,  # grouped heads for k and v; None means n_heads
        short_conv: int = 4,  # kernel of the causal depthwise conv on q, k, v; 0 = off
        short_conv_on: ShortConvOn = "qkv",  # which of q, k, v get the conv; "k" is TTR Sec. 6's key-only conv
        qk_norm: bool = False,  # L2-normalise q and k per head
        output_gate: bool = True,  # y = norm(o) ⊙ silu(W_g x)
        norm_eps: float = 1e-5,
        chunk_size: int = 64,  # chunk length of the training form
        short_conv_bias: bool = False,  # a bias in each short conv (fla's conv_bias=True; regmem.interop sets it)
    ):
        super().__init__()
        for name, value, least in (("chunk_size", chunk_size, 1), ("short_conv", short_conv, 0)):  # 0: no conv
            if isinstance(value, bool) or not isinstance(value, int) or value < least:
                raise ValueError(f"{name} must be an int >= {least}, got {value!r}")
        n_kv_heads = n_kv_heads or n_heads
        if n_heads % n_kv_heads:
            raise ValueError(f"n_heads ({n_heads}) must be a multiple of n_kv_heads ({n_kv_heads})")
        self.d_model, self.n_heads, self.n_kv_heads = d_model, n_heads, n_kv_heads
        self.key_dim = head_dim or d_model // n_heads
        self.value_dim = int(self.key_dim * expand_v)
        if short_conv_on not in get_args(ShortConvOn):
            raise ValueError(f"short_conv_on must be one of {get_args(ShortConvOn)}, got {short_conv_on!r}")
        self.qk_norm, self.chunk_size, self.short_conv, self.norm_eps = qk_norm, chunk_size, short_conv, norm_eps
        dims = (n_heads * self.key_dim, n_kv_heads * self.key_dim, n_kv_heads * self.value_dim)
        self.q_proj, self.k_proj, self.v_proj = (nn.Linear(d_model, d, bias=False) for d in dims)
        self.convs = None
        if short_conv:  # an identity in place of the conv of a projection that has none
            self.convs = nn.ModuleList(
                ShortConvolution(d, short_conv, bias=short_conv_bias) if name in short_conv_on else nn.Identity()
                for name, d in zip("qkv", dims, strict=True)
            )
        self.g_proj = nn.Linear(d_model, n_heads * self.value_dim, bias=False) if output_gate else None
        self.o_norm = GatedRMSNorm(self.value_dim, norm_eps) if output_gate else nn.RMSNorm(self.value_dim, norm_eps)
        self.o_proj = nn.Linear(n_heads * self.value_dim, d_model, bias=False)

    def forward(self, x, state=None, *, attention_mask=None):
        check_mixer_input(x, attention_mask, self.d_model)
        mask = attention_mask.bool() if attention_mask is not None else None  # [B, T]
        x = zero_padding(x, mask)
        conv_cache, memory = state if state is not None else (None, None)
        q, k, v, conv_cache = self._project(x, conv_cache, mask)  # [B, T, H, K], [B, T, H, K], [B, T, H, V]
        # Decoding one token with a state uses the recurrent form by name; anything longer uses the chunk form.
        mode = "recurrent" if state is not None and x.shape[1] == 1 else "chunk"
        o, memory = self.memory(x, q, k, v, mask, memory, mode)  # [B, T, H, V]
        return self._output(o, x), MemoryState(conv_cache, memory)

    def memory(self, x, q, k, v, mask, memory, mode):
        """Runs the memory op; returns o: [B, T, H, V] and the op state. Subclasses define it."""
        raise NotImplementedError

    def _project(self, x, conv_cache, mask=None):
        q, k, v = self.q_proj(x), self.k_proj(x), self.v_proj(x)
        if self.convs is not None:
            caches = conv_cache if conv_cache is not None else (None, None, None)
            (q, cq), (k, ck), (v, cv) = (
                conv(t, c, mask) if isinstance(conv, ShortConvolution) else (t, None)
                for conv, t, c in zip(self.convs, (q, k, v), caches, strict=True)
            )
            conv_cache = (cq, ck, cv)
        q = split_heads(q, self.key_dim)  # [B, T, H, K]
        k = repeat_heads(split_heads(k, self.key_dim), self.n_heads)  # [B, T, H, K]
        v = repeat_heads(split_heads(v, self.value_dim), self.n_heads)  # [B, T, H, V]
        if self.qk_norm:
            q, k = l2_normalize(q), l2_normalize(k)
        return q, k, v, conv_cache

    def _output(self, o, x):
        if self.g_proj is not None:
            o = self.o_norm(o, split_heads(self.g_proj(x), self.value_dim))
        else:
            o = self.o_norm(o)
        return self.o_proj(o.flatten(-2))  # [B, T, d_model]

    def memory_floats(self) -> int:
        """Floats of the op state per sequence (subclasses with another state override this)."""
        return self.n_heads * self.key_dim * self.value_dim

    def state_floats(self, seq_len: int) -> int:
        conv = 0
        if self.convs is not None:
            conv = sum(c.conv.in_channels for c in self.convs if isinstance(c, ShortConvolution))
            conv *= self.short_conv - 1
        return self.memory_floats() + conv
