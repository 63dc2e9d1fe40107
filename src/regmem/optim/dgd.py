"""Delta Gradient Descent, DGD (Behrouz et al., *Nested Learning: The Illusion of Deep Learning Architectures*,
arXiv:2512.24695, Sec. 4.5 eqs. 54-57 and Appendix C), as a torch.optim optimizer for the weights of linear layers.

DGD trains a linear layer on an l2 regression objective with a proximal term (eq. 56) instead of GD's dot-product
objective: its exact minimiser over the inputs seen since the last step is a GD step followed by a decay along
those inputs' directions (the `DGD` docstring gives the step in torch.nn.Linear's layout). The objective, its batched
solution, eq. 57 as the one-input case and the paper's erratum are derived in ops/ttt/DERIVATION.md §5. The step is
`regmem.ops.dgd_step`, the one implementation, shared with the test-time-training engine; it takes the row layout
W = weight^T.

Eq. 56 is the objective of one input. Over a batch the decay C is a mean over the input rows by default
(`reduction="mean"`), balanced with the gradient of a mean loss; `reduction="sum"` sums the per-input objective over
the rows, this library's first batch extension (not the paper's), whose decay grows with the number of rows
(`regmem.optim.input_moments`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import torch

from regmem.ops import dgd_step

from .input_moments import InputMomentsOptimizer, Reduction, check_reduction
from .stepping import checked_grad, closure_loss


def dgd_minimiser(
    weight: torch.Tensor, inputs: torch.Tensor, grad_outputs: torch.Tensor, lr: float, delta: float = 1.0,
    reduction: Reduction = "mean",
) -> torch.Tensor:
    """The exact minimiser of the per-step DGD objective, by a direct linear solve (the reference for tests).

    argmin_W  delta/(2 r) sum_n ||W x_n||^2 + sum_n <W x_n, dL/dy_n> + 1/(2 lr) ||W - W_t||_F^2, with r = N
    (reduction "mean") or 1 ("sum"), which for delta = 1 is eq. 56 (1/2 sum_n ||W x_n - u_n||^2 up to a constant,
    over r) and for delta = 0 the GD objective of eq. 55.

    Args:
        weight: W_t, [V, K].
        inputs: X, [N, K].
        grad_outputs: dY = dL/dy, [N, V].
        lr: eta > 0.
        delta: strength of the quadratic term, >= 0.
        reduction: "mean" or "sum" of the quadratic term over the N rows (module docstring).

    Returns W_{t+1}, [V, K], from W (delta X^T X / r + I / lr) = W_t / lr - dY^T X.
    """
    check_reduction(reduction)
    rows = inputs.shape[0] if reduction == "mean" else 1
    eye = torch.eye(weight.shape[1], dtype=weight.dtype, device=weight.device)
    lhs = delta * inputs.T @ inputs / rows + eye / lr  # [K, K]
    rhs = weight / lr - grad_outputs.T @ inputs  # [V, K]
    return torch.linalg.solve(lhs, rhs, left=False)


class DGD(InputMomentsOptimizer):
    """Delta Gradient Descent on the weights of linear layers (eqs. 56-57; ops/ttt/DERIVATION.md §5).

    For a weight whose layer is registered with `track_inputs`, the step is

        W <- (W - lr * grad) (I + lr * delta * C)^{-1},     C = mean (default) or sum of x x^T over the input rows
                                                           seen since the last step,

    the exact minimiser of `dgd_minimiser`, computed by `regmem.ops.dgd_step`. Untracked parameters (biases,
    embeddings, ...) take a plain SGD step.
    `track_inputs(layer)` records C (`InputMomentsOptimizer`: transient, consumed by `step`, discarded by
    `zero_grad`, so gradient accumulation sums both C and the gradient).

    Args:
        params: parameters or param groups.
        lr: eta > 0 (the proximal step size).
        delta: strength of the delta term, >= 0 (0: SGD; 1: eq. 56).
        reduction: "mean" (default; balanced with a mean loss's gradient: one step's decay does not depend on the
            number of rows) or "sum" (eq. 56's per-input objective summed over the rows, balanced with a summed
            loss) of x x^T over the rows.
    """

    def __init__(
        self, params: Iterable[torch.Tensor] | Iterable[dict[str, Any]], lr: float = 1e-3, delta: float = 1.0,
        reduction: Reduction = "mean",
    ):
        if not lr > 0.0:
            raise ValueError(f"lr must be > 0, got {lr}")
        if not delta >= 0.0:
            raise ValueError(f"delta must be >= 0, got {delta}")
        check_reduction(reduction)
        super().__init__(params, dict(lr=lr, delta=delta, reduction=reduction))

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
                moment = self.input_moment(p, group["reduction"])
                if moment is None or delta == 0:
                    p.add_(grad, alpha=-lr)
                    continue
                step = dgd_step(p.T, grad.T, moment.to(p.dtype), lr, delta=delta)  # row layout [K, V]
                p.copy_(step.T)
        self.clear_input_moments()
        return loss
