"""TitansLinear: the linear memory of Titans (Behrouz et al. 2024, arXiv:2501.00663; TTR Fig. 1) — streaming SGD
with momentum and weight decay on the test-time regression:

    P_t = eta_t P_{t-1} + theta_t k_t (v_t - S_{t-1}^T k_t)^T,    S_t = (1 - alpha_t) S_{t-1} + P_t

with theta = sigmoid, eta = sigmoid and alpha = sigmoid of linear maps of x. Padding: theta = 0, alpha = 0 and
eta = 1 at padded tokens, and the op's token_mask keeps S from taking the momentum there (S_t = S_{t-1} + P_t
would otherwise add P at every padded token): a padded token leaves (S, P) unchanged, so a right-padded prefill
ends in the state of its real tokens and decoding continues from it.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from regmem.layers.memory import MemoryMixer
from regmem.ops import momentum_delta_rule
from regmem.ops.common import zero_padding


class TitansLinear(MemoryMixer):
    recipe_name = "titans_linear"

    def __init__(self, d_model: int, n_heads: int, *, qk_norm: bool = True, **memory_kwargs):
        super().__init__(d_model, n_heads, qk_norm=qk_norm, **memory_kwargs)
        self.gate_proj = nn.Linear(d_model, 3 * n_heads, bias=True)  # theta, eta, alpha logits per head

    def memory(self, x, q, k, v, mask, memory, mode):
        theta, eta, alpha = self.gate_proj(x).chunk(3, dim=-1)  # [B, T, H] each
        beta = zero_padding(torch.sigmoid(theta), mask)
        log_mu = zero_padding(F.logsigmoid(eta), mask)  # momentum retention
        g = zero_padding(F.logsigmoid(-alpha), mask)  # log(1 - alpha), memory retention
        return momentum_delta_rule(q, k, v, g, beta, log_mu, initial_state=memory, output_final_state=True,
                                   mode=mode, chunk_size=self.chunk_size, token_mask=mask)

    def memory_floats(self) -> int:
        return 2 * self.n_heads * self.key_dim * self.value_dim  # memory S and momentum P
