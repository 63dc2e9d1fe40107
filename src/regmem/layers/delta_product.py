"""DeltaProduct (Siems et al. 2025, arXiv:2502.10297; TTR Vignette 3): n_h delta steps per token with their own keys,
values and step sizes, i.e. a product of n_h generalised Householder transitions, plus Gated DeltaNet's gate."""

from __future__ import annotations

import dataclasses

import torch
import torch.nn.functional as F
from torch import nn

from regmem.layers.base import check_mixer_input, repeat_heads
from regmem.layers.conv import ShortConvolution
from regmem.layers.memory import MemoryMixer, MemoryState
from regmem.layers.norm import l2_normalize
from regmem.ops import delta_product
from regmem.ops.common import zero_padding
from regmem.recipe import Recipe, Solver

N_HOUSEHOLDER = 2  # default Householder factors (SGD steps) per token


class DeltaProduct(MemoryMixer):
    recipe_name = "delta_product"

    def __init__(self, d_model: int, n_heads: int, *, n_householder: int = N_HOUSEHOLDER,
                 allow_neg_eigval: bool = False, gate: bool = True, **memory_kwargs):
        if n_householder < 2:
            raise ValueError(f"n_householder must be >= 2 (1 is DeltaNet), got {n_householder}")
        super().__init__(d_model, n_heads, qk_norm=True, **memory_kwargs)
        self.n_householder = n_householder
        self.beta_scale = 2.0 if allow_neg_eigval else 1.0
        extra = n_householder - 1  # the skeleton projects one key and value; the others come from these
        self.k_extra = nn.Linear(d_model, extra * self.n_kv_heads * self.key_dim, bias=False)
        self.v_extra = nn.Linear(d_model, extra * self.n_kv_heads * self.value_dim, bias=False)
        self.extra_convs = nn.ModuleList(
            ShortConvolution(layer.out_features, self.short_conv) for layer in (self.k_extra, self.v_extra)
        ) if self.short_conv else None
        self.b_proj = nn.Linear(d_model, n_heads * n_householder, bias=True)
        self.a_proj = nn.Linear(d_model, n_heads, bias=False) if gate else None

    def forward(self, x, state=None, *, attention_mask=None):
        check_mixer_input(x, attention_mask, self.d_model)
        mask = attention_mask.bool() if attention_mask is not None else None
        x = zero_padding(x, mask)
        conv_cache, memory = state if state is not None else (None, None)
        main_cache, extra_cache = (conv_cache[:3], conv_cache[3:]) if conv_cache is not None else (None, None)
        q, k, v, main_cache = self._project(x, main_cache, mask)  # [B, T, H, K], [B, T, H, K], [B, T, H, V]
        k_more, v_more, extra_cache = self._project_extra(x, extra_cache, mask)  # [B, T, H, n_h - 1, K|V]
        k = torch.cat([k.unsqueeze(3), k_more], dim=3)  # [B, T, H, n_h, K]
        v = torch.cat([v.unsqueeze(3), v_more], dim=3)  # [B, T, H, n_h, V]
        beta = self.beta_scale * torch.sigmoid(self.b_proj(x)).unflatten(-1, (self.n_heads, -1))  # [B, T, H, n_h]
        g = -F.softplus(self.a_proj(x)) if self.a_proj is not None else None  # [B, T, H]
        beta = zero_padding(beta, mask)  # a padded token: no step and retention 1 (ops/common/padding.py)
        g = zero_padding(g, mask) if g is not None else None
        # Decoding one token with a state uses the recurrent form by name; anything longer uses the chunk form.
        mode = "recurrent" if state is not None and x.shape[1] == 1 else "chunk"
        o, memory = delta_product(q, k, v, beta, g=g, initial_state=memory, output_final_state=True, mode=mode,
                                  chunk_size=self.chunk_size)
        caches = (*main_cache, *extra_cache) if main_cache is not None else None
        return self._output(o, x), MemoryState(caches, memory)

    def _project_extra(self, x, cache, mask):
        k, v = self.k_extra(x), self.v_extra(x)
        new_cache = ()
        if self.extra_convs is not None:
            caches = cache if cache is not None else (None, None)
            (k, ck), (v, cv) = (conv(t, c, mask) for conv, t, c in zip(self.extra_convs, (k, v), caches, strict=True))
            new_cache = (ck, cv)
        n = self.n_householder - 1
        k = k.unflatten(-1, (n, self.n_kv_heads, self.key_dim)).transpose(2, 3)  # [B, T, H_kv, n_h - 1, K]
        v = v.unflatten(-1, (n, self.n_kv_heads, self.value_dim)).transpose(2, 3)  # [B, T, H_kv, n_h - 1, V]
        return l2_normalize(repeat_heads(k, self.n_heads)), repeat_heads(v, self.n_heads), new_cache

    @classmethod
    def default_recipe(cls) -> Recipe:
        return _with_steps(super().default_recipe(), N_HOUSEHOLDER)

    @property
    def recipe(self) -> Recipe:
        """The registry's point with this layer's number of SGD steps per token (n_householder)."""
        return _with_steps(super().recipe, self.n_householder)

    def state_floats(self, seq_len: int) -> int:
        """The skeleton's memory and q, k, v conv caches plus the caches of the extra keys' and values' convs."""
        extra = 0
        if self.extra_convs is not None:
            extra = sum(c.conv.in_channels for c in self.extra_convs) * (self.short_conv - 1)
        return super().state_floats(seq_len) + extra


def _with_steps(recipe: Recipe, steps: int) -> Recipe:
    return dataclasses.replace(recipe, solver=Solver(recipe.solver.kind, steps=steps))
