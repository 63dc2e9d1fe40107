"""Decay gates shared by several mixers, defined once.

Mamba-2's gate (Dao & Gu 2024, arXiv:2405.21060, Sec. 7 and its reference initialisation), used by Mamba2,
GatedDeltaNet (arXiv:2412.06464) and Mesa: per head, a log retention

    g_t = -exp(A_log) * dt_t,   dt_t = softplus(a_t + dt_bias)

with A = exp(A_log) drawn uniformly from [1, 16] and dt_bias = softplus^-1(dt_0) for dt_0 log-uniform over a
range, by default [1e-3, 1e-1]. The parameters stay attributes of the mixer (`A_log`, `dt_bias`), so
state-dict keys name them directly; these functions only create and apply them.

RetNet's fixed decays (Sun et al. 2023, arXiv:2307.08621, Sec. 2.2), gamma_h = 1 - 2^(-5 - h), are the
constant decay of RetNet and the initial decay of HLA.

The bilinear gate (`BilinearGate`) proposed by Zhong, Xu, Ao, Shi, *Understanding Transformer from the Perspective of
Associative Memory* (arXiv:2505.19488, Sec. 2.1, "Gating", after eqs. 30-31): in place of the cumulative forget
product g_i(x_{i:t}) = prod_{j=i+1}^t alpha_j of gated attention, an FFN-style gate g_i(x_{i:t}) = (W_G x_i)^T x_t,
one d_model x d_model matrix W_G per head. ForgettingAttention's `gate="bilinear"` (fox.py) uses it.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

DT_LOG_RANGE = (-6.9, -2.3)  # log dt_0 ~ U(-6.9, -2.3), i.e. dt_0 in about [1e-3, 1e-1]
# Titans' weight decay at initialisation (deep_memory.py, self_modifying.py): alpha = sigmoid(-4.6) ~ 0.01 a token
TITANS_DECAY_LOGIT = -4.6


def a_log_parameter(n_heads: int) -> nn.Parameter:
    """A_log [H] with exp(A_log) ~ U(1, 16); draws n_heads numbers from torch's default generator."""
    return nn.Parameter(torch.log(torch.empty(n_heads).uniform_(1.0, 16.0)))


def dt_bias_parameter(n_heads: int, log_range: tuple[float, float] = DT_LOG_RANGE) -> nn.Parameter:
    """dt_bias [H] = softplus^-1(dt_0) with log dt_0 ~ U(log_range), so softplus(dt_bias) = dt_0 at init; draws
    n_heads numbers from torch's default generator."""
    dt = torch.exp(torch.empty(n_heads).uniform_(*log_range))
    return nn.Parameter(dt + torch.log(-torch.expm1(-dt)))  # softplus^-1(dt) = dt + log(1 - exp(-dt))


def dt_log_range(dt_min: float, dt_max: float) -> tuple[float, float]:
    """The log range of dt_0 for a range [dt_min, dt_max] given in time steps (Mamba's dt_min, dt_max)."""
    return math.log(dt_min), math.log(dt_max)


def time_step(logits: torch.Tensor, dt_bias: torch.Tensor) -> torch.Tensor:
    """dt = softplus(logits + dt_bias): logits [B, T, H] -> dt [B, T, H] (>= 0)."""
    return F.softplus(logits + dt_bias)


def log_retention(A_log: torch.Tensor, dt: torch.Tensor) -> torch.Tensor:
    """g = -exp(A_log) * dt: the log retention [B, T, H] (<= 0) for time steps dt [B, T, H]."""
    return -torch.exp(A_log) * dt


def retnet_decay_exponents(n_heads: int) -> torch.Tensor:
    """e_h = 5 + h [H] (float32), so that RetNet's decays are gamma_h = 1 - 2^(-e_h)."""
    return 5.0 + torch.arange(n_heads, dtype=torch.float32)


class BilinearGate(nn.Module):
    """g[b, h, t, s] = (W_G^h x_s)^T x_t (arXiv:2505.19488, Sec. 2.1, the gate proposed after eq. 31), signed and
    unbounded; W_G: [H, d_model, d_model], drawn N(0, 1 / d_model^2) so that g has about unit scale at init for
    inputs of unit-scale entries (Var g = sum_ab W_ab^2 x_a^2 y_b^2 ~ 1)."""

    def __init__(self, d_model: int, n_heads: int):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(n_heads, d_model, d_model) / d_model)

    def forward(self, x_query: torch.Tensor, x_keys: torch.Tensor) -> torch.Tensor:
        """x_query [B, T, d_model] (the x_t), x_keys [B, S, d_model] (the x_i) -> g [B, H, T, S]."""
        written = torch.einsum("hde,bse->bshd", self.weight.to(x_keys.dtype), x_keys)  # [B, S, H, d]: W_G x_i
        return torch.einsum("bshd,btd->bhts", written, x_query)


def decay_logits(decay_init: float | tuple[float, float] | None, n_heads: int) -> torch.Tensor:
    """[H] initial logits of a per-token weight decay alpha = sigmoid(logit) (Titans, arXiv:2501.00663, eq. 13).

    None: Titans' -4.6 for every head (alpha ~ 0.01: a memory keeps e^-1 of what it stored ~100 tokens before, and
    ~4e-5 after 1024); a float: that alpha for every head; (lo, hi): alpha spread geometrically over the heads from
    hi (head 0) to lo, so some heads remember about 1 / lo tokens, as Mamba-2's time steps spread over a range."""
    if decay_init is None:
        return torch.full((n_heads,), TITANS_DECAY_LOGIT)
    values = decay_init if isinstance(decay_init, tuple | list) else (decay_init, decay_init)
    if len(values) != 2 or not all(isinstance(a, int | float) and 0 < a < 1 for a in values) or values[0] > values[1]:
        raise ValueError(f"decay_init must be None, an alpha in (0, 1) or a pair (lo, hi) with 0 < lo <= hi < 1, "
                         f"got {decay_init!r}")
    lo, hi = values
    alpha = torch.logspace(math.log10(hi), math.log10(lo), n_heads, dtype=torch.float64)
    return torch.logit(alpha).float()
