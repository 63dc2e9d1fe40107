"""GLA: gated linear attention with a diagonal, data-dependent gate (Yang et al. 2024, arXiv:2312.06635).

alpha_t = sigmoid(W_2 W_1 x_t)^(1/16) per key channel through a low-rank gate projection, i.e.
g_t = logsigmoid(W_2 W_1 x_t) / 16 (GLA's gate_logit_normalizer). Recipe "gla": per-channel decay, outside the
TTR paper's scalar derivation.
"""

from __future__ import annotations

import torch.nn.functional as F
from torch import nn

from regmem.layers.base import split_heads
from regmem.layers.memory import MemoryMixer
from regmem.ops import gated_linear_attn
from regmem.ops.common import zero_padding


class GLA(MemoryMixer):
    recipe_name = "gla"

    def __init__(
        self,
        d_model: int,
        n_heads: int,
        *,
        gate_low_rank_dim: int = 16,  # rank of the gate projection W_2 W_1
        gate_logit_normalizer: float = 16.0,  # g = logsigmoid(.) / normalizer keeps retention near 1
        **memory_kwargs,
    ):
        super().__init__(d_model, n_heads, **memory_kwargs)
        self.gate_logit_normalizer = gate_logit_normalizer
        self.gk_proj = nn.Sequential(
            nn.Linear(d_model, gate_low_rank_dim, bias=False),
            nn.Linear(gate_low_rank_dim, n_heads * self.key_dim, bias=True),
        )

    def memory(self, x, q, k, v, mask, memory, mode):
        g = F.logsigmoid(split_heads(self.gk_proj(x), self.key_dim)) / self.gate_logit_normalizer  # [B, T, H, K]
        return gated_linear_attn(
            q, zero_padding(k, mask), v, zero_padding(g, mask), initial_state=memory, output_final_state=True,
            mode=mode, chunk_size=self.chunk_size,
        )
