"""Delta-rule mixers: DeltaNet, GatedDeltaNet, Longhorn, NLMS — streaming SGD on the test-time regression
(arXiv:2501.12352 Vignette 3, eqs. 29-41). Each is the memory skeleton of memory.py plus its step size and gate.

Padding (regmem/ops/common/padding.py, "neutral tokens"): a padded token gets step size 0 and log-gate 0 (NLMS: key
0), so it leaves the memory unchanged.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from regmem.layers.gates import a_log_parameter, dt_bias_parameter, log_retention, time_step
from regmem.layers.memory import MemoryMixer
from regmem.ops import delta_rule, gated_delta_rule, longhorn, nlms
from regmem.ops.common import zero_padding


class DeltaNet(MemoryMixer):
    """S_t = (I - beta_t k_t k_t^T) S_{t-1} + beta_t k_t v_t^T with beta = sigmoid(W_b x) (x2 with
    allow_neg_eigval, so I - beta k k^T may have eigenvalue down to -1; Grazzi et al. 2024)."""

    recipe_name = "deltanet"

    def __init__(self, d_model: int, n_heads: int, *, allow_neg_eigval: bool = False, qk_norm: bool = True,
                 **memory_kwargs):
        super().__init__(d_model, n_heads, qk_norm=qk_norm, **memory_kwargs)
        self.beta_scale = 2.0 if allow_neg_eigval else 1.0
        self.b_proj = nn.Linear(d_model, n_heads, bias=True)

    def step_size(self, x):
        return self.beta_scale * torch.sigmoid(self.b_proj(x))  # [B, T, H]

    def memory(self, x, q, k, v, mask, memory, mode):
        return delta_rule(q, k, v, zero_padding(self.step_size(x), mask), initial_state=memory,
                          output_final_state=True, mode=mode, chunk_size=self.chunk_size)


class GatedDeltaNet(DeltaNet):
    """Gated DeltaNet (Yang et al. 2024, arXiv:2412.06464): S_t = exp(g_t)(I - beta_t k_t k_t^T) S_{t-1} +
    beta_t k_t v_t^T with Mamba-2's gate g_t = -exp(A_log) softplus(W_a x_t + dt_bias); = Leaky LMS (TTR eq. 38-41)."""

    recipe_name = "gated_deltanet"

    def __init__(self, d_model: int, n_heads: int, **kwargs):
        super().__init__(d_model, n_heads, **kwargs)
        self.a_proj = nn.Linear(d_model, n_heads, bias=False)
        self.A_log, self.dt_bias = a_log_parameter(n_heads), dt_bias_parameter(n_heads)  # Mamba-2's, gates.py

    def memory(self, x, q, k, v, mask, memory, mode):
        g = log_retention(self.A_log, time_step(self.a_proj(x), self.dt_bias))  # [B, T, H]
        return gated_delta_rule(q, k, v, zero_padding(g, mask), zero_padding(self.step_size(x), mask),
                                initial_state=memory, output_final_state=True, mode=mode, chunk_size=self.chunk_size)


class Longhorn(MemoryMixer):
    """Longhorn (Liu et al. 2024, arXiv:2407.14207; TTR eq. 30-31): the proximal step
    beta = delta / (1 + delta ||k||^2) with delta = softplus(W_d x) >= 0; it never overshoots, so keys need no norm."""

    recipe_name = "longhorn"

    def __init__(self, d_model: int, n_heads: int, **memory_kwargs):
        super().__init__(d_model, n_heads, **memory_kwargs)
        self.d_proj = nn.Linear(d_model, n_heads, bias=True)

    def memory(self, x, q, k, v, mask, memory, mode):
        delta = zero_padding(F.softplus(self.d_proj(x)), mask)  # [B, T, H]
        return longhorn(q, k, v, delta, initial_state=memory, output_final_state=True, mode=mode,
                        chunk_size=self.chunk_size)


class NLMS(MemoryMixer):
    """Normalised LMS / Kaczmarz (TTR eq. 33): beta = 1 / ||k||^2, no step-size parameters; the newest pair is
    recalled exactly. Keys are not normalised (with unit keys it is DeltaNet with beta = 1)."""

    recipe_name = "nlms"

    def memory(self, x, q, k, v, mask, memory, mode):
        k = zero_padding(k, mask)  # a zero key writes nothing, whatever its step size
        return nlms(q, k, v, initial_state=memory, output_final_state=True, mode=mode, chunk_size=self.chunk_size)
