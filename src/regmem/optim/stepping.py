"""What every optimiser of regmem.optim does around its update: run the closure, and read a gradient it can use."""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch.optim import Optimizer


def closure_loss(closure: Callable[[], torch.Tensor] | None) -> torch.Tensor | None:
    """The closure's loss, computed with gradients on (`step` itself runs under no_grad); None without a closure."""
    if closure is None:
        return None
    with torch.enable_grad():
        return closure()


def checked_grad(optimizer: Optimizer, p: torch.Tensor) -> torch.Tensor:
    """p.grad, rejecting sparse gradients and complex parameters with a clear error."""
    name = type(optimizer).__name__
    if p.grad.is_sparse:
        raise RuntimeError(f"{name} does not support sparse gradients")
    if torch.is_complex(p) or torch.is_complex(p.grad):
        raise RuntimeError(f"{name} does not support complex parameters")
    return p.grad
