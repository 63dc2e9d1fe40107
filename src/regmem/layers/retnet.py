"""RetNet multi-scale retention (Sun et al. 2023, arXiv:2307.08621): constant per-head decay,
gamma_h = 1 - 2^(-5 - h), i.e. TTR eq. (16) with constant weights (recipe "retnet").

xPos rotation of q and k is not applied (it needs absolute positions in the decoding state); the output uses
the gated per-head RMSNorm in place of RetNet's GroupNorm + swish gate.
"""

from __future__ import annotations

import torch

from regmem.layers.gates import retnet_decay_exponents
from regmem.layers.memory import MemoryMixer
from regmem.ops import gated_linear_attn
from regmem.ops.common import zero_padding


class RetNet(MemoryMixer):
    recipe_name = "retnet"

    def __init__(self, d_model: int, n_heads: int, **memory_kwargs):
        super().__init__(d_model, n_heads, **memory_kwargs)
        self.register_buffer("log_gamma", self._log_gamma(), persistent=False)

    def _log_gamma(self) -> torch.Tensor:
        return torch.log1p(-(2.0 ** -retnet_decay_exponents(self.n_heads)))  # [H], log(1 - 2^(-5 - h))

    def reset_buffers(self) -> None:
        """Recomputes `log_gamma` (not saved with the weights; see RotaryEmbedding.reset_buffers)."""
        self.log_gamma = self._log_gamma().to(self.log_gamma.device)

    def memory(self, x, q, k, v, mask, memory, mode):
        B, T = x.shape[:2]
        g = zero_padding(self.log_gamma.expand(B, T, -1), mask)  # [B, T, H]
        return gated_linear_attn(
            q, zero_padding(k, mask), v, g, initial_state=memory, output_final_state=True, mode=mode,
            chunk_size=self.chunk_size,
        )
