"""Momentum as an associative memory, and its more expressive variants (Behrouz et al., *Nested Learning: The
Illusion of Deep Learning Architectures*, arXiv:2512.24695, Sec. 4.2 eqs. 33-34, Sec. 4.3, Sec. 4.4 eqs. 46-49, 51).

The paper writes heavy-ball momentum as a memory m that compresses the gradient stream (eq. 33):

    m_{t+1} = alpha m_t - eta g_t,       W_{t+1} = W_t + m_{t+1},

one gradient step of size eta on the dot-product objective <m, g_t> (eq. 34, alpha = 1), or on
<m, g_t> + (c/2)||m||^2 with c = (1 - alpha) / eta (alpha != 1: the decay is an l2 penalty on the memory).

Convention used here. Every optimiser stores torch's buffer b ("momentum_buffer", the memory in gradient units) and
applies the learning rate at read-out, exactly like `torch.optim.SGD`:

    b_{t+1} = momentum * b_t + (1 - dampening) * v_t,       W_{t+1} = W_t - lr * b_{t+1},

so for a constant lr the paper's memory is m_t = -lr * b_t, with alpha = momentum and eta = lr * (1 - dampening).
The memory starts empty (b_0 = 0). torch instead copies the first gradient undamped into the buffer; the two agree
for dampening = 0, and for any dampening once torch's buffer is seeded with zeros. weight_decay adds
weight_decay * W to the gradient before it is written (torch's coupled decay).

* `ValueMomentum`: value-ful momentum, eq. 47 (value P_t: m_{t+1} = alpha m_t - eta P_t g_t, i.e. preconditioned
  momentum) and higher-order feature maps, eq. 51 (m_{t+1} = alpha m_t - eta P_t phi(g_t)). With both callables left
  as None it is plain heavy-ball momentum (eq. 33) and equals torch.optim.SGD. Its preconditioner may also be a memory
  learned in context, `LearnedPreconditioner` (eqs. 38-41; optim/preconditioner.py).
* `DeltaMomentum`: Delta Momentum, eqs. 48-49 (the l2 regression objective replaces the dot product, giving a
  gradient-dependent decay: the memory can forget and stop).
* `ema_horizon`: how many recent gradients an EMA momentum effectively remembers (Sec. 4.3: 6 and 43 at beta 0.9).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from typing import Any

import torch
from torch.optim import Optimizer

from .preconditioner import LearnedPreconditioner, preconditioner_write
from .stepping import checked_grad, closure_loss

FORMS = ("elementwise", "matrix")


def ema_horizon(beta: float, mass: float) -> int:
    """Smallest n such that the last n + 1 gradients (ages i = 0..n) carry at least `mass` of an EMA's weight.

    Sec. 4.3: with decay beta the gradient of age i weighs beta^i (1 - beta), so ages 0..n carry 1 - beta^(n+1) of
    the infinite-horizon total. For beta = 0.9: mass 0.5 gives 6 and mass 0.99 gives 43 (the paper's numbers).
    """
    if not 0.0 < beta < 1.0:
        raise ValueError(f"beta must be in (0, 1), got {beta}")
    if not 0.0 < mass < 1.0:
        raise ValueError(f"mass must be in (0, 1), got {mass}")
    # 1 - beta^(n+1) >= mass  <=>  n + 1 >= log(1 - mass) / log(beta); the loop guards against rounding at the edge.
    n = max(0, math.ceil(math.log1p(-mass) / math.log(beta)) - 2)
    while 1.0 - beta ** (n + 1) < mass:
        n += 1
    return n


def _check_common(lr: float, momentum: float, dampening: float, weight_decay: float) -> None:
    if not lr >= 0.0:
        raise ValueError(f"lr must be >= 0, got {lr}")
    if not 0.0 <= momentum <= 1.0:
        raise ValueError(f"momentum must be in [0, 1], got {momentum}")
    if not 0.0 <= dampening <= 1.0:
        raise ValueError(f"dampening must be in [0, 1], got {dampening}")
    if not weight_decay >= 0.0:
        raise ValueError(f"weight_decay must be >= 0, got {weight_decay}")


class _MomentumMemory(Optimizer):
    """The shared loop: read the gradient, write it into the memory (`_write`), read the memory out (W -= lr b)."""

    @torch.no_grad()
    def step(self, closure: Callable[[], torch.Tensor] | None = None):
        """One optimisation step; returns the closure's loss (None without a closure)."""
        loss = closure_loss(closure)
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is None:
                    continue
                g = checked_grad(self, p)
                if group["weight_decay"] != 0:
                    g = g.add(p, alpha=group["weight_decay"])
                state = self.state[p]
                if len(state) == 0:
                    state["momentum_buffer"] = torch.zeros_like(p, memory_format=torch.preserve_format)
                buf = state["momentum_buffer"]
                self._write(p, buf, g, group)
                p.add_(buf, alpha=-group["lr"])
        return loss

    def _write(self, p: torch.Tensor, buf: torch.Tensor, g: torch.Tensor, group: dict[str, Any]) -> None:
        raise NotImplementedError


class ValueMomentum(_MomentumMemory):
    """Heavy-ball momentum with a value map: eq. 47 (value-ful / preconditioned) and eq. 51 (feature map).

    The memory maps the gradient to a value; its write is one GD step on <m, P_t phi(g_t)> (eq. 46):

        v_t = preconditioner(W, feature_map(g_t))     (identity for a None callable)
        b_{t+1} = momentum * b_t + (1 - dampening) * v_t,    W_{t+1} = W_t - lr * b_{t+1}

    Paper symbols (constant lr): m = -lr b, alpha = momentum, eta = lr (1 - dampening), P_t = preconditioner,
    phi = feature_map. With both None this is `torch.optim.SGD(momentum=..., dampening=...)` (module docstring).

    Args:
        params: parameters or param groups.
        lr: learning rate applied at read-out (>= 0).
        momentum: retention alpha of the memory, in [0, 1] (1 = the undecayed memory of eq. 34).
        dampening: the write strength is 1 - dampening, in [0, 1] (1 - momentum gives an EMA).
        weight_decay: coupled l2 decay added to the gradient (torch.optim.SGD's convention), >= 0.
        feature_map: phi, an element-wise map of the gradient (e.g. a polynomial, eq. 51); must keep the shape.
        preconditioner: P_t as a callable (param, phi(g)) -> P_t phi(g) of the same shape, e.g. a fixed
            diagonal `lambda p, v: d[p] * v` or a left matrix product `lambda p, v: P @ v`; or a
            `LearnedPreconditioner`, a memory P: [a, a] per parameter learned in context by eq. 41 with phi(g) as
            its key (state "preconditioner", starting at I; optim/preconditioner.py), whose read-out P_{t+1} phi(g)
            is the value. The callables and the config live on the optimiser, not in the param groups, so
            `state_dict()` stays picklable; pass them again on reload (the learned P is in the state).
    """

    def __init__(
        self,
        params: Iterable[torch.Tensor] | Iterable[dict[str, Any]],
        lr: float = 1e-3,
        momentum: float = 0.9,
        dampening: float = 0.0,
        weight_decay: float = 0.0,
        feature_map: Callable[[torch.Tensor], torch.Tensor] | None = None,
        preconditioner: Callable[[torch.Tensor, torch.Tensor], torch.Tensor] | LearnedPreconditioner | None = None,
    ):
        _check_common(lr, momentum, dampening, weight_decay)
        if feature_map is not None and not callable(feature_map):
            raise ValueError(f"feature_map must be callable or None, got {feature_map!r}")
        if not (preconditioner is None or callable(preconditioner)
                or isinstance(preconditioner, LearnedPreconditioner)):
            raise ValueError(f"preconditioner must be callable, a LearnedPreconditioner or None, "
                             f"got {preconditioner!r}")
        self.feature_map = feature_map
        self.preconditioner = preconditioner
        super().__init__(params, dict(lr=lr, momentum=momentum, dampening=dampening, weight_decay=weight_decay))

    def _write(self, p: torch.Tensor, buf: torch.Tensor, g: torch.Tensor, group: dict[str, Any]) -> None:
        v = g if self.feature_map is None else self.feature_map(g)
        if isinstance(self.preconditioner, LearnedPreconditioner):
            v = self._learned_value(p, v)
        elif self.preconditioner is not None:
            v = self.preconditioner(p, v)
        if v.shape != p.shape:
            raise ValueError(f"the value map must keep the parameter's shape {tuple(p.shape)}, got {tuple(v.shape)}")
        buf.mul_(group["momentum"]).add_(v, alpha=1.0 - group["dampening"])

    def _learned_value(self, p: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        """Eq. 41 on the parameter's preconditioner memory with key as_matrix(v); returns its read-out."""
        key = as_matrix(v)  # [a, b]
        state = self.state[p]
        if "preconditioner" not in state:
            state["preconditioner"] = torch.eye(key.shape[0], dtype=v.dtype, device=v.device)  # [a, a], P_0 = I
        P, value = preconditioner_write(state["preconditioner"], key, self.preconditioner)
        state["preconditioner"] = P
        return value.reshape(v.shape)


def as_matrix(t: torch.Tensor) -> torch.Tensor:
    """The [a, b] view used by the matrix form: [rows, prod(rest)] for ndim >= 2, one row [1, n] otherwise."""
    return t.reshape(t.shape[0], -1) if t.ndim >= 2 else t.reshape(1, -1)


class DeltaMomentum(_MomentumMemory):
    """Delta Momentum (Sec. 4.4, eqs. 48-49): the momentum memory is trained with the delta (l2 regression) rule.

    Replacing the dot product <m g^T, P> of eq. 46 by the regression ||m g^T - P||^2 adds a gradient-dependent decay
    to the write. The paper's eq. 49 literally reads

        m_{i+1} = m_i (alpha - g_i^T g_i) - eta P_i g_i,

    which has no step size on the decay term and is ambiguous between a matrix and an element-wise product. Both
    explicit forms are offered, with a decay strength delta (eta_d) and the key k = g normalised (see `normalize`):

        form="matrix":       B = as_matrix(b), K = as_matrix(k)           (B, K: [a, b])
                             b <- B (momentum I_b - delta K^T K) + (1 - dampening) g
                             (1-D parameters: b <- momentum b - delta (b . k) k + (1 - dampening) g);
        form="elementwise":  b <- (momentum - delta k * k) * b + (1 - dampening) g.

    The matrix form with delta = 1, normalize=False is eq. 49 as printed (P = I). Each form is exactly one GD step
    of size delta on its regression objective plus the l2 retention of Sec. 4.2, with k = g / s (s = 1 without
    normalisation) and c = (1 - dampening) s / delta:

        matrix:       1/2 ||B K^T - c I_a||_F^2         + (1 - momentum) / (2 delta) ||B||_F^2   (value P = c I_a)
        elementwise:  1/2 sum (b * k - c)^2             + (1 - momentum) / (2 delta) ||b||^2     (value: all c)

    Both reduce to heavy-ball momentum (`torch.optim.SGD`) at delta = 0. Units follow the module docstring: the
    paper's memory is m = -lr b, so the regression targets the descent direction.

    Args:
        params, lr, momentum, dampening, weight_decay: as in `ValueMomentum`.
        delta: eta_d >= 0, the strength of the gradient-dependent decay (0 turns it off).
        form: "elementwise" or "matrix" (above).
        normalize: use k = g / max|g| (elementwise) or k = g / ||g||_F (matrix) as the key, so that every decay
            factor lies in [momentum - delta, momentum]: the memory stays bounded for delta <= 1 + momentum, and
            delta = momentum erases the memory along the key's dominant direction before the write (the
            largest-|g| entry; for the matrix form the whole key when it has rank one): delta-rule forgetting.
            False uses the raw gradient as key, as eq. 49 prints it.
    """

    def __init__(
        self,
        params: Iterable[torch.Tensor] | Iterable[dict[str, Any]],
        lr: float = 1e-3,
        momentum: float = 0.9,
        dampening: float = 0.0,
        weight_decay: float = 0.0,
        delta: float = 0.5,
        form: str = "elementwise",
        normalize: bool = True,
    ):
        _check_common(lr, momentum, dampening, weight_decay)
        if not delta >= 0.0:
            raise ValueError(f"delta must be >= 0, got {delta}")
        if form not in FORMS:
            raise ValueError(f"form must be one of {FORMS}, got {form!r}")
        if not isinstance(normalize, bool):
            raise ValueError(f"normalize must be a bool, got {normalize!r}")
        defaults = dict(lr=lr, momentum=momentum, dampening=dampening, weight_decay=weight_decay, delta=delta,
                        form=form, normalize=normalize)
        super().__init__(params, defaults)

    def _write(self, p: torch.Tensor, buf: torch.Tensor, g: torch.Tensor, group: dict[str, Any]) -> None:
        delta, momentum = group["delta"], group["momentum"]
        if group["form"] == "elementwise":
            self._write_elementwise(buf, g, group)
            return
        key = g / torch.linalg.vector_norm(g).clamp_min(torch.finfo(g.dtype).tiny) if group["normalize"] else g
        b, k = as_matrix(buf), as_matrix(key)  # [a, b], [a, b]
        # B K^T K, associated so the inner product is the smaller of [a, a] and [b, b] (same value).
        forget = (b @ k.T) @ k if b.shape[0] <= b.shape[1] else b @ (k.T @ k)  # [a, b]
        buf.mul_(momentum).sub_(forget.reshape(buf.shape), alpha=delta)
        buf.add_(g, alpha=1.0 - group["dampening"])

    def _write_elementwise(self, buf: torch.Tensor, g: torch.Tensor, group: dict[str, Any]) -> None:
        """b <- (momentum - delta k * k) * b + (1 - dampening) g in at most five full-size kernels and no allocation:
        the decay factor is built in a scratch tensor kept per shape, because fresh full-size temporaries cost more
        than the arithmetic on CPU. delta = 0 takes torch.optim.SGD's two kernels, so it rounds exactly like SGD."""
        delta, momentum, dampening = group["delta"], group["momentum"], group["dampening"]
        if delta == 0:
            buf.mul_(momentum).add_(g, alpha=1.0 - dampening)
            return
        factor = self._scratch(g, "factor", g.shape)  # [*p.shape], the decay factor momentum - delta k * k
        start = self._scratch(g, ("momentum", momentum), ())  # 0-dim, so addcmul can start from it
        if group["normalize"]:
            low, high = torch.aminmax(g)  # one pass, cheaper than abs().amax() or an inf-norm
            torch.div(g, torch.maximum(high, low.neg()).clamp_min(torch.finfo(g.dtype).tiny), out=factor)  # the key
            torch.addcmul(start, factor, factor, value=-delta, out=factor)
        else:
            torch.addcmul(start, g, g, value=-delta, out=factor)
        if dampening == 0:
            torch.addcmul(g, buf, factor, out=buf)  # b * factor + g in one pass
        else:
            buf.mul_(factor).add_(g, alpha=1.0 - dampening)

    def _scratch(self, like: torch.Tensor, name, shape: tuple[int, ...]) -> torch.Tensor:
        """A reusable tensor of this shape on `like`'s dtype and device (not optimiser state: never saved). A
        `("momentum", value)` name is filled with that constant once."""
        cache = self.__dict__.setdefault("_scratch_tensors", {})
        key = (name, tuple(shape), like.dtype, like.device)
        if key not in cache:
            fill = name[1] if isinstance(name, tuple) else 0.0
            cache[key] = torch.full(shape, fill, dtype=like.dtype, device=like.device)
        return cache[key]

