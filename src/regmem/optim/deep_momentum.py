"""Deep Momentum Gradient Descent (DMGD): the momentum of each parameter is a small MLP memory.

Behrouz et al., *Nested Learning: The Illusion of Deep Learning Architectures* (arXiv:2512.24695), Sec. 4.4,
eq. (50) ("more expressive memory"):

    u_i = grad L(W_i; x_i)
    m_{i+1} = alpha m_i - eta grad L2(m_i; u_i)      (inner GD step on the memory's own objective, with retention)
    W_{i+1} = W_i + m_{i+1}(u_i)                     (the update reads the memory, queried with the gradient)

Architecture (the paper leaves it open). The memory acts on the flattened gradient **element-wise**: for a parameter
with n elements, element j is the key `u_j` and the read is

    m(u)_j = b_j + h(u_j),   h: R -> R an MLP  1 -> width -> ... -> width -> 1  (tanh, `memory_depth` hidden layers)

`b` (parameter-shaped, zero-initialised) is the per-element, constant-output part of the memory; `h` is shared by all
elements of one tensor (so its cost is O(width^2) per element, independent of the tensor's shape, and it acts the
same on every row — a row-wise memory would need one key size per tensor shape). The output layer of `h` starts at
zero, so with `memory_lr = 0` DMGD is heavy ball at any depth; with `memory_lr > 0` it departs from heavy ball as
`h` learns, from the first step on (the read uses the already-updated memory). `memory_depth = 0` removes `h`.

Inner objective L2 (configurable, `objective=`), summed over elements, with the gradient as key:
  * `"dot"`: `L2 = sum_j m(u)_j u_j` = <m(u), u>, the dot-product memory of eqs. (12)–(13), (34), whose value is the
    key itself: dL2/dm_j = u_j. This is not Sec. 4.4's printed example: see `"printed"`;
  * `"printed"`: `L2 = <m(u^T), 1> = sum_j m(u)_j`, the example Sec. 4.4 gives beside eq. (50) ("dot product
    similarity <m(u^T), 1>"): dL2/dm_j = 1, the same for every element and every step. The gradient then reaches the
    update only as the key of `h`; with a constant-output memory (`memory_depth = 0`) the update ignores it and the
    weights drift by a fixed step (tested). `"dot"` reads the example's inner product with the key in place of the
    all-ones vector, the reading under which the constant-output memory is heavy ball;
  * `"l2"` (default): `L2 = 1/2 sum_j (m(u)_j + u_j)^2`, delta/l2 regression of the key onto the target `-u`
    (eq. 48's objective with value `-u`): dL2/dm_j = m(u)_j + u_j.
The per-element bias steps with `lr` on this sum; the shared MLP weights step with `memory_lr` on its mean over the
n elements (the mean keeps `memory_lr` independent of tensor size). `alpha` (`momentum`) multiplies every memory
parameter, as in eq. (50) — it is the l2-retention of eq. (33).

Reductions (tested):
  * constant-output memory (`memory_depth = 0`) + `"dot"`: `b <- alpha b - lr u`, `W <- W + b`, which is heavy ball,
    `torch.optim.SGD(lr=lr, momentum=alpha, dampening=0)` with `b = -lr * buf` (the reduction "DMGD with a
    constant-output memory and dot-product objective = heavy-ball momentum");
  * constant-output memory + `"l2"`: `b <- (alpha - lr) b - lr u`, i.e. heavy ball with momentum `alpha - lr`.
The depth-0 case also equals `momentum_memory` in `memory_view`.

The `"dot"` objective is unbounded below (it rewards `h(u) -> -infinity * u`); only the retention `alpha` bounds the
MLP, and a large `memory_lr` feeds back (larger gain, larger gradients, larger gain) and diverges. The `"l2"`
objective is bounded, which is why it is the default.

Keys are the raw gradient entries (no normalisation), so `h` sees gradient-scale inputs; tanh is then near-linear and
`h` mostly learns a gradient-dependent gain. Hidden weights are drawn from a generator seeded by `seed` and the
parameter's index, so a run is reproducible.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Literal

import torch

from .stepping import checked_grad, closure_loss

__all__ = ["DeepMomentum"]

OBJECTIVES = ("dot", "l2", "printed")


def _mlp_read(weights: list[torch.Tensor], keys: torch.Tensor) -> torch.Tensor:
    """h(keys) for keys `[n, 1]`; weights alternate (W, b) per hidden layer, then the output W. Returns `[n, 1]`."""
    hidden = keys
    for k in range(0, len(weights) - 1, 2):
        hidden = torch.tanh(hidden @ weights[k].transpose(0, 1) + weights[k + 1])  # [n, width]
    return hidden @ weights[-1].transpose(0, 1)  # [n, 1]


class DeepMomentum(torch.optim.Optimizer):
    """DMGD, eq. (50) of Nested Learning (arXiv:2512.24695): momentum = an element-wise MLP memory of gradients.

    Args:
        params: iterable of parameters or param-group dicts.
        lr: eta, inner step of the per-element (constant-output) part of the memory; the heavy-ball lr. >= 0.
        momentum: alpha in [0, 1], retention multiplying every memory parameter each step.
        objective: inner objective L2, `"dot"` (dot-product memory <m(u), u>), `"l2"` (regression onto `-u`) or
            `"printed"` (Sec. 4.4's example <m(u^T), 1>; module docstring).
        memory_depth: hidden layers of the shared MLP h; 0 means a constant-output memory (heavy ball). int >= 0.
        memory_width: hidden width of h. int >= 1.
        memory_lr: inner step of h's weights (on the mean objective). >= 0.
        seed: seeds the hidden-layer initialisation (the output layer starts at zero). int.
    """

    def __init__(
        self,
        params,
        lr: float = 1e-2,
        momentum: float = 0.9,
        objective: Literal["dot", "l2", "printed"] = "l2",
        memory_depth: int = 1,
        memory_width: int = 8,
        memory_lr: float = 1e-2,
        seed: int = 0,
    ):
        if not lr >= 0.0:
            raise ValueError(f"lr must be >= 0, got {lr}")
        if not 0.0 <= momentum <= 1.0:
            raise ValueError(f"momentum must be in [0, 1], got {momentum}")
        if objective not in OBJECTIVES:
            raise ValueError(f"objective must be one of {OBJECTIVES}, got {objective!r}")
        if isinstance(memory_depth, bool) or not isinstance(memory_depth, int) or memory_depth < 0:
            raise ValueError(f"memory_depth must be an int >= 0, got {memory_depth!r}")
        if isinstance(memory_width, bool) or not isinstance(memory_width, int) or memory_width < 1:
            raise ValueError(f"memory_width must be an int >= 1, got {memory_width!r}")
        if not memory_lr >= 0.0:
            raise ValueError(f"memory_lr must be >= 0, got {memory_lr}")
        if isinstance(seed, bool) or not isinstance(seed, int):
            raise ValueError(f"seed must be an int, got {seed!r}")
        defaults = dict(lr=lr, momentum=momentum, objective=objective, memory_depth=memory_depth,
                        memory_width=memory_width, memory_lr=memory_lr, seed=seed)
        super().__init__(params, defaults)

    def _init_state(self, p: torch.Tensor, group: dict, index: int) -> dict:
        """Lazily create the memory of one parameter: per-element bias and the MLP h's weights."""
        state = self.state[p]
        state["step"] = torch.tensor(0.0)
        state["memory_bias"] = torch.zeros_like(p, memory_format=torch.preserve_format)
        gen = torch.Generator().manual_seed(group["seed"] * 1_000_003 + index)
        fan_in, width = 1, group["memory_width"]
        for k in range(group["memory_depth"]):
            weight = torch.randn(width, fan_in, generator=gen, dtype=torch.float64) / fan_in**0.5
            state[f"mlp_{2 * k}"] = weight.to(dtype=p.dtype, device=p.device)  # [width, fan_in]
            state[f"mlp_{2 * k + 1}"] = torch.zeros(width, dtype=p.dtype, device=p.device)  # [width]
            fan_in = width
        if group["memory_depth"] > 0:
            state[f"mlp_{2 * group['memory_depth']}"] = torch.zeros(1, width, dtype=p.dtype, device=p.device)
        return state

    @staticmethod
    def _mlp_weights(state: dict, depth: int) -> list[torch.Tensor]:
        return [state[f"mlp_{k}"] for k in range(2 * depth + 1)] if depth > 0 else []

    @torch.no_grad()
    def step(self, closure: Callable[[], torch.Tensor] | None = None):
        """One DMGD step (eq. 50) for every parameter with a gradient; returns the closure's loss (or None)."""
        loss = closure_loss(closure)
        index = 0
        for group in self.param_groups:
            for p in group["params"]:
                index += 1
                if p.grad is None:
                    continue
                u = checked_grad(self, p)
                state = self.state[p] if self.state[p] else self._init_state(p, group, index - 1)
                self._update_memory_and_param(p, u, state, group)
        return loss

    def _update_memory_and_param(self, p: torch.Tensor, u: torch.Tensor, state: dict, group: dict) -> None:
        alpha, depth = group["momentum"], group["memory_depth"]
        weights = self._mlp_weights(state, depth)
        keys = u.reshape(-1, 1)  # [n, 1]
        bias = state["memory_bias"]
        state["step"] += 1
        if depth == 0:
            read_old = bias
        else:
            with torch.enable_grad():
                leaves = [w.detach().requires_grad_(True) for w in weights]
                h_old = _mlp_read(leaves, keys)  # [n, 1]
            read_old = bias + h_old.detach().reshape_as(p)
        # dL2/dm per element, evaluated at the old memory m_i (eq. 50).
        objective = group["objective"]
        dldm = u if objective == "dot" else torch.ones_like(u) if objective == "printed" else read_old + u
        if depth > 0:
            grads = torch.autograd.grad(h_old, leaves, grad_outputs=dldm.reshape(-1, 1) / keys.shape[0])
            for w, g in zip(weights, grads, strict=True):
                w.mul_(alpha).add_(g, alpha=-group["memory_lr"])
        bias.mul_(alpha).add_(dldm, alpha=-group["lr"])
        # Read the updated memory with the current gradient: W <- W + m_{i+1}(u_i).
        p.add_(bias)
        if depth > 0:
            p.add_(_mlp_read(weights, keys).reshape_as(p))
