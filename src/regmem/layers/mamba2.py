"""Mamba-2 (Dao & Gu 2024, arXiv:2405.21060): a scalar, data-dependent decay per head (SSD), i.e. TTR eq. (16)
with gamma_t = exp(dt_t A) (recipe "mamba2").

    z, x, B, C, dt = W_in u;  x, B, C = silu(conv(x, B, C));  dt = softplus(dt + dt_bias);  A = -exp(A_log)
    S_t = exp(dt_t A) S_{t-1} + B_t (dt_t x_t)^T,   y_t = S_t^T C_t + D x_t,   out = W_out norm(y) ⊙ silu(z)

so the op sees q = C, k = B (shared by the heads of a group), v = dt x and g = dt A, with scale 1.

Padding: padded inputs are zeroed and get dt = 0 (no decay, no write); the conv cache ends at each row's last
real token (conv.py), so a left- or right-padded prefill followed by one-token steps equals the unpadded run.
"""

from __future__ import annotations

from typing import Literal

import torch
from torch import nn

from regmem.layers.base import Mixer, check_mixer_input, repeat_heads, split_heads
from regmem.layers.conv import ShortConvolution
from regmem.layers.gates import a_log_parameter, dt_bias_parameter, dt_log_range, log_retention, time_step
from regmem.layers.memory import MemoryState
from regmem.layers.norm import GatedRMSNorm, GroupGatedRMSNorm
from regmem.ops import gated_linear_attn
from regmem.ops.common import zero_padding


class Mamba2(Mixer):
    recipe_name = "mamba2"

    def __init__(
        self,
        d_model: int,
        n_heads: int,
        head_dim: int | None = None,  # P; None means expand * d_model // n_heads
        state_size: int = 64,  # N, the key dim of the memory
        n_groups: int = 1,  # heads sharing one B and C
        expand: int = 2,  # inner width = expand * d_model when head_dim is None
        short_conv: int = 4,  # kernel of the causal depthwise conv on x, B, C; 0 = off
        norm_eps: float = 1e-5,
        chunk_size: int = 64,
        dt_range: tuple[float, float] = (1e-3, 1e-1),  # initial dt, log-uniform (Mamba's dt_min, dt_max)
        conv_bias: bool = False,  # a bias in the conv, as mamba_ssm's default (regmem.interop sets it)
        # "head": RMSNorm(y) ⊙ silu(z) per head, one weight [P] for all heads; "group": mamba_ssm's RMSNormGated,
        # per group of heads sharing B and C, a weight per channel, the gate first unless norm_before_gate
        norm: Literal["head", "group"] = "head",
        norm_before_gate: bool | None = None,  # None: True for "head", False for "group" (mamba_ssm's default)
    ):
        super().__init__()
        if n_heads % n_groups:
            raise ValueError(f"n_heads ({n_heads}) must be a multiple of n_groups ({n_groups})")
        self.d_model, self.n_heads, self.n_groups = d_model, n_heads, n_groups
        self.head_dim = head_dim or expand * d_model // n_heads
        self.state_size, self.chunk_size, self.short_conv = state_size, chunk_size, short_conv
        inner = n_heads * self.head_dim
        self.conv_dim = inner + 2 * n_groups * state_size
        self.in_proj = nn.Linear(d_model, inner + self.conv_dim + n_heads, bias=False)  # z, (x, B, C), dt
        self.conv = ShortConvolution(self.conv_dim, short_conv, bias=conv_bias) if short_conv else None
        self.dt_bias = dt_bias_parameter(n_heads, dt_log_range(*dt_range))  # gates.py (dt_bias drawn first)
        self.A_log = a_log_parameter(n_heads)
        self.D = nn.Parameter(torch.ones(n_heads))
        if norm not in ("head", "group"):
            raise ValueError(f"norm must be 'head' or 'group', got {norm!r}")
        norm_before_gate = (norm == "head") if norm_before_gate is None else norm_before_gate
        if norm == "head" and not norm_before_gate:
            raise ValueError("norm_before_gate=False needs norm='group' (mamba_ssm's gated norm)")
        self.norm_kind = norm
        self.norm = (GatedRMSNorm(self.head_dim, norm_eps) if norm == "head"
                     else GroupGatedRMSNorm(inner, n_groups, norm_eps, norm_before_gate))
        self.out_proj = nn.Linear(inner, d_model, bias=False)

    def forward(self, x, state=None, *, attention_mask=None):
        check_mixer_input(x, attention_mask, self.d_model)
        mask = attention_mask.bool() if attention_mask is not None else None
        x = zero_padding(x, mask)
        conv_cache, memory = state if state is not None else (None, None)
        z, xbc, dt = self.in_proj(x).split([self.n_heads * self.head_dim, self.conv_dim, self.n_heads], dim=-1)
        if self.conv is not None:
            xbc, cache = self.conv(xbc, conv_cache[0] if conv_cache is not None else None, mask)
            conv_cache = (cache,)
        xs, B, C = xbc.split([self.n_heads * self.head_dim, *(2 * [self.n_groups * self.state_size])], dim=-1)
        xs = split_heads(xs, self.head_dim)  # [B, T, H, P]
        B, C = (repeat_heads(split_heads(t, self.state_size), self.n_heads) for t in (B, C))  # [B, T, H, N]
        dt = zero_padding(time_step(dt, self.dt_bias), mask)  # [B, T, H]; dt = 0: no decay, no write at padding
        g = log_retention(self.A_log, dt)  # [B, T, H]
        # Decoding one token with a state uses the recurrent form by name; anything longer uses the chunk form.
        mode = "recurrent" if state is not None and x.shape[1] == 1 else "chunk"
        y, memory = gated_linear_attn(
            C, B, xs * dt.unsqueeze(-1), g, scale=1.0, initial_state=memory, output_final_state=True, mode=mode,
            chunk_size=self.chunk_size,
        )
        y = y + self.D.unsqueeze(-1) * xs  # [B, T, H, P]
        if self.norm_kind == "head":
            y = self.norm(y, split_heads(z, self.head_dim)).flatten(-2)
        else:
            y = self.norm(y.flatten(-2), z)
        return self.out_proj(y), MemoryState(conv_cache, memory)

    def state_floats(self, seq_len: int) -> int:
        conv = self.conv_dim * (self.short_conv - 1) if self.conv is not None else 0
        return self.n_heads * self.state_size * self.head_dim + conv
