"""Delta Gradient Descent, DGD (Behrouz et al., *Nested Learning: The Illusion of Deep Learning Architectures*,
arXiv:2512.24695, Sec. 4.5 eqs. 54-57 and Appendix C), as a torch.optim optimizer for the weights of linear layers.

DGD trains a linear layer on an l2 regression objective with a proximal term (eq. 56) instead of GD's dot-product
objective: its exact minimiser over the inputs seen since the last step is a GD step followed by a decay along
those inputs' directions (the `DGD` docstring gives the step in torch.nn.Linear's layout). The objective, its batched
solution, eq. 57 as the one-input case and the paper's erratum are derived in ops/ttt/DERIVATION.md §5. The step is
`regmem.ops.dgd_step`, the one implementation, shared with the test-time-training engine; it takes the row layout
W = weight^T.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import torch

from regmem.ops import dgd_step

from .input_moments import InputMomentsOptimizer
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


class DGD(InputMomentsOptimizer):
    """Delta Gradient Descent on the weights of linear layers (eqs. 56-57; ops/ttt/DERIVATION.md §5).

    For a weight whose layer is registered with `track_inputs`, the step is

        W <- (W - lr * grad) (I + lr * delta * C)^{-1},     C = sum over inputs seen since the last step of x x^T,

    the exact minimiser of `dgd_minimiser`, computed by `regmem.ops.dgd_step`. Untracked parameters (biases,
    embeddings, ...) take a plain SGD step.
    `track_inputs(layer)` records C (`InputMomentsOptimizer`: transient, consumed by `step`, discarded by
    `zero_grad`, so gradient accumulation sums both C and the gradient).

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
                moment = self.input_moment(p)
                if moment is None or delta == 0:
                    p.add_(grad, alpha=-lr)
                    continue
                step = dgd_step(p.T, grad.T, moment.to(p.dtype), lr, delta=delta)  # row layout [K, V]
                p.copy_(step.T)
        self.clear_input_moments()
        return loss
