"""Kernels kappa(x, y) of a kernelised associative memory, as functions of two vectors (or batches of them), from
*Understanding Transformer from the Perspective of Associative Memory* (Zhong, Xu, Ao, Shi; arXiv:2505.19488,
Sec. 2.1 and App. A): the memory S = sum_j v_j phi(k_j)^T reads S phi(q) = sum_j v_j kappa(k_j, q) (eqs. 8-10).

    linear   kappa = x.y                      (eq. 7)
    relu     kappa = max(0, x.y)              (eqs. 14-15: the ReLU FFN)
    exp      kappa = exp(x.y / tau)           (eqs. 11-13: un-normalised attention; tau = sqrt(d_k) is standard)
    solu     kappa = (x.y) exp(x.y / tau)     (eq. 16: SoLU; the linear factor is not divided by tau)
    round    kappa = round(x.y, decimals)     (Theorem 1's snapping kernel; straight-through gradient)

Each is an elementwise function of the dot product s = x.y (`kernel_of_dot`), computed with the library's
`regmem.ops.common.kernels.score_kernel`. `normalized_weights` divides by the sum over the stored keys (eq. 18; for
exp it is softmax), and `exp_feature_map` is the truncated explicit feature map of eq. 11, whose inner product
tends to exp(x.y) as the order grows.

Shapes: x, y: [..., d] (broadcasting); kernels return [...]. keys: [..., N, d], q: [..., d] -> weights [..., N].
"""

from __future__ import annotations

import math

import torch

from regmem.ops.common.kernels import check_score_kernel, score_kernel

MEMORY_KERNELS = ("linear", "relu", "exp", "solu", "round")  # kappa of a kernelised memory (module docstring)


def check_kernel(name: str, tau: float = 1.0, decimals: int = 0) -> None:
    """Raises ValueError naming the argument unless `name` is in MEMORY_KERNELS, `tau` a positive finite number and
    `decimals` a non-negative int."""
    if name not in MEMORY_KERNELS:
        raise ValueError(f"kernel must be one of {MEMORY_KERNELS}, got {name!r}")
    if isinstance(tau, bool) or not isinstance(tau, (int, float)) or not math.isfinite(tau) or tau <= 0:
        raise ValueError(f"tau must be a positive finite number, got {tau!r}")
    check_score_kernel("kernel", name, decimals)


def kernel_of_dot(name: str, dots: torch.Tensor, *, tau: float = 1.0, decimals: int = 0) -> torch.Tensor:
    """kappa as a function of the dot product s = x.y, elementwise on `dots` (any shape). `tau` is read by exp and
    solu only, `decimals` by round only."""
    check_kernel(name, tau, decimals)
    if name == "exp":
        return score_kernel("exp", dots / tau)
    if name == "solu":  # s exp(s / tau) = tau * (s / tau) exp(s / tau)
        return tau * score_kernel("solu", dots / tau)
    return score_kernel(name, dots, decimals=decimals)


def kernel(name: str, x: torch.Tensor, y: torch.Tensor, *, tau: float = 1.0, decimals: int = 0) -> torch.Tensor:
    """kappa(x, y) for x, y: [..., d] (broadcasting) -> [...]."""
    if x.shape[-1] != y.shape[-1]:
        raise ValueError(f"x and y must share their last dim, got x {tuple(x.shape)} and y {tuple(y.shape)}")
    return kernel_of_dot(name, (x * y).sum(-1), tau=tau, decimals=decimals)


def normalized_weights(name: str, q: torch.Tensor, keys: torch.Tensor, *, tau: float = 1.0,
                       decimals: int = 0) -> torch.Tensor:
    """The normalised read weights of eq. 18, kappa(k_j, q) / sum_l kappa(k_l, q): q [..., d], keys [..., N, d] ->
    [..., N]. For exp this is softmax(keys q / tau). The sum must not vanish (a linear or relu kernel can make it
    0 or negative; the caller chooses the kernel)."""
    scores = kernel(name, keys, q.unsqueeze(-2), tau=tau, decimals=decimals)  # [..., N]
    return scores / scores.sum(-1, keepdim=True)


def exp_feature_map(x: torch.Tensor, order: int, *, tau: float = 1.0) -> torch.Tensor:
    """The explicit exp feature map of eq. 11 truncated after `order` M:

        phi_M(x) = [1, z, z⊗z / sqrt(2!), ..., z^{⊗M} / sqrt(M!)],   z = x / sqrt(tau),

    so phi_M(x).phi_M(y) = sum_{m<=M} (x.y / tau)^m / m!  ->  exp(x.y / tau) (eq. 12). x: [..., d] ->
    [..., 1 + d + d^2 + ... + d^M]; the size grows as d^M, so this is for small d (footnote 5: in finite precision
    the series stops mattering after about the 8th order)."""
    if isinstance(order, bool) or not isinstance(order, int) or order < 0:
        raise ValueError(f"order must be a non-negative int, got {order!r}")
    check_kernel("exp", tau)
    z = x / math.sqrt(tau)
    power = torch.ones_like(z[..., :1])  # z^{⊗0}: [..., 1]
    blocks = [power]
    for m in range(1, order + 1):
        power = (power.unsqueeze(-1) * z.unsqueeze(-2)).flatten(-2)  # z^{⊗m}: [..., d^m]
        blocks.append(power / math.sqrt(math.factorial(m)))
    return torch.cat(blocks, dim=-1)


def relu_ffn(x: torch.Tensor, w_k: torch.Tensor, w_v: torch.Tensor) -> torch.Tensor:
    """The bias-free ReLU FFN of eq. 14, W_V^T relu(W_K x): x [..., d], w_k [m, d], w_v [m, d_v] -> [..., d_v]
    (or a batch of FFNs: x [b, t, d], w_k [b, m, d], w_v [b, m, d_v] -> [b, t, d_v]).
    Row i of W_K is memory key k_i and row i of W_V its value v_i, so this equals sum_i v_i relu(k_i.x): a
    ReLU-kernel memory of N = m pairs with key dimension d."""
    return torch.relu(x @ w_k.mT) @ w_v
