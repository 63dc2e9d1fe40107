"""Optimisers read as associative memories, as small pure functions.

Behrouz et al., *Nested Learning: The Illusion of Deep Learning Architectures* (arXiv:2512.24695), Sec. 2 eqs. (1)–(3),
Sec. 4.1–4.2 eqs. (29)–(34) and App. B eqs. (100)–(111). Each function is the closed form of one memory write or
one optimal memory; the tests check each against `torch.autograd` and the matching `torch.optim` optimiser.

Conventions. A linear memory `W` of shape `[d_out, d_in]` maps a key `x` (`[d_in]`, or `[N, d_in]` for N pairs) to a
value; its write uses the proximal step size `lr` (eta), i.e. the retention term is `(1/(2 lr)) ||W - W_t||^2`.
Momentum follows eq. (33): the parameter moves by `+m`, so `m` stores *minus* the (scaled) gradient sum. Gradient
histories are stacked on dim 0: `grads` is `[T, *shape]` with the oldest gradient first.

Adam / AdaGrad (App. B). For an element-wise memory fitted to gradients `g_i` with weights `w_i`,

    min_m  sum_i w_i ||m * g_i - P||^2 + lam ||m||^2   (eq. 101)   =>   m* = P * M / (H + lam)   (eq. 102),

with `M = sum_i w_i g_i` and `H = sum_i w_i g_i^2`. With EMA weights (`w_i = (1-beta) beta^(t-i)`) `M` and `H` are
Adam's raw first and second moments; with `P = sqrt(H)` and `lam = 0` the memory is `M / sqrt(H)` (eq. 105).
Mapping to `torch.optim.Adam` (bias correction and eps included), used by `adam_as_optimal_memory`:

    m_hat / (sqrt(v_hat) + eps) = c_t * m*(P = H / (sqrt(H) + eps_t), lam = 0),
    c_t = sqrt(1 - beta2^t) / (1 - beta1^t),   eps_t = eps * sqrt(1 - beta2^t).

`eps = 0` gives `P = sqrt(H)`, the paper's property. With `beta1 != beta2` the two moments use different weights, so
the equivalence is by construction of (102) (two accumulators), not from a single objective; with
`beta1 == beta2` it is the minimiser of one weighted objective (checked in the tests).
"""

from typing import Literal

import torch
from torch import Tensor

__all__ = [
    "adagrad_momentum_memory",
    "adam_as_optimal_memory",
    "elementwise_optimal_memory",
    "ema_moments",
    "ftrl_memory",
    "mlp2_memory_writes",
    "momentum_memory",
    "outer_product_optimal_memory",
    "proximal_dot_product_memory",
]


def proximal_dot_product_memory(weight: Tensor, key: Tensor, error: Tensor, lr: float) -> Tensor:
    """GD as a memory write: `argmin_W <W x, u> + (1/(2 lr)) ||W - W_t||_F^2 = W_t - lr u x^T`.

    Implements eqs. (2), (7)–(9) and (31): the memory maps the key `x` (layer input) to its local surprise
    `u = dL/dy` (output gradient) with a dot-product objective. Stationarity `u x^T + (W - W_t)/lr = 0` gives the
    closed form. `weight`: `[d_out, d_in]`; `key`: `[d_in]` or `[N, d_in]`; `error`: `[d_out]` or `[N, d_out]`
    (N pairs are summed, as a batch gradient is). Returns the new weight, `[d_out, d_in]`.
    """
    key2, error2 = torch.atleast_2d(key), torch.atleast_2d(error)  # [N, d_in], [N, d_out]
    return weight - lr * error2.transpose(0, 1) @ key2


def ftrl_memory(initial_weight: Tensor, grads: Tensor, lr: float) -> Tensor:
    """FTRL form of GD, eq. (3): `argmin_W <sum_s g_s, W> + (1/(2 lr)) ||W - W_1||^2 = W_1 - lr sum_s g_s`.

    `grads`: `[T, *initial_weight.shape]`, the gradients seen so far. Returns `W_{T+1}`.
    """
    return initial_weight - lr * grads.sum(dim=0)


def momentum_memory(momentum_buffer: Tensor, grad: Tensor, lr: float, momentum: float) -> Tensor:
    """Momentum as a memory of gradients, eqs. (12)–(13), (33)–(34): `m_{t+1} = alpha m_t - lr g`.

    This is one GD step of size `lr` on `<m, g> + (c/2) ||m||^2` with `c = (1 - alpha) / lr` (the l2 term is what a
    decay `alpha != 1` means); `alpha = 1` is the proximal dot-product memory `argmin_m <m, g> + ||m - m_t||^2/(2 lr)`.
    The parameter then moves by `+m_{t+1}`. Shapes: `momentum_buffer` and `grad` alike.
    """
    return momentum * momentum_buffer - lr * grad


def ema_moments(grads: Tensor, beta1: float, beta2: float) -> tuple[Tensor, Tensor]:
    """Accumulators of eq. (102) with EMA weights: `M = sum_i (1-b1) b1^(t-i) g_i`, `H = sum_i (1-b2) b2^(t-i) g_i^2`.

    `grads`: `[T, *shape]`, oldest first. Returns `(M, H)`, each `[*shape]` — Adam's un-bias-corrected moments.
    """
    M = torch.zeros_like(grads[0])
    H = torch.zeros_like(grads[0])
    for g in grads:
        M = beta1 * M + (1 - beta1) * g
        H = beta2 * H + (1 - beta2) * g * g
    return M, H


def elementwise_optimal_memory(M: Tensor, H: Tensor, P: Tensor, lam: float = 0.0) -> Tensor:
    """Optimal element-wise memory of App. B, eq. (102): `m* = P * M / (H + lam)`, all element-wise.

    It minimises eq. (101), `sum_i w_i (m * g_i - P)^2 + lam m^2`, per element, given `M = sum w_i g_i` and
    `H = sum w_i g_i^2`. `P = H` (with `lam = 0`) gives momentum GD, eq. (104); `P = sqrt(H)` gives Adam, eq. (105).
    """
    return P * M / (H + lam)


def adam_as_optimal_memory(M: Tensor, H: Tensor, step: int, betas: tuple[float, float], eps: float) -> Tensor:
    """`torch.optim.Adam`'s direction `m_hat / (sqrt(v_hat) + eps)` read from the optimal memory of eq. (102).

    `M`, `H`: Adam's raw (not bias-corrected) moments after `step` steps (see `ema_moments`). Uses the mapping in the
    module docstring: `lam = 0`, property `P = H / (sqrt(H) + eps sqrt(1 - b2^t))` and the scalar bias-correction
    factor `sqrt(1 - b2^t) / (1 - b1^t)`. Elements with `H = 0` give NaN (0/0), as eq. (102) is undefined there.
    """
    beta1, beta2 = betas
    correction2 = 1 - beta2**step
    P = H / (H.sqrt() + eps * correction2**0.5)
    return correction2**0.5 / (1 - beta1**step) * elementwise_optimal_memory(M, H, P, 0.0)


def outer_product_optimal_memory(M: Tensor, H: Tensor, P: Tensor, lam: float) -> Tensor:
    """Outer-product optimal memory, eqs. (106)–(110): `m* = (H + lam I)^{-1} P M`.

    `M`: `[n]` (`sum w_i g_i`); `H`: `[n, n]` (`sum w_i g_i g_i^T`); `P`: `[n, n]`. With `P = I` this is the
    minimiser of `sum_i w_i (<m, g_i> - 1)^2 + lam ||m||^2`. Returns `[n]`.
    """
    eye = torch.eye(H.shape[0], dtype=H.dtype, device=H.device)
    return torch.linalg.solve(H + lam * eye, P @ M)


def adagrad_momentum_memory(M: Tensor, H: Tensor, lam: float) -> Tensor:
    """AdaGrad with momentum as a memory, eq. (111): `(H + lam I)^{-1} H^{1/2} M -> H^{-1/2} M` as `lam -> 0`.

    `M`: `[n]` momentum (any weights); `H`: `[n, n]` symmetric PSD gradient outer-product accumulator. `H^{1/2}` is
    the PSD square root (eigendecomposition), so the memory is full-matrix AdaGrad's preconditioned momentum.
    """
    evals, evecs = torch.linalg.eigh(H)
    sqrt_H = evecs @ torch.diag(evals.clamp_min(0).sqrt()) @ evecs.transpose(0, 1)  # [n, n]
    return outer_product_optimal_memory(M, H, sqrt_H, lam)


def _activation_and_slope(name: str, z: Tensor) -> tuple[Tensor, Tensor]:
    if name == "tanh":
        h = torch.tanh(z)
        return h, 1 - h * h
    if name == "relu":
        return z.clamp_min(0), (z > 0).to(z.dtype)
    if name == "identity":
        return z, torch.ones_like(z)
    raise ValueError(f"activation must be 'tanh', 'relu' or 'identity', got {name!r}")


def mlp2_memory_writes(
    x: Tensor,
    w1: Tensor,
    b1: Tensor,
    w2: Tensor,
    b2: Tensor,
    grad_output: Tensor,
    activation: Literal["tanh", "relu", "identity"] = "tanh",
) -> dict[str, Tensor]:
    """Backprop as associative memory for `y = W2 phi(W1 x + b1) + b2`, eqs. (29)–(31).

    Each layer is a memory that maps its input `x_{l-1}` (key) to its local error `delta_l` (value):
    `delta_2 = dL/dy`, `delta_1 = phi'(z_1) * (W2^T delta_2)` (eq. 29), and the layer's gradient is the sum over the
    batch of `delta_l x_{l-1}^T`, so `proximal_dot_product_memory(W_l, x_{l-1}, delta_l, lr)` is its GD step
    (eqs. 30–31). Shapes: `x` `[N, d_in]`, `w1` `[d_h, d_in]`, `b1` `[d_h]`, `w2` `[d_out, d_h]`, `b2` `[d_out]`,
    `grad_output` `[N, d_out]`. Returns the keys, errors and gradients: `"x1"` (`[N, d_h]`, layer-2 key),
    `"delta1"`, `"delta2"`, `"w1"`, `"b1"`, `"w2"`, `"b2"` (gradients, parameter-shaped).
    """
    z1 = x @ w1.transpose(0, 1) + b1  # [N, d_h]
    x1, slope = _activation_and_slope(activation, z1)
    delta2 = grad_output  # [N, d_out]
    delta1 = slope * (delta2 @ w2)  # [N, d_h]
    return {
        "x1": x1,
        "delta1": delta1,
        "delta2": delta2,
        "w1": delta1.transpose(0, 1) @ x,
        "b1": delta1.sum(dim=0),
        "w2": delta2.transpose(0, 1) @ x1,
        "b2": delta2.sum(dim=0),
    }

