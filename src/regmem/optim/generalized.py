"""Generalised gradient descent (GGD) and generalised momentum (GM) as one family of optimisers (*Nested Learning:
The Illusion of Deep Learning Architecture*, Behrouz et al., arXiv:2512.24695, Sec. 4.5, eqs. 58-59 and
Definition 5; Sec. 4.2, eqs. 35-37).

Definition 5 reads gradient descent as a self-referential associative memory: the weights W map each input x_t to a
value u_t = f_{W_t}(x_t) they generate themselves, by

    W_{t+1} = argmin_W  L~(W x_t; u_t) + Ret(W, {W_i}),        u_t = -dL/dy_t (W_t; x_t)         (eqs. 58-59)

with an objective L~ (the quality of the mapping) and a retention Ret (stay near the recent states). Generalised
momentum is the same problem for a momentum memory m whose keys and values (the layer's inputs and errors) come
from the level below, with W_{t+1} = W_t + m_{t+1} (eqs. 35-37). regmem's family fixes the pieces as choices:

    objective  "dot_product": L~ = -sum_n <W x_n, u_n>             (GD's objective, eq. 55)
               "l2":          L~ = 1/2 sum_n ||W x_n - u_n||^2       (DGD's objective, eq. 56)
    retention  Ret = 1/(2 lr) ||W - alpha W_t||^2, alpha = `retention` in [0, 1] (alpha < 1: an l2 decay of the
               memory, the reading of Sec. 4.2 for momentum's alpha; Definition 5's window p is 1)
    solver     "exact": the argmin;  "gradient": one gradient step of size lr on L~ from alpha W_t
    memory     "weights": the memory is W itself (GGD);  "momentum": the memory is m, W_{t+1} = W_t + m_{t+1} (GM)

In the row layout of `regmem.ops.dgd_step` (W: [d_in, d_out], h = x W; a torch.nn.Linear weight is W^T), with
G = sum_n x_n (dL/dy_n)^T the loss gradient and C = sum_n x_n x_n^T the inputs' second moment (divided by the
number of rows N under the optimiser's default reduction "mean", balanced with a mean loss's gradient;
`regmem.optim.input_moments`), the step is

    dot_product (both solvers):  W_{t+1} = alpha W_t - lr G
    l2, exact:                   W_{t+1} = (I + lr C)^{-1} (alpha W_t - lr G)       (`dgd_step`, proximal)
    l2, gradient:                W_{t+1} = alpha W_t - lr (C alpha W_t + G)         (`dgd_step`, explicit)

Its named instances: `gradient_descent` (dot product, alpha = 1, weights: W - lr G, eq. 1), `heavy_ball`
(dot product, alpha = momentum, momentum memory: m_{t+1} = alpha m_t - lr G, W_{t+1} = W_t + m_{t+1}, eq. 33, which is
torch.optim.SGD with that momentum) and `delta_gradient_descent` (l2, exact, weights: DGD, eq. 57, which is
`regmem.optim.DGD` with delta = 1 and the same reduction). The l2 objective needs the inputs' moment: register each
linear layer with `track_inputs`; a parameter without recorded inputs (a bias, an untracked layer) has no keys to
regress on, so its l2 objective is the dot product's.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any, Literal, get_args

import torch

from regmem.ops import dgd_step

from .input_moments import InputMomentsOptimizer, Reduction, check_reduction
from .stepping import checked_grad, closure_loss

Objective = Literal["dot_product", "l2"]  # the inner objective L~ of Definition 5
Solver = Literal["exact", "gradient"]  # the argmin, or one gradient step on L~
Memory = Literal["weights", "momentum"]  # GGD (the memory is W) or generalised momentum (a memory m, W += m)


def ggd_step(W: torch.Tensor, grad: torch.Tensor, moment: torch.Tensor | None, lr: float, *,
             objective: Objective = "dot_product", retention: float = 1.0, solver: Solver = "exact") -> torch.Tensor:
    """One step of the family (module docstring) on a memory in row layout.

    Args:
        W: the memory before the step, [..., d_in, d_out] (any shape for the dot product).
        grad: G = sum_n x_n (dL/dy_n)^T, the shape of W.
        moment: C = sum_n x_n x_n^T, [..., d_in, d_in], or None (no keys: the l2 objective is the dot product's).
        lr: the step size of the retention, > 0.
        objective, retention, solver: as in the module docstring.

    Returns the memory after the step, the shape of W.
    """
    start = retention * W  # the centre of the retention, alpha W_t
    if objective == "dot_product" or moment is None:
        return start - lr * grad
    return dgd_step(start, grad, moment, lr, proximal=solver == "exact")


class GeneralizedGD(InputMomentsOptimizer):
    """Generalised gradient descent / momentum (Definition 5; module docstring), one `ggd_step` per parameter.

    For a torch weight p: [V, K] the step runs on W = p^T (row layout) with C from `track_inputs`; other parameters
    take the step elementwise with no moment. With memory="momentum" the state holds m ("memory", zeros at first).

    Args:
        params: parameters or param groups.
        lr: the step size, > 0.
        objective: "dot_product" or "l2".
        retention: alpha in [0, 1], the decay of the memory's previous state.
        solver: "exact" or "gradient" (the same for the dot product).
        memory: "weights" or "momentum".
        reduction: "mean" (default) or "sum" of x x^T over the input rows in C (module docstring).
    """

    def __init__(self, params: Iterable[torch.Tensor] | Iterable[dict[str, Any]], lr: float = 1e-3, *,
                 objective: Objective = "dot_product", retention: float = 1.0, solver: Solver = "exact",
                 memory: Memory = "weights", reduction: Reduction = "mean"):
        if not lr > 0.0:
            raise ValueError(f"lr must be > 0, got {lr}")
        if not 0.0 <= retention <= 1.0:
            raise ValueError(f"retention must be in [0, 1], got {retention}")
        for name, value, choice in (("objective", objective, Objective), ("solver", solver, Solver),
                                    ("memory", memory, Memory)):
            if value not in get_args(choice):
                raise ValueError(f"{name} must be one of {get_args(choice)}, got {value!r}")
        check_reduction(reduction)
        defaults = dict(lr=lr, objective=objective, retention=retention, solver=solver, memory=memory,
                        reduction=reduction)
        super().__init__(params, defaults)

    @torch.no_grad()
    def step(self, closure: Callable[[], torch.Tensor] | None = None):
        """One step; returns the closure's loss (None without a closure)."""
        loss = closure_loss(closure)
        for group in self.param_groups:
            options = {name: group[name] for name in ("objective", "retention", "solver")}
            for p in group["params"]:
                if p.grad is None:
                    continue
                grad = checked_grad(self, p)
                moment = self.input_moment(p, group["reduction"])
                moment = moment.to(p.dtype) if moment is not None else None
                if group["memory"] == "weights":
                    p.copy_(self._step_on(p, grad, moment, group["lr"], options))
                    continue
                state = self.state[p]
                if len(state) == 0:
                    state["memory"] = torch.zeros_like(p, memory_format=torch.preserve_format)
                state["memory"].copy_(self._step_on(state["memory"], grad, moment, group["lr"], options))
                p.add_(state["memory"])
        self.clear_input_moments()
        return loss

    @staticmethod
    def _step_on(memory: torch.Tensor, grad: torch.Tensor, moment: torch.Tensor | None, lr: float,
                 options: dict[str, Any]) -> torch.Tensor:
        """ggd_step on a torch-layout memory: a tracked weight [V, K] is stepped as W = memory^T."""
        if moment is None:
            return ggd_step(memory, grad, None, lr, **options)
        return ggd_step(memory.T, grad.T, moment, lr, **options).T


def gradient_descent(params: Iterable[torch.Tensor] | Iterable[dict[str, Any]], lr: float) -> GeneralizedGD:
    """GD as the family's instance (dot product, alpha = 1, the weights as memory): W_{t+1} = W_t - lr G."""
    return GeneralizedGD(params, lr, objective="dot_product", retention=1.0, memory="weights")


def heavy_ball(params: Iterable[torch.Tensor] | Iterable[dict[str, Any]], lr: float,
               momentum: float) -> GeneralizedGD:
    """Heavy-ball momentum as the family's instance (dot product, alpha = momentum, a momentum memory):
    m_{t+1} = momentum m_t - lr G, W_{t+1} = W_t + m_{t+1} (eq. 33)."""
    return GeneralizedGD(params, lr, objective="dot_product", retention=momentum, memory="momentum")


def delta_gradient_descent(params: Iterable[torch.Tensor] | Iterable[dict[str, Any]], lr: float, *,
                           reduction: Reduction = "mean") -> GeneralizedGD:
    """DGD as the family's instance (l2 objective, exact, the weights as memory): eq. 57 for one input,
    W_{t+1} = (I + lr C)^{-1} (W_t - lr G) in row layout, C reduced over the rows by `reduction`. Register the
    linear layers with `track_inputs`."""
    return GeneralizedGD(params, lr, objective="l2", retention=1.0, solver="exact", memory="weights",
                         reduction=reduction)
