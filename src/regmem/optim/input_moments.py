"""The second moment C = sum_n x_n x_n^T of a linear layer's inputs, recorded by a forward hook for an optimiser
whose objective regresses on them (DGD's eq. 56 and the l2 objective of generalised gradient descent; *Nested
Learning*, arXiv:2512.24695, Sec. 4.5)."""

from __future__ import annotations

from typing import Any

import torch
from torch import nn
from torch.optim import Optimizer
from torch.utils.hooks import RemovableHandle


class InputMomentsOptimizer(Optimizer):
    """An optimiser that can record the inputs' second moment of the layers registered with `track_inputs`.

    The moments are transient: `step` consumes them (`take_input_moment`, then `clear_input_moments`) and
    `zero_grad` discards them, so the inputs of every forward pass between `zero_grad` and `step` count (gradient
    accumulation sums both C and the gradient). Evaluation passes (grad disabled) are not recorded."""

    def __init__(self, params, defaults: dict[str, Any]):
        super().__init__(params, defaults)
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

    def input_moment(self, p: torch.Tensor) -> torch.Tensor | None:
        """The recorded C: [K, K] of a tracked weight p: [V, K] since the last step, or None."""
        return self._input_moments.get(p)

    def clear_input_moments(self) -> None:
        self._input_moments.clear()

    def zero_grad(self, set_to_none: bool = True) -> None:
        """Clear gradients and the recorded input moments."""
        super().zero_grad(set_to_none=set_to_none)
        self._input_moments.clear()
