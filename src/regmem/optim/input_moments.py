"""The second moment C = sum_n x_n x_n^T of a linear layer's inputs, recorded by a forward hook for an optimiser
whose objective regresses on them (DGD's eq. 56 and the l2 objective of generalised gradient descent; *Nested
Learning*, arXiv:2512.24695, Sec. 4.5), with the number of input rows N it sums over.

Reduction. A training loss is usually a mean over its N rows (B x T tokens in an LM), so its weight gradient is (1/N)
sum_n x_n (dL/dy_n)^T. The quadratic term of eq. 56 written over the same rows is balanced with it only as a mean, (1/N)
sum_n x_n x_n^T: reduction "mean" (the default of the optimisers that use it). Eq. 56 is printed for one input;
reduction "sum" adds it up over the rows, as for a summed loss; against a mean loss its decay grows with N (one DGD step
at lr 0.01 on unit Gaussian inputs of width 16 shrinks ||W|| by ~0.86 with 16 rows and by ~0.09 with 1024 rows).
"""

from __future__ import annotations

from typing import Any, Literal

import torch
from torch import nn
from torch.optim import Optimizer
from torch.utils.hooks import RemovableHandle

Reduction = Literal["mean", "sum"]
REDUCTIONS: tuple[Reduction, ...] = ("mean", "sum")


def check_reduction(reduction: str) -> None:
    if reduction not in REDUCTIONS:
        raise ValueError(f"reduction must be one of {REDUCTIONS}, got {reduction!r}")


class InputMomentsOptimizer(Optimizer):
    """An optimiser that can record the inputs' second moment of the layers registered with `track_inputs`.

    The moments are transient: `step` consumes them (`take_input_moment`, then `clear_input_moments`) and
    `zero_grad` discards them, so the inputs of every forward pass between `zero_grad` and `step` count (gradient
    accumulation sums both C and the gradient). Evaluation passes (grad disabled) are not recorded."""

    def __init__(self, params, defaults: dict[str, Any]):
        super().__init__(params, defaults)
        self._input_moments: dict[torch.Tensor, torch.Tensor] = {}
        self._input_rows: dict[torch.Tensor, int] = {}  # N, the rows summed into each moment

    def __setstate__(self, state: dict[str, Any]) -> None:
        """A state_dict saved before the reduction option existed stepped with the sum: keep it so on load."""
        super().__setstate__(state)
        for group in self.param_groups:
            group.setdefault("reduction", "sum")

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
                self._input_rows[weight] += x.shape[0]
            else:
                self._input_moments[weight] = moment
                self._input_rows[weight] = x.shape[0]

        return layer.register_forward_hook(record)

    def input_moment(self, p: torch.Tensor, reduction: Reduction = "sum") -> torch.Tensor | None:
        """The recorded C: [K, K] of a tracked weight p: [V, K] since the last step, or None: the sum over the
        N input rows seen ("sum") or that sum / N ("mean"; module docstring)."""
        check_reduction(reduction)
        moment = self._input_moments.get(p)
        if moment is None or reduction == "sum":
            return moment
        return moment / self._input_rows[p]

    def clear_input_moments(self) -> None:
        self._input_moments.clear()
        self._input_rows.clear()

    def zero_grad(self, set_to_none: bool = True) -> None:
        """Clear gradients and the recorded input moments."""
        super().zero_grad(set_to_none=set_to_none)
        self.clear_input_moments()
