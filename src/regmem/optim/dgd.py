"""Delta Gradient Descent, DGD (Behrouz et al., *Nested Learning: The Illusion of Deep Learning Architectures*,
arXiv:2512.24695, Sec. 4.5 eqs. 54-57 and Appendix C).

A linear layer y = W x trained by GD is a memory that maps its input x_t to the value u_t = -dL/dy_t with the
dot-product objective (eqs. 54-55); its update ignores the current state. DGD uses the l2 regression objective
with the proximal retention term instead (eq. 56):

    W_{t+1} = argmin_W  1/2 ||W x_t - u_t||^2 + 1/(2 eta) ||W - W_t||_F^2,         u_t = -dL/dy_t.

Stationarity gives W (x x^T + I / eta) = W_t / eta - dL/dy x^T, and Sherman-Morrison gives the closed form (eq. 57)

    W_{t+1} = W_t (I - eta' x x^T) - eta' dL/dy x^T,        eta' = eta / (1 + eta ||x||^2).

The paper prints eta' = eta / (1 + eta), i.e. assumes ||x|| = 1; the ||x||^2 here is exact for every x.

Batches. With N inputs X [N, K] and output gradients dY [N, V], the sum of the per-sample objectives has the
minimiser W_{t+1} = (W_t - eta G) (I + eta X^T X)^{-1}, where G = dY^T X is exactly autograd's weight gradient:
a GD step followed by a data-dependent decay (I + eta C)^{-1} along the inputs' directions (C = X^T X). `DGD` applies
this with a strength `delta` on the quadratic (delta) term: delta = 0 is plain SGD, delta = 1 is eq. 56. The step
itself is `regmem.ops.dgd_step`, the one implementation of DGD's closed form, shared with the test-time-training
engine's package (regmem/ops/ttt/dgd.py); it takes the row layout W = weight^T.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import torch
from torch import nn
from torch.optim import Optimizer
from torch.utils.hooks import RemovableHandle

from regmem.ops import dgd_step

from .stepping import checked_grad, closure_loss


def dgd_minimiser(
    weight: torch.Tensor, inputs: torch.Tensor, grad_outputs: torch.Tensor, lr: float, delta: float = 1.0
) -> torch.Tensor:
    """The exact minimiser of the per-step DGD objective, by a direct linear solve (the reference for tests).

    argmin_W  delta/2 sum_n ||W x_n||^2 + sum_n <W x_n, dL/dy_n> + 1/(2 lr) ||W - W_t||_F^2, which for delta = 1 is
    eq. 56 (1/2 sum_n ||W x_n - u_n||^2 up to a constant) and for delta = 0 the GD objective of eq. 55.

    Args:
        weight: W_t, [V, K].
        inputs: X, [N, K].
        grad_outputs: dY = dL/dy, [N, V].
        lr: eta > 0.
        delta: strength of the quadratic term, >= 0.

    Returns W_{t+1}, [V, K], from W (delta X^T X + I / lr) = W_t / lr - dY^T X.
    """
    eye = torch.eye(weight.shape[1], dtype=weight.dtype, device=weight.device)
    lhs = delta * inputs.T @ inputs + eye / lr  # [K, K]
    rhs = weight / lr - grad_outputs.T @ inputs  # [V, K]
    return torch.linalg.solve(lhs, rhs, left=False)


class DGD(Optimizer):
    """Delta Gradient Descent on the weights of linear layers (eqs. 56-57; batch form in the module docstring).

    For a weight whose layer is registered with `track_inputs`, the step is

        W <- (W - lr * grad) (I + lr * delta * C)^{-1},     C = sum over inputs seen since the last step of x x^T,

    the exact minimiser of `dgd_minimiser`, computed by `regmem.ops.dgd_step`. Untracked parameters (biases,
    embeddings, ...) take a plain SGD step.
    The input moments are transient: `step` consumes them and `zero_grad` discards them, so the inputs of every
    forward pass between `zero_grad` and `step` count (gradient accumulation sums both C and the gradient).

    Args:
        params: parameters or param groups.
        lr: eta > 0 (the proximal step size).
        delta: strength of the delta term, >= 0 (0: SGD; 1: eq. 56).
    """

    def __init__(
        self, params: Iterable[torch.Tensor] | Iterable[dict[str, Any]], lr: float = 1e-3, delta: float = 1.0
    ):
        if not lr > 0.0:
            raise ValueError(f"lr must be > 0, got {lr}")
        if not delta >= 0.0:
            raise ValueError(f"delta must be >= 0, got {delta}")
        super().__init__(params, dict(lr=lr, delta=delta))
        self._input_moments: dict[torch.Tensor, torch.Tensor] = {}

    def track_inputs(self, layer: nn.Module) -> RemovableHandle:
        """Record the inputs' second moment X^T X of `layer` (an nn.Linear or any module with weight [V, K]
        applied to the last input dimension) for its weight; returns the hook's handle."""
        weight = getattr(layer, "weight", None)
        if not isinstance(weight, torch.Tensor) or weight.ndim != 2:
            raise ValueError(f"layer must have a 2-D weight [V, K], got {type(layer).__name__}")
        if not any(weight is p for group in self.param_groups for p in group["params"]):
            raise ValueError("layer's weight is not among this optimiser's parameters")

        def record(module: nn.Module, args: tuple[Any, ...], output: Any) -> None:
            if not torch.is_grad_enabled():  # an evaluation pass: its inputs take no part in the next step
                return
            x = args[0].detach().reshape(-1, weight.shape[1])  # [N, K]
            moment = x.T @ x  # [K, K]
            if weight in self._input_moments:
                self._input_moments[weight] += moment
            else:
                self._input_moments[weight] = moment

        return layer.register_forward_hook(record)

    def zero_grad(self, set_to_none: bool = True) -> None:
        """Clear gradients and the recorded input moments."""
        super().zero_grad(set_to_none=set_to_none)
        self._input_moments.clear()

    @torch.no_grad()
    def step(self, closure: Callable[[], torch.Tensor] | None = None):
        """One DGD step; returns the closure's loss (None without a closure)."""
        loss = closure_loss(closure)
        for group in self.param_groups:
            lr, delta = group["lr"], group["delta"]
            for p in group["params"]:
                if p.grad is None:
                    continue
                grad = checked_grad(self, p)
                moment = self._input_moments.get(p)
                if moment is None or delta == 0:
                    p.add_(grad, alpha=-lr)
                    continue
                step = dgd_step(p.T, grad.T, moment.to(p.dtype), lr, delta=delta)  # row layout [K, V]
                p.copy_(step.T)
        self._input_moments.clear()
        return loss
