"""Near-orthogonal unit keys for the state-exchange construction of *Understanding Transformer from the Perspective
of Associative Memory* (Zhong, Xu, Ao, Shi; arXiv:2505.19488, App. E, Assumption 1 and App. E.2).

Assumption 1 asks for n unit vectors x_1..x_n in R^d whose coherence max_{i != j} |x_i . x_j| is at most
eps(d, n) < 1/8; the paper shows that d = O(log n) suffices (a probabilistic argument) but gives no construction.
These are practical ones:

    orthonormal          n <= d: the rows of Q from the QR of a Gaussian matrix, eps = 0 (to rounding)
    identity_hadamard    n <= 2d, d a power of 2: e_1..e_d, then the columns of H_d / sqrt(d) (Sylvester's
                         Hadamard matrix), eps = 1/sqrt(d) (0.088 for d = 128)
    optimised            any n: projected gradient descent on sum_{i != j} |G_ij / max|G|| ^ p over the unit sphere
                         (G the Gram matrix); about 0.098 for n = 512, d = 128, where the Welch bound
                         sqrt((n - d) / (d (n - 1))) is 0.077
    gaussian             the negative control: random Gaussian directions, eps about 0.34-0.40 for n = 128-512 at
                         d = 128, so Assumption 1 fails

Shapes: keys are float64 [n, d], one unit key per row.
"""

from __future__ import annotations

import math

import torch

KEY_CONSTRUCTIONS = ("orthonormal", "identity_hadamard", "optimised", "gaussian")


def coherence(keys: torch.Tensor) -> float:
    """max_{i != j} |x_i . x_j| over the rows of `keys` [n, d] (Assumption 1's eps); 0.0 for a single key."""
    if keys.ndim != 2:
        raise ValueError(f"keys must be [n, d], got shape {tuple(keys.shape)}")
    gram = keys @ keys.T  # [n, n]
    gram.fill_diagonal_(0.0)
    return float(gram.abs().max()) if keys.shape[0] > 1 else 0.0


def welch_bound(n: int, d: int) -> float:
    """The least coherence any n unit vectors in R^d can have, sqrt((n - d) / (d (n - 1))) (0 when n <= d)."""
    _check_sizes(n, d)
    return math.sqrt((n - d) / (d * (n - 1))) if n > d else 0.0


def orthonormal_keys(n: int, d: int, *, seed: int = 0) -> torch.Tensor:
    """n orthonormal rows in R^d [n, d] (n <= d): Q of the QR decomposition of a Gaussian d x n matrix."""
    _check_sizes(n, d)
    if n > d:
        raise ValueError(f"n must be <= d for orthonormal keys, got n={n}, d={d}")
    gauss = torch.randn(d, n, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)
    q, _ = torch.linalg.qr(gauss)  # [d, n], orthonormal columns
    return q.T.contiguous()


def sylvester_hadamard(d: int) -> torch.Tensor:
    """Sylvester's Hadamard matrix H_d [d, d] of +-1 entries (d a power of 2), H_d H_d^T = d I."""
    if not isinstance(d, int) or d < 1 or d & (d - 1):
        raise ValueError(f"d must be a power of 2, got {d!r}")
    h = torch.ones(1, 1, dtype=torch.float64)
    while h.shape[0] < d:
        h = torch.cat([torch.cat([h, h], 1), torch.cat([h, -h], 1)], 0)  # [2m, 2m]
    return h


def identity_hadamard_keys(n: int, d: int) -> torch.Tensor:
    """The first n of e_1..e_d, H_d[:, 0] / sqrt(d), .., H_d[:, d-1] / sqrt(d): [n, d] with n <= 2d, d a power of 2;
    the standard basis and the normalised Hadamard columns are mutually unbiased, so eps = 1/sqrt(d) once n > d."""
    _check_sizes(n, d)
    if n > 2 * d:
        raise ValueError(f"n must be <= 2d for identity_hadamard keys, got n={n}, d={d}")
    basis = torch.cat([torch.eye(d, dtype=torch.float64), sylvester_hadamard(d).T / math.sqrt(d)])  # [2d, d]
    return basis[:n].contiguous()


def gaussian_keys(n: int, d: int, *, seed: int = 0) -> torch.Tensor:
    """n random unit rows [n, d]: Gaussian vectors normalised (the control that violates Assumption 1)."""
    _check_sizes(n, d)
    gauss = torch.randn(n, d, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)
    return gauss / gauss.norm(dim=1, keepdim=True)


def optimised_keys(n: int, d: int, *, seed: int = 0, steps: int = 400, power: int = 16, lr_start: float = 0.05,
                   lr_end: float = 0.002) -> torch.Tensor:
    """n unit rows [n, d] of low coherence: from Gaussian directions, `steps` steps of projected gradient descent on
    sum_{i != j} (G_ij / m)^power (m = max_{i != j} |G_ij|, held fixed within a step, `power` even), the step
    decaying geometrically from `lr_start` to `lr_end` (a fraction of the largest gradient row's norm), each row
    renormalised after the step; returns the least coherent iterate seen. About 2 s for n = 512, d = 128."""
    _check_sizes(n, d)
    if not isinstance(steps, int) or steps < 1:
        raise ValueError(f"steps must be a positive int, got {steps!r}")
    if not isinstance(power, int) or power < 2 or power % 2:
        raise ValueError(f"power must be an even int >= 2, got {power!r}")
    if not 0 < lr_end <= lr_start:
        raise ValueError(f"lr_start and lr_end must satisfy 0 < lr_end <= lr_start, got {lr_start}, {lr_end}")
    x = gaussian_keys(n, d, seed=seed).float()  # float32: the descent is 3x faster and the result is renormalised
    off_diagonal = ~torch.eye(n, dtype=torch.bool)
    best, best_coherence = x, coherence(x)
    for step in range(steps):
        lr = lr_start * (lr_end / lr_start) ** (step / max(steps - 1, 1))
        gram = (x @ x.T) * off_diagonal  # [n, n]
        ratio = gram / gram.abs().max()
        grad = _odd_power(ratio, power - 1) @ x  # [n, d], d/dx of the loss up to a constant factor
        grad = grad - (grad * x).sum(1, keepdim=True) * x  # tangent to the sphere
        x = x - lr * grad / grad.norm(dim=1).max()
        x = x / x.norm(dim=1, keepdim=True)
        if step % 10 == 9 or step == steps - 1:
            current = coherence(x)
            if current < best_coherence:
                best, best_coherence = x, current
    best = best.double()
    return best / best.norm(dim=1, keepdim=True)


def make_keys(construction: str, n: int, d: int, *, seed: int = 0) -> torch.Tensor:
    """Keys [n, d] from one of KEY_CONSTRUCTIONS (seeded where random; identity_hadamard ignores the seed)."""
    if construction == "orthonormal":
        return orthonormal_keys(n, d, seed=seed)
    if construction == "identity_hadamard":
        return identity_hadamard_keys(n, d)
    if construction == "optimised":
        return optimised_keys(n, d, seed=seed)
    if construction == "gaussian":
        return gaussian_keys(n, d, seed=seed)
    raise ValueError(f"construction must be one of {KEY_CONSTRUCTIONS}, got {construction!r}")


def _odd_power(x: torch.Tensor, exponent: int) -> torch.Tensor:
    """x ** exponent for an odd exponent by repeated squaring (keeps the sign; cheaper than pow)."""
    result, base, k = x, x * x, (exponent - 1) // 2
    while k:
        if k & 1:
            result = result * base
        base, k = base * base, k >> 1
    return result


def _check_sizes(n: int, d: int) -> None:
    for name, value in (("n", n), ("d", d)):
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise ValueError(f"{name} must be a positive int, got {value!r}")
