"""FFNs as persistent associative memories: Zhong et al., *Understanding Transformer from the Perspective of
Associative Memory* (arXiv:2505.19488), Sec. 2.1 (Vignette 1, "Attention vs FFN": eqs. 14, 16, 19-24, Table 1).

    MemoryFFN     FFN(x) = W_V^T act(W_K x) = sum_{i=1}^{m} v_i kappa(k_i, x)                      (eq. 14)
                  k_i = row i of W_K, v_i = row i of W_V (both [m, d], no biases): m key -> value slots
                  written by gradient descent in training; `memories()` returns them.
    MoEFFN        FFN(x) = sum_e g_e(x) sum_{i in expert e} v_i^(e) kappa(k_i^(e), x)               (eq. 24)
                  E experts of width m / E, a softmax router g(x) = softmax(W_r x) kept on its top k experts.
    MultiHeadFFN  x, every k_i and every v_i are cut into n_h slices; head h answers
                  o_h = sum_i v_{i,h} kappa(k_{i,h}, x_h), and FFN(x) = W_O [o_1; ...; o_{n_h}]   (Sec. 2.1,
                  "Multihead", eqs. 19-23 applied to eq. 14: the paper's proposal, not evaluated there).

kappa (`activation`): "relu", kappa(k, x) = max(0, k.x) (eq. 14-15), or "solu", eq. 16's kernel
kappa(k, x) = (k.x) exp(k.x / tau) applied elementwise to the hidden pre-activations, with tau = `temperature`
(None: sqrt of the key dim, as for attention). Eq. 16 was chosen over Anthropic's SoLU activation x * softmax(x)
(Elhage et al., "Softmax Linear Units", Transformer Circuits Thread, 2022), which normalises across hidden units
and is followed by a LayerNorm: the elementwise kernel keeps FFN(x) = sum_i v_i kappa(k_i, x) exact, so
`memories()` still describes the layer, and it is the kernel whose retrieval noise the paper analyses (eq. 17;
the printed eq. 17 misses a factor e^2, which changes nothing here). Unlike x * softmax(x) it is unbounded: it
starts near linear (k.x is small at init, kappa ~ k.x) and overflows only once k.x / tau exceeds ~88 (float32).

MoE details: evaluation is dense. Every expert runs on every token and the unrouted ones are scaled by g_e = 0,
so the layer is one FFN of width m whose hidden units are scaled by their expert's gate: the same FLOPs as the
dense FFN, exact, and simpler than dispatching tokens, which would only pay off at sizes far beyond this library's
tests and tasks. The kept gates are the router's softmax probabilities, not renormalised over the top k (Switch
Transformer's choice, so the router gets a gradient even with k = 1). There is no load-balancing loss: nothing
stops the router from collapsing onto few experts. Experts are "relu" (eq. 24's memories, with `activation`) or
"swiglu" (eq. 28's gated experts, the LM's SwiGLU split into E blocks).

Shapes: x [..., d_model] -> [..., d_model]; these FFNs act on each token alone and hold no decoding state.
"""

from __future__ import annotations

import math
from typing import Literal, get_args

import torch
import torch.nn.functional as F
from torch import nn

from regmem.ops.common.kernels import score_kernel

Activation = Literal["relu", "solu"]
Expert = Literal["relu", "swiglu"]
ACTIVATIONS, EXPERTS = get_args(Activation), get_args(Expert)


# The argument checks, one function per rule, shared with the configs of regmem/models/ffn.py: each raises
# ValueError naming the argument (`name` where the caller's argument or config field has another name).

def check_positive(name: str, value: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{name} must be a positive int, got {value!r}")


def check_activation(activation: str, temperature: float | None) -> None:
    """`activation` names a kernel; `temperature` is > 0, and set only for "solu" (it is eq. 16's tau)."""
    if activation not in ACTIVATIONS:
        raise ValueError(f"activation must be one of {ACTIVATIONS}, got {activation!r}")
    if temperature is not None and not temperature > 0:
        raise ValueError(f"temperature must be > 0 or None, got {temperature!r}")
    if temperature is not None and activation != "solu":
        raise ValueError(f"temperature applies to activation='solu', got temperature={temperature!r} with "
                         f"activation={activation!r}")


def check_top_k(top_k: int, n_experts: int, *, experts_name: str = "n_experts") -> None:
    if top_k > n_experts:
        raise ValueError(f"top_k must be <= {experts_name} = {n_experts}, got {top_k}")


def check_expert(expert: str, activation: str) -> None:
    """`expert` names an expert kind; swiglu experts have no kernel, so `activation` stays "relu"."""
    if expert not in EXPERTS:
        raise ValueError(f"expert must be one of {EXPERTS}, got {expert!r}")
    if expert == "swiglu" and activation != "relu":
        raise ValueError(f"activation must be 'relu' with expert='swiglu' (the kernel is that of relu experts), "
                         f"got {activation!r}")


def check_heads_divide(n_heads: int, d_model: int, *, name: str = "n_heads") -> None:
    if d_model % n_heads:
        raise ValueError(f"{name} must divide d_model = {d_model}, got {n_heads}")


def memory_kernel(scores: torch.Tensor, activation: Activation, temperature: float) -> torch.Tensor:
    """kappa applied to the hidden pre-activations scores = k_i . x (any shape): relu(s) or s exp(s / tau)."""
    if activation == "relu":
        return score_kernel("relu", scores)
    return temperature * score_kernel("solu", scores / temperature)  # tau (s/tau) exp(s/tau) = s exp(s/tau)


class MemoryFFN(nn.Module):
    """FFN(x) = W_V^T act(W_K x) (eq. 14), no biases. `up.weight` is W_K [m, d_model]; `down.weight` is W_V^T
    [d_model, m]."""

    def __init__(self, d_model: int, hidden: int, *, activation: Activation = "relu",
                 temperature: float | None = None):  # tau of "solu"; None means sqrt(d_model)
        super().__init__()
        check_positive("d_model", d_model)
        check_positive("hidden", hidden)
        check_activation(activation, temperature)
        self.activation, self.temperature = activation, temperature or math.sqrt(d_model)
        self.up = nn.Linear(d_model, hidden, bias=False)  # W_K
        self.down = nn.Linear(hidden, d_model, bias=False)  # W_V^T

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down(memory_kernel(self.up(x), self.activation, self.temperature))

    def memories(self) -> tuple[torch.Tensor, torch.Tensor]:
        """(keys, values), each [m, d_model]: FFN(x) = sum_i values[i] kappa(keys[i] . x) (eq. 14)."""
        return self.up.weight, self.down.weight.t()


class MoEFFN(nn.Module):
    """Eq. 24: `n_experts` experts of width `expert_hidden`, a top-`top_k` softmax router; evaluated densely
    (module docstring). Expert e owns hidden units [e * expert_hidden, (e + 1) * expert_hidden)."""

    def __init__(self, d_model: int, expert_hidden: int, n_experts: int, top_k: int, *,
                 expert: Expert = "relu", activation: Activation = "relu",
                 temperature: float | None = None):  # tau of "solu" relu-experts; None means sqrt(d_model)
        super().__init__()
        for name, value in (("d_model", d_model), ("expert_hidden", expert_hidden), ("n_experts", n_experts),
                            ("top_k", top_k)):
            check_positive(name, value)
        check_top_k(top_k, n_experts)
        check_expert(expert, activation)
        check_activation(activation, temperature)
        self.n_experts, self.top_k, self.expert = n_experts, top_k, expert
        self.activation, self.temperature = activation, temperature or math.sqrt(d_model)
        hidden = n_experts * expert_hidden
        self.router = nn.Linear(d_model, n_experts, bias=False)  # W_r
        self.up = nn.Linear(d_model, (2 if expert == "swiglu" else 1) * hidden, bias=False)  # W_K (and W_G)
        self.down = nn.Linear(hidden, d_model, bias=False)  # W_V^T

    def route(self, x: torch.Tensor) -> torch.Tensor:
        """g(x): [..., d_model] -> [..., E], the router's softmax probabilities on the top_k experts, 0 elsewhere."""
        probs = torch.softmax(self.router(x), dim=-1)  # [..., E]
        top = probs.topk(self.top_k, dim=-1).indices  # [..., k]
        return torch.zeros_like(probs).scatter(-1, top, probs.gather(-1, top))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.expert == "swiglu":
            gate, up = self.up(x).chunk(2, dim=-1)
            hidden = F.silu(gate) * up  # [..., m]
        else:
            hidden = memory_kernel(self.up(x), self.activation, self.temperature)  # [..., m]
        hidden = hidden.unflatten(-1, (self.n_experts, -1))  # [..., E, m / E]
        hidden = hidden * self.route(x).unsqueeze(-1)  # g_e(x) scales expert e's memories
        return self.down(hidden.flatten(-2))  # [..., d_model]


class MultiHeadFFN(nn.Module):
    """The multi-head FFN proposal (module docstring): n_h heads of d_model / n_h channels share the m memory
    slots; slot i's key and value are cut into per-head slices. `up.weight` is W_K [m, d_model], `down.weight` is
    W_V^T [d_model, m], `o_proj` is W_O. The parameters are those of MemoryFFN plus W_O [d_model, d_model]."""

    def __init__(self, d_model: int, hidden: int, n_heads: int, *, activation: Activation = "relu",
                 temperature: float | None = None):  # tau of "solu"; None means sqrt(d_model / n_heads)
        super().__init__()
        for name, value in (("d_model", d_model), ("hidden", hidden), ("n_heads", n_heads)):
            check_positive(name, value)
        check_heads_divide(n_heads, d_model)
        check_activation(activation, temperature)
        self.n_heads, self.head_dim = n_heads, d_model // n_heads
        self.activation, self.temperature = activation, temperature or math.sqrt(self.head_dim)
        self.up = nn.Linear(d_model, hidden, bias=False)  # W_K
        self.down = nn.Linear(hidden, d_model, bias=False)  # W_V^T
        self.o_proj = nn.Linear(d_model, d_model, bias=False)  # W_O

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x_heads = x.unflatten(-1, (self.n_heads, self.head_dim))  # [..., H, d_h]
        keys = self.up.weight.unflatten(-1, (self.n_heads, self.head_dim))  # [m, H, d_h]
        values = self.down.weight.unflatten(0, (self.n_heads, self.head_dim))  # [H, d_h, m]
        scores = torch.einsum("...hd,mhd->...hm", x_heads, keys)  # [..., H, m]: k_{i,h} . x_h
        hidden = memory_kernel(scores, self.activation, self.temperature)
        o = torch.einsum("...hm,hdm->...hd", hidden, values)  # [..., H, d_h]: sum_i v_{i,h} kappa_{i,h}
        return self.o_proj(o.flatten(-2))  # [..., d_model]
