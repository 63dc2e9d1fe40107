"""Muon as a momentum memory with a nonlinear read-out (Behrouz et al., *Nested Learning: The Illusion of Deep
Learning Architectures*, arXiv:2512.24695, Sec. 4.2 eq. 42 and Sec. 4.4 eq. 52; Newton-Schulz as the inner
optimisation of eqs. 43-44 lives in `newton_schulz.py`).

Eq. 52 writes an optimiser as a memory m that compresses the gradient stream, read out through a nonlinearity:

    m_t = alpha m_{t-1} - eta grad_t            (memory write: one GD step, size eta, on <m, g> + c/2 ||m||^2,
                                                 alpha = 1 - eta c, Sec. 4.2)
    W_t = W_{t-1} + lr * zeta(m_t)              (read-out zeta = Newton-Schulz: Muon, eq. 42)

`MuonMemory` keeps that memory (state "memory", in the paper's sign: it points downhill) with alpha = momentum,
eta = 1 - momentum, i.e. the exponential moving average m_t = lerp(m_{t-1}, -g_t, 1 - momentum). Newton-Schulz is
scale-free, so eta only fixes the memory's units. With nesterov=True the read-out is queried at the look-ahead
point lerp(-g_t, m_t, momentum) = -(1 - momentum) g_t + momentum m_t.

Equality with `torch.optim.Muon` (torch 2.13). The memory is the negative of torch's "momentum_buffer", and every
floating-point operation is the same operation on negated operands (lerp, the odd Newton-Schulz polynomial and
the update are sign-symmetric), so with the default ns_dtype=torch.bfloat16 the parameters agree bit for bit for
every setting torch offers: nesterov True or False, any ns_coefficients and ns_steps, eps, adjust_lr_fn None /
"original" (lr * sqrt(max(1, rows / cols))) / "match_rms_adamw" (lr * 0.2 * sqrt(max(rows, cols))), and decoupled
weight decay W <- W (1 - lr * weight_decay) with the unadjusted lr. ns_dtype=None orthogonalises in the
parameter's own dtype instead (more accurate; no torch counterpart). Only 2-D parameters are accepted.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch

from .newton_schulz import QUINTIC, newton_schulz
from .stepping import checked_grad, closure_loss

ADJUST_LR_FNS = (None, "original", "match_rms_adamw")


def adjusted_lr(lr: float, adjust_lr_fn: str | None, shape: torch.Size) -> float:
    """The per-matrix learning-rate scale of `torch.optim.Muon` (module docstring) for a [rows, cols] weight."""
    rows, cols = shape
    if adjust_lr_fn in (None, "original"):
        return lr * math.sqrt(max(1.0, rows / cols))
    if adjust_lr_fn == "match_rms_adamw":
        return lr * 0.2 * math.sqrt(max(rows, cols))
    raise ValueError(f"adjust_lr_fn must be one of {ADJUST_LR_FNS}, got {adjust_lr_fn!r}")


def momentum_direction(memory: torch.Tensor, grad: torch.Tensor, group: dict, *, ns_eps: float) -> torch.Tensor:
    """Muon's write and read (module docstring), shared by the Muon family: the memory moves toward -grad in place
    (eq. 42), and Newton-Schulz orthogonalises it, or its Nesterov look-ahead, in `group["ns_dtype"]` (eq. 52)."""
    memory.lerp_(-grad, 1.0 - group["momentum"])
    query = (-grad).lerp(memory, group["momentum"]) if group["nesterov"] else memory
    return newton_schulz(query, group["ns_steps"], group["ns_coefficients"], eps=ns_eps,
                         compute_dtype=group["ns_dtype"])


def check_matrix_params(optimizer: torch.optim.Optimizer) -> None:
    """Raise ValueError unless every parameter of every group is a 2-D matrix (the Muon family's domain)."""
    name = type(optimizer).__name__
    for group in optimizer.param_groups:
        for p in group["params"]:
            if p.ndim != 2:
                raise ValueError(f"{name} accepts only 2-D weight matrices, got a parameter of shape "
                                 f"{tuple(p.shape)}; give 1-D/embedding parameters to AdamW (see param_groups)")


class MuonMemory(torch.optim.Optimizer):
    """Momentum memory + Newton-Schulz read-out (eqs. 42, 52); equals `torch.optim.Muon` (module docstring).

    Args:
        params: 2-D parameters (or groups of them).
        lr: learning rate (>= 0), scaled per matrix by adjust_lr_fn.
        momentum: memory retention alpha in [0, 1); the write step size is 1 - momentum.
        nesterov: read the memory at the look-ahead point.
        weight_decay: decoupled decay (>= 0), W <- W (1 - lr weight_decay).
        ns_coefficients: (a, b, c) of the Newton-Schulz polynomial; QUINTIC (Muon) or CUBIC (eq. 44).
        ns_steps: Newton-Schulz steps (>= 0).
        eps: floor on the Frobenius norm before Newton-Schulz (> 0).
        adjust_lr_fn: None / "original" / "match_rms_adamw".
        ns_dtype: dtype of the Newton-Schulz iteration; bfloat16 as torch.optim.Muon, None for the param dtype.
    """

    def __init__(
        self,
        params,
        lr: float = 1e-3,
        momentum: float = 0.95,
        nesterov: bool = True,
        weight_decay: float = 0.1,
        ns_coefficients: tuple[float, float, float] = QUINTIC,
        ns_steps: int = 5,
        eps: float = 1e-7,
        adjust_lr_fn: str | None = None,
        ns_dtype: torch.dtype | None = torch.bfloat16,
    ):
        if not lr >= 0.0:
            raise ValueError(f"lr must be >= 0, got {lr}")
        if not 0.0 <= momentum < 1.0:
            raise ValueError(f"momentum must be in [0, 1), got {momentum}")
        if not weight_decay >= 0.0:
            raise ValueError(f"weight_decay must be >= 0, got {weight_decay}")
        if len(ns_coefficients) != 3:
            raise ValueError(f"ns_coefficients must be three floats (a, b, c), got {ns_coefficients!r}")
        if not (isinstance(ns_steps, int) and ns_steps >= 0):
            raise ValueError(f"ns_steps must be an int >= 0, got {ns_steps!r}")
        if not eps > 0.0:
            raise ValueError(f"eps must be > 0, got {eps}")
        if adjust_lr_fn not in ADJUST_LR_FNS:
            raise ValueError(f"adjust_lr_fn must be one of {ADJUST_LR_FNS}, got {adjust_lr_fn!r}")
        defaults = dict(lr=lr, momentum=momentum, nesterov=nesterov, weight_decay=weight_decay,
                        ns_coefficients=tuple(ns_coefficients), ns_steps=ns_steps, eps=eps,
                        adjust_lr_fn=adjust_lr_fn, ns_dtype=ns_dtype)
        super().__init__(params, defaults)
        check_matrix_params(self)

    @torch.no_grad()
    def step(self, closure: Callable[[], torch.Tensor] | None = None):
        loss = closure_loss(closure)
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is None:
                    continue
                grad = checked_grad(self, p)
                state = self.state[p]
                if "memory" not in state:
                    state["memory"] = torch.zeros_like(p)
                # Memory write (eq. 42), m <- momentum m - (1 - momentum) g, and read-out (eq. 52): Newton-Schulz
                direction = momentum_direction(state["memory"], grad, group, ns_eps=group["eps"])
                p.mul_(1.0 - group["lr"] * group["weight_decay"])
                p.add_(direction, alpha=adjusted_lr(group["lr"], group["adjust_lr_fn"], p.shape))
        return loss
