"""Linear Attention++ (the AdaTransformer block): Nested Learning, arXiv:2512.24695, Sec. 3.2 (Fig. 3, eqs. 20-21)
and Sec. 5.1 (eq. 69).

A Transformer's MLP weight is frozen with respect to the context (level 1). Linear Attention++ gives it a second,
faster level: the weight is a linear-attention memory written at every token, whose initial value is the MLP weight,
meta-learned by the outer optimiser:

    W_t = W_{t-1} + k_t v_t^T,   W_0 = W_init (outer parameter)        (row layout: y_t = u_t W_t)
    y_t = u_t W_t

Keys and values come from projections of the input (the paper shares them with the attention layer before it;
here they are this module's own, `W_k`, `W_v`). With `update=False` the memory is never written and the module *is*
the linear MLP u W_init (the paper's claim: "Linear Attention++ is an MLP plus in-context learning"). The state is
regmem's linear-attention state S [B, 1, D_in, D_out] (regmem.ops.linear_attn, o_t = S_t^T q_t with q_t = u_t), so
decoding continues it token by token.

Legend: B batch, T time, D_in input width, D_out output width.
"""

from __future__ import annotations

from typing import get_args

import torch
from torch import nn

from regmem.ops import linear_attn
from regmem.ops.common import Mode


class LinearAttentionPP(nn.Module):
    """forward(u [B, T, D_in], state=None, *, mode="chunk") -> (y [B, T, D_out], state [B, 1, D_in, D_out])."""

    def __init__(self, d_in: int, d_out: int, *, update: bool = True, write_scale: float = 0.1):
        super().__init__()
        self.update = update
        self.weight = nn.Parameter(torch.randn(d_in, d_out) * d_in**-0.5)  # W_init: the MLP weight (level 1)
        self.k_proj = nn.Linear(d_in, d_in, bias=False)
        self.v_proj = nn.Linear(d_in, d_out, bias=False)
        with torch.no_grad():  # small writes at the start: the block begins as the MLP it extends
            self.v_proj.weight.mul_(write_scale)

    def forward(self, u: torch.Tensor, state: torch.Tensor | None = None, *, mode: Mode = "chunk"):
        if mode not in get_args(Mode):  # checked here too: without updates no op reads it
            raise ValueError(f"mode must be one of {get_args(Mode)}, got {mode!r}")
        if u.ndim != 3 or u.shape[-1] != self.weight.shape[0]:
            raise ValueError(f"u must have shape [B, T, d_in={self.weight.shape[0]}], got {list(u.shape)}")
        B = u.shape[0]
        if state is None:
            state = self.weight.expand(B, 1, *self.weight.shape)  # [B, 1, D_in, D_out]
        if not self.update:
            return u @ state[:, 0], state
        q = u.unsqueeze(2)  # [B, T, 1, D_in]
        k = self.k_proj(u).unsqueeze(2)
        v = self.v_proj(u).unsqueeze(2)  # [B, T, 1, D_out]
        y, state = linear_attn(q, k, v, scale=1.0, initial_state=state, output_final_state=True, mode=mode)
        return y[:, :, 0], state

    def levels(self) -> list[dict]:
        if not self.update:
            return []
        return [{"tensors": "W (linear-attention memory, initial value W_init)", "period": 1,
                 "objective": "dot-product (Hebbian) memory, lr 1"}]
