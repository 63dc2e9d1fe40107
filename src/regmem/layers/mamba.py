"""Mamba (Mamba-1, Gu & Dao 2023, arXiv:2312.00752, Sec. 3.4 and Fig. 3): the selective SSM block, the far end of
the state-space lineage of T. Morrill's lecture *Continual Learning & Memory Models* (Columbia COMS6998, 2026): a
continuous system, discretised by zero-order hold, made selective.

    x, z = W_in u;  x = silu(conv(x));  dt, B, C = W_x x;  delta = softplus(W_dt dt + b_dt);  A = -exp(A_log)
    h_t = exp(delta_t A) ⊙ h_{t-1} + Bbar_t x_t,   y_t = C_t^T h_t + D ⊙ x_t,   out = W_out (y ⊙ silu(z))

with a state h [d_inner, N] per sequence: every channel has its own decay per state dimension (recipe "mamba":
diagonal decay, linear regressor, one GD step). `n_heads` is accepted for the common mixer signature and unused:
Mamba-1 has no heads (each of the d_inner channels is one). Initialisation as Mamba's reference: A = -(1..N) per
channel (S4D-real), dt_bias = softplus^-1(dt_0) with dt_0 log-uniform in [1e-3, 1e-1], D = 1.

Padding: padded inputs are zeroed and get delta = 0, so exp(delta A) = 1 and Bbar = 0: the state does not move. The
conv cache ends at each row's last real token (conv.py), so a padded prefill followed by one-token steps equals the
unpadded run.
"""

from __future__ import annotations

import math
from typing import get_args

import torch
import torch.nn.functional as F
from torch import nn

from regmem.layers.base import Mixer, check_mixer_input
from regmem.layers.conv import ShortConvolution
from regmem.layers.gates import dt_bias_parameter, dt_log_range
from regmem.layers.memory import MemoryState
from regmem.ops import selective_scan
from regmem.ops.common import zero_padding
from regmem.ops.ssm.discretize import Discretization


class Mamba(Mixer):
    recipe_name = "mamba"

    def __init__(
        self,
        d_model: int,
        n_heads: int = 1,  # unused (module docstring)
        state_size: int = 16,  # N
        expand: int = 2,  # d_inner = expand * d_model
        dt_rank: int | None = None,  # None means ceil(d_model / 16)
        short_conv: int = 4,  # kernel of the causal depthwise conv on x; 0 = off
        discretization: Discretization = "zoh",  # "zoh" (exact) | "simple" (Mamba's Bbar = delta B)
        chunk_size: int = 64,
        dt_range: tuple[float, float] = (1e-3, 1e-1),
        conv_bias: bool = False,  # a bias in the conv, as mamba_ssm's default (regmem.interop sets it)
    ):
        super().__init__()
        self.d_model, self.state_size, self.chunk_size, self.short_conv = d_model, state_size, chunk_size, short_conv
        self.d_inner = expand * d_model
        self.dt_rank = dt_rank or math.ceil(d_model / 16)
        if discretization not in get_args(Discretization):
            raise ValueError(f"discretization must be one of {get_args(Discretization)}, got {discretization!r}")
        self.discretization = discretization
        self.in_proj = nn.Linear(d_model, 2 * self.d_inner, bias=False)  # x, z
        self.conv = ShortConvolution(self.d_inner, short_conv, bias=conv_bias) if short_conv else None
        self.x_proj = nn.Linear(self.d_inner, self.dt_rank + 2 * state_size, bias=False)  # dt, B, C
        self.dt_proj = nn.Linear(self.dt_rank, self.d_inner, bias=False)
        nn.init.uniform_(self.dt_proj.weight, -self.dt_rank**-0.5, self.dt_rank**-0.5)
        self.dt_bias = dt_bias_parameter(self.d_inner, dt_log_range(*dt_range))  # gates.py
        s4d_real = torch.arange(1, state_size + 1, dtype=torch.float32).repeat(self.d_inner, 1)  # A = -(1..N)
        self.A_log = nn.Parameter(torch.log(s4d_real))
        self.D = nn.Parameter(torch.ones(self.d_inner))
        self.out_proj = nn.Linear(self.d_inner, d_model, bias=False)

    def forward(self, x, state=None, *, attention_mask=None):
        check_mixer_input(x, attention_mask, self.d_model)
        mask = attention_mask.bool() if attention_mask is not None else None
        x = zero_padding(x, mask)
        conv_cache, h = state if state is not None else (None, None)
        xs, z = self.in_proj(x).chunk(2, dim=-1)  # [B, T, d_inner] each
        if self.conv is not None:
            xs, cache = self.conv(xs, conv_cache[0] if conv_cache is not None else None, mask)
            conv_cache = (cache,)
        else:
            xs = F.silu(xs)
        dt, B, C = self.x_proj(xs).split([self.dt_rank, self.state_size, self.state_size], dim=-1)
        delta = zero_padding(F.softplus(self.dt_proj(dt) + self.dt_bias), mask)  # [B, T, d_inner], 0: padding
        A = -torch.exp(self.A_log)  # [d_inner, N]
        # Decoding one token with a state uses the recurrent form by name; anything longer uses the chunk form.
        mode = "recurrent" if state is not None and x.shape[1] == 1 else "chunk"
        y, h = selective_scan(xs, delta, A.to(xs.dtype), B, C, self.D.to(xs.dtype), discretization=self.discretization,
                              initial_state=h, output_final_state=True, mode=mode, chunk_size=self.chunk_size)
        return self.out_proj(y * F.silu(z)), MemoryState(conv_cache, h)

    def state_floats(self, seq_len: int) -> int:
        conv = self.d_inner * (self.short_conv - 1) if self.conv is not None else 0
        return self.d_inner * self.state_size + conv
