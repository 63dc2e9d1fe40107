"""titans-pytorch's `NeuralMemory` at its defaults as a regmem layer: a Titans memory (Behrouz et al., "Titans:
Learning to Memorize at Test Time", arXiv:2501.00663, Sec. 3.1-3.2) whose optimiser steps once per chunk of C
tokens with every gradient taken at the memory's initial weights. `regmem.interop.titans_pytorch` converts the
upstream module's weights into it (docs/interop.md).

Per head h, with x̂ = RMSNorm(x) (eps the dtype's machine epsilon), x_s = x̂ ⊙ w_store, x_r = x̂ ⊙ w_retrieve:

    k_t = W_k x_s,t,  v_t = W_v x_s,t,  q_t = W_q x_r,t                      no convolution, no L2 norm
    f_W(z) = z + LN(MLP_W(z)) ⊙ (1 + γ)                                       W = (γ, W_1, ..., W_depth)
    MLP_W(z) = gelu(... gelu(z W_1) ...) W_depth                              exact GELU, no biases, LN eps 1e-5
    β_t = max_lr · sigmoid(w_β · x_s,t + b_β)                                  the token's step
    S_n = -∇_W Σ_{t in chunk n} β_t mean_d (f_W(k_t) - v_t)²   at W = W_0      the chunk's surprise (Titans eq. 12)
    p_n = mean_{t in chunk n} x_s,t;  η_n = sigmoid(w_η · p_n + b_η);  α_n = sigmoid(w_α · p_n + b_α)
    m_n = η_n m_{n-1} + S_n,   W_{n+1} = (1 - α_n) W_n + m_n                   momentum and decay, once a chunk
    o_t = f_{W_r}(q_t) · sigmoid(w_g · x_r,t),   r = floor((t + 1) / C)       the read lags (module note below)
    y_t = W_o [o_t,1; ...; o_t,H]                                              no output norm

Unlike regmem's `TitansMLP` (momentum and decay every token, gradients at the mini-batch's start, the LayerNorm's
gain an outer parameter, an output norm), the gain γ here is a fast weight, stepped and decayed with the MLP, and the
gradients are never re-anchored (upstream's `batch_size=None`): they do not depend on the state, so all chunks'
surprises are computed at once (`torch.func.vmap` of `torch.func.grad`) and only the two scalar-gated recurrences
run chunk by chunk. The read: token t sees the weights after every chunk that ends at or before it, so the last
token of a chunk already sees its own chunk's step and the others see the previous chunk's (upstream shifts the
queries by one token). A chunk left incomplete
at the end of a call is not stored; its surprise and pooled input wait in the state, so a prefill followed by
one-token steps equals one full forward.

Padding is refused: chunk boundaries are absolute positions, which a pad would move (upstream has no mask either).
"""

from __future__ import annotations

from typing import NamedTuple

import torch
import torch.nn.functional as F
from torch import nn
from torch.func import grad, vmap

from regmem.layers.base import Mixer, check_mixer_input, check_sizes

LN_EPS = 1e-5  # the memory's LayerNorm (titans-pytorch's ResidualNorm: torch's default eps)


class NeuralMemoryState(NamedTuple):
    """Decoding state, per sequence and head; each weight tensor [B, H, ...] as the memory's weights.

    weights: W after the last complete chunk; momentum: m after it; pending: the surprise of the chunk in progress
    (the β-weighted gradient sum so far, negated); pooled: the sum of x_s over that chunk's tokens so far [B, d_model];
    seen: tokens consumed since the start (all rows alike)."""

    weights: tuple[torch.Tensor, ...]
    momentum: tuple[torch.Tensor, ...]
    pending: tuple[torch.Tensor, ...]
    pooled: torch.Tensor
    seen: int


def memory_forward(weights, z: torch.Tensor) -> torch.Tensor:
    """f_W(z) = z + LN(MLP_W(z)) ⊙ (1 + γ); weights = (γ [..., d], W_1 [..., d, e], ..., W_depth [..., e, d]) with
    the same leading dims as z [..., n, d] (or none)."""
    gain, layers = weights[0], weights[1:]
    h = z
    for i, w in enumerate(layers):
        h = (F.gelu(h) if i else h) @ w
    return z + F.layer_norm(h, h.shape[-1:], eps=LN_EPS) * (1 + gain.unsqueeze(-2))


def _chunk_loss(weights, k, v, beta):
    """Σ_t β_t mean_d (f_W(k_t) - v_t)² over one chunk: k, v [C, d], beta [C]."""
    return ((memory_forward(weights, k) - v).pow(2).mean(-1) * beta).sum()


_chunk_surprise = vmap(grad(_chunk_loss))  # per chunk: the gradient of its loss at the weights given


class NeuralMemory(Mixer):
    """titans-pytorch's `NeuralMemory` (module docstring). Sizes: d_model, n_heads, head_dim (default d_model //
    n_heads; n_heads = 1 needs head_dim = d_model, and has no output gate nor W_o, as upstream), chunk_size C,
    depth and width of the memory MLP (hidden_dim, else int(head_dim x expansion)), max_lr. Built by
    `regmem.interop.convert("titans_pytorch.NeuralMemory", ...)` from upstream weights, or directly (initialised as
    upstream: γ = 0, Xavier-uniform MLP weights)."""

    recipe_name = ""  # outside the design space: chunk-level steps with gradients at the initial weights

    def __init__(self, d_model: int, n_heads: int, head_dim: int | None = None, *, chunk_size: int = 1,
                 depth: int = 2, expansion: float = 4.0, hidden_dim: int | None = None, max_lr: float = 1.0):
        super().__init__()
        check_sizes(d_model, n_heads, head_dim)
        for name, value in (("chunk_size", chunk_size), ("depth", depth)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be a positive int, got {value!r}")
        if not max_lr > 0:
            raise ValueError(f"max_lr must be > 0, got {max_lr!r}")
        head_dim = head_dim or d_model // n_heads
        if n_heads == 1 and head_dim != d_model:
            raise ValueError(f"head_dim must equal d_model with one head (as upstream), got {head_dim} and {d_model}")
        hidden = int(head_dim * expansion) if hidden_dim is None else hidden_dim  # upstream's int(d * expansion)
        if isinstance(hidden, bool) or not isinstance(hidden, int) or hidden < 1:
            raise ValueError(f"hidden_dim (or head_dim x expansion) must be a positive int, got {hidden!r}")
        self.d_model, self.n_heads, self.head_dim, self.chunk_size, self.max_lr = (
            d_model, n_heads, head_dim, chunk_size, max_lr)
        inner = n_heads * head_dim
        self.store_norm, self.retrieve_norm = nn.RMSNorm(d_model), nn.RMSNorm(d_model)
        self.q_proj, self.k_proj, self.v_proj = (nn.Linear(d_model, inner, bias=False) for _ in range(3))
        self.step_proj, self.momentum_proj, self.decay_proj = (nn.Linear(d_model, n_heads) for _ in range(3))
        self.gate_proj = nn.Linear(d_model, n_heads, bias=False) if n_heads > 1 else None
        self.o_proj = nn.Linear(inner, d_model, bias=False) if n_heads > 1 else None
        dims = (head_dim, *(hidden,) * (depth - 1), head_dim)
        self.memory_gain = nn.Parameter(torch.zeros(n_heads, head_dim))
        self.memory_weights = nn.ParameterList(
            nn.Parameter(nn.init.xavier_uniform_(torch.empty(a, b)).repeat(n_heads, 1, 1))
            for a, b in zip(dims[:-1], dims[1:], strict=True))

    def initial_weights(self) -> tuple[torch.Tensor, ...]:
        """W_0 per head: (γ [H, d], W_1 [H, d, e], ..., W_depth [H, e, d])."""
        return (self.memory_gain, *self.memory_weights)

    def forward(self, x, state: NeuralMemoryState | None = None, *, attention_mask=None):
        check_mixer_input(x, attention_mask, self.d_model)
        if attention_mask is not None:
            raise ValueError("attention_mask: NeuralMemory takes no padding (its chunk boundaries are absolute "
                             "positions, which a pad would move; upstream has no mask either)")
        B, T, H, D, C = x.shape[0], x.shape[1], self.n_heads, self.head_dim, self.chunk_size
        init = self.initial_weights()
        if state is None:
            start = [w.unsqueeze(0).expand(B, *w.shape).clone() for w in init]  # a state, not a view of the weights
            state = NeuralMemoryState(tuple(start), tuple(torch.zeros_like(w) for w in start),
                                      tuple(torch.zeros_like(w) for w in start), x.new_zeros(B, self.d_model), 0)
        x_s, x_r = self.store_norm(x), self.retrieve_norm(x)
        heads = lambda t: t.unflatten(-1, (H, D)).transpose(1, 2)  # noqa: E731  [B, T, H D] -> [B, H, T, D]
        q, k, v = heads(self.q_proj(x_r)), heads(self.k_proj(x_s)), heads(self.v_proj(x_s))
        beta = self.max_lr * torch.sigmoid(self.step_proj(x_s)).transpose(1, 2)  # [B, H, T]

        # the call's tokens on the chunk grid: `lead` slots of the chunk in progress before them, `tail` after them
        lead = state.seen % C
        n = -(-(lead + T) // C)  # chunks touched, the last possibly incomplete
        done = (lead + T) // C  # chunks completed in this call
        tail = n * C - lead - T
        pad = lambda t, dim: F.pad(t, (0, 0) * (-1 - dim) + (lead, tail))  # noqa: E731  zeros around the T axis
        k_c, v_c = (pad(t, -2).unflatten(2, (n, C)) for t in (k, v))  # [B, H, n, C, D]
        beta_c = pad(beta, -1).unflatten(2, (n, C))  # zero β: a slot outside the call adds no gradient
        flat = lambda t: t.flatten(0, 2)  # noqa: E731
        at_init = [w[None, :, None].expand(B, H, n, *w.shape[1:]).flatten(0, 2) for w in init]
        grads = _chunk_surprise(at_init, flat(k_c), flat(v_c), flat(beta_c))
        surprise = [-g.unflatten(0, (B, H, n)) for g in grads]  # [B, H, n, ...]
        surprise = [s.index_add(2, s.new_zeros(1, dtype=torch.long), p.unsqueeze(2))
                    for s, p in zip(surprise, state.pending, strict=True)]
        pooled = pad(x_s, -2).unflatten(1, (n, C)).sum(2)  # [B, n, d_model]: sums over each chunk's tokens
        pooled = pooled.index_add(1, pooled.new_zeros(1, dtype=torch.long), state.pooled.unsqueeze(1))
        eta = torch.sigmoid(self.momentum_proj(pooled[:, :done] / C)).transpose(1, 2)  # [B, H, done]
        keep = torch.sigmoid(-self.decay_proj(pooled[:, :done] / C)).transpose(1, 2)  # 1 - α

        weights, momentum, read = list(state.weights), list(state.momentum), [state.weights]
        for c in range(done):
            def gate(t, w, c=c):  # the chunk's [B, H] gate, broadcast over w's trailing dims
                return t[:, :, c].reshape(B, H, *[1] * (w.ndim - 2))

            momentum = [gate(eta, m) * m + s[:, :, c] for m, s in zip(momentum, surprise, strict=True)]
            weights = [gate(keep, w) * w + m for w, m in zip(weights, momentum, strict=True)]
            read.append(tuple(weights))

        # token at slot u of the grid reads the weights after floor((u + 1) / C) chunks: shift q one slot right
        q_c = F.pad(q, (0, 0, lead + 1, (done + 1) * C - lead - 1 - T)).unflatten(2, (done + 1, C))
        stacked = [torch.stack(ws, dim=2) for ws in zip(*read, strict=True)]  # [B, H, done + 1, ...]
        o = memory_forward(stacked, q_c).flatten(2, 3)[:, :, lead + 1:lead + 1 + T]  # [B, H, T, D]
        if self.gate_proj is not None:
            o = o * torch.sigmoid(self.gate_proj(x_r)).transpose(1, 2).unsqueeze(-1)
        y = o.transpose(1, 2).flatten(2)  # [B, T, H D]
        y = self.o_proj(y) if self.o_proj is not None else y
        if done < n:  # the chunk in progress waits in the state
            pending, rest = tuple(s[:, :, -1] for s in surprise), pooled[:, -1]
        else:
            pending, rest = tuple(torch.zeros_like(w) for w in weights), torch.zeros_like(pooled[:, 0])
        return y, NeuralMemoryState(tuple(weights), tuple(momentum), pending, rest, state.seen + T)

    def state_floats(self, seq_len: int) -> int:
        weights = sum(w.numel() for w in self.initial_weights())
        return 3 * weights + self.d_model
