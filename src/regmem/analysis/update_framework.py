"""The memory-update framework of *Understanding Transformer from the Perspective of Associative Memory* (Zhong,
Xu, Ao, Shi; arXiv:2505.19488, Sec. 2.2, Table 2, App. B): every memory of its Table 2 is one recurrence

    S_t = A_t S_{t-1} B_t + C_t                                                  (eq. 35)

and, when A_t and B_t are symmetric, one gradient step with unit learning rate, S_t = S_{t-1} - dL_t/dS_{t-1},
on the objective (eq. 36, App. B.1 eqs. 59-64)

    L_t(S) = 1/2 tr(S^T S) - 1/2 tr(S^T A_t S B_t) - tr(C_t^T S).

Convention (the paper's): the memory S: [V, K] maps a key to a value, the read is o = S phi(q); A_t: [V, V] acts
on the value dimension, B_t: [K, K] on the key (feature) dimension, C_t: [V, K] is the write. regmem's ops keep
the transpose, S_ops = S^T: [K, V], and read o = S_ops^T q (= S q). In their layout the same step is
S_ops,t = B_t^T S_ops,t-1 A_t^T + C_t^T, so a gate of the ops on the K rows of S_ops (the diagonal gate of
`gated_linear_attn`, `gated_delta_rule`) is a B_t here, while the paper's GLA gate diag(lambda_t) is an A_t on
the value dimension. A scalar gate is the same in both.

The presets below return one `MemoryStep` per token (t = 1..T) for the rows of Table 2, each with the row's
objective; `unroll` runs the recurrence. Two printed objectives are wrong and are kept, named `paper_...`, so
that a test shows it:
  - gated softmax (Table 2 row 7 and eq. 81, which agree): a step on the printed
    1/t (1/2 ||diag(sqrt(1 - lambda_t)) S||_F^2 - <S phi(k_t), v_t>) gives (t-1+lambda_t)/t S_{t-1} where the
    update has (t-1)/t lambda_t S_{t-1}, off by ((t-2)(1-lambda_t) + 1)/t S_{t-1} at every t (at lambda_t = 1 it
    loses eq. 80's 1/(2t) ||S||_F^2 and does not decay at all); the exact objective is
    1/2 ||diag(sqrt(1 - (t-1)/t lambda_t)) S||_F^2 - 1/t <S phi(k_t), v_t>;
  - DeltaNet + momentum (eq. 76): the sum must read sum_i (prod_{j=i+1}^t eta_j) <S k_i, v_i> (as in Table 2),
    not <S k_t, v_t> under the sum.
Eq. 69 writes the GLA regulariser as "1/2 diag(1 - lambda) ||S||_F^2"; it means
1/2 tr(S^T diag(1 - lambda) S) = 1/2 ||diag(sqrt(1 - lambda)) S||_F^2, which is what is implemented.

Legend: T tokens, K key dim (or feature dim m of phi), V value dim. Everything is unbatched and keeps the dtype
of its inputs (use float64 for the identities).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Literal, get_args

import torch

Objective = Callable[[torch.Tensor], torch.Tensor]
Version = Literal["corrected", "paper"]  # an objective of Table 2 made exact, or as printed (module docstring)


@dataclass(frozen=True)
class MemoryStep:
    """One step of eq. (35): S_t = A S_{t-1} B + C, and the objective L_t of Table 2 it descends.

    A: [V, V] (value dimension); B: [K, K] (key / feature dimension); C: [V, K] (the write);
    objective: S_prev [V, K] -> scalar, with S_prev - dL/dS_prev = A S_prev B + C."""

    A: torch.Tensor
    B: torch.Tensor
    C: torch.Tensor
    objective: Objective

    def apply(self, S: torch.Tensor) -> torch.Tensor:
        """S_{t-1}: [V, K] -> S_t = A S_{t-1} B + C: [V, K]."""
        return self.A @ S @ self.B + self.C


def unroll(steps: Sequence[MemoryStep], initial_state: torch.Tensor | None = None) -> torch.Tensor:
    """Runs eq. (35) over `steps` from `initial_state` ([V, K], None for zeros).

    Returns the states [T + 1, V, K]: S_0, S_1, ..., S_T (S_T is the memory after the last token)."""
    if not steps:
        raise ValueError("steps must hold at least one MemoryStep, got an empty sequence")
    S = torch.zeros_like(steps[0].C) if initial_state is None else initial_state
    if S.shape != steps[0].C.shape:
        raise ValueError(f"initial_state must have shape [V, K] = {list(steps[0].C.shape)}, got {list(S.shape)}")
    states = [S]
    for step in steps:
        S = step.apply(S)
        states.append(S)
    return torch.stack(states)  # [T + 1, V, K]


# ---------------------------------------------------------------------------------------------------------------
# The general objective (eq. 36)


def boxed_formula(S: torch.Tensor, A: torch.Tensor, B: torch.Tensor, C: torch.Tensor) -> torch.Tensor:
    """1/2 tr(S^T S) - 1/2 tr(S^T A S B) - tr(C^T S) (eq. 36) for S, C: [V, K], A: [V, V], B: [K, K].

    No symmetry check: its gradient is S - (A S B + A^T S B^T)/2 - C, the update S - A S B - C only when A and
    B are symmetric (eq. 63). Use `general_objective` for the checked form."""
    return 0.5 * (S * S).sum() - 0.5 * (S * (A @ S @ B)).sum() - (C * S).sum()


def _check_symmetric(name: str, M: torch.Tensor) -> None:
    if M.ndim != 2 or M.shape[0] != M.shape[1]:
        raise ValueError(f"{name} must be a square matrix, got shape {list(M.shape)}")
    tol = 1e-12 * max(1.0, M.abs().max().item())
    if (M - M.mT).abs().max().item() > tol:
        raise ValueError(f"{name} must be symmetric: S - A S B is a gradient field only for symmetric A and B "
                         "(arXiv:2505.19488, eq. 63)")


def general_objective(A: torch.Tensor, B: torch.Tensor, C: torch.Tensor) -> Objective:
    """The objective of eq. (36) for one step (A: [V, V], B: [K, K], C: [V, K]), as a function of S: [V, K].

    Raises ValueError unless A and B are symmetric: otherwise no objective has S - A S B - C as its gradient."""
    _check_symmetric("A", A)
    _check_symmetric("B", B)
    if C.shape != (A.shape[0], B.shape[0]):
        raise ValueError(f"C must have shape [V, K] = {[A.shape[0], B.shape[0]]}, got {list(C.shape)}")
    return partial(boxed_formula, A=A, B=B, C=C)


def step_objective(step: MemoryStep) -> Objective:
    """The general objective (eq. 36) of a step, next to the row's own `step.objective` (equal up to a constant)."""
    return general_objective(step.A, step.B, step.C)


# ---------------------------------------------------------------------------------------------------------------
# The objectives of Table 2 (App. B.2), each a function of S = S_{t-1}: [V, K]


def _read(S: torch.Tensor, key: torch.Tensor, value: torch.Tensor) -> torch.Tensor:
    """<S k, v> = tr((v k^T)^T S) (eq. 67)."""
    return value @ S @ key


def _gated_norm(S: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """1/2 ||diag(sqrt(weight)) S||_F^2 = 1/2 tr(S^T diag(weight) S) for weight: [V] (eq. 69, corrected notation)."""
    return 0.5 * (weight[:, None] * S * S).sum()


def linear_objective(S, key, value):
    """Linear attention (eq. 34): -<S k_t, v_t>; unbounded below."""
    return -_read(S, key, value)


def gla_objective(S, key, value, retention):
    """Gated linear attention (eq. 69): -<S k_t, v_t> + 1/2 ||diag(sqrt(1 - lambda_t)) S||_F^2; lambda_t: [V]."""
    return -_read(S, key, value) + _gated_norm(S, 1.0 - retention)


def deltanet_objective(S, key, value, beta):
    """DeltaNet (eq. 71) with step size beta_t: beta_t / 2 ||S k_t - v_t||^2."""
    return 0.5 * beta * (S @ key - value).pow(2).sum()


def momentum_objective(S, key, keys, values, weights):
    """DeltaNet + momentum (Table 2; eq. 76 corrected): 1/2 ||S k_t||^2 - sum_{i<=t} w_i <S k_i, v_i> with
    w_i = prod_{j=i+1}^t eta_j. keys: [t, K], values: [t, V], weights: [t]."""
    return 0.5 * (S @ key).pow(2).sum() - (weights * ((values @ S) * keys).sum(-1)).sum()


def paper_momentum_objective(S, key, value, weights):
    """Eq. 76 as printed: 1/2 ||S k_t||^2 - sum_{i<=t} w_i <S k_t, v_t>. Wrong: its step is not the update."""
    return 0.5 * (S @ key).pow(2).sum() - weights.sum() * _read(S, key, value)


def normalized_softmax_objective(S, feature, value, t):
    """Softmax attention with normalisation (eq. 80): 1/t (1/2 ||S||_F^2 - <S phi(k_t), v_t>)."""
    return (0.5 * (S * S).sum() - _read(S, feature, value)) / t


def gated_softmax_objective(S, feature, value, retention, t):
    """Gated softmax attention (FoX), corrected: 1/2 ||diag(sqrt(1 - (t-1)/t lambda_t)) S||_F^2
    - 1/t <S phi(k_t), v_t>; lambda_t: [V]."""
    return _gated_norm(S, 1.0 - (t - 1) / t * retention) - _read(S, feature, value) / t


def paper_gated_softmax_objective(S, feature, value, retention, t):
    """Table 2 (row 7) and eq. 81 as printed: 1/t (1/2 ||diag(sqrt(1 - lambda_t)) S||_F^2 - <S phi(k_t), v_t>),
    GLA's objective (eq. 69) divided by t; lambda_t: [V]. Wrong: its gradient step gives (t-1+lambda_t)/t S
    (row-wise) where the gated-softmax update has (t-1)/t lambda_t S, off by ((t-2)(1-lambda_t) + 1)/t S."""
    return (_gated_norm(S, 1.0 - retention) - _read(S, feature, value)) / t


# ---------------------------------------------------------------------------------------------------------------
# The rows of Table 2 as step sequences


def _check_pairs(keys: torch.Tensor, values: torch.Tensor, key_name: str = "keys") -> tuple[int, int, int]:
    if keys.ndim != 2 or values.ndim != 2 or keys.shape[0] != values.shape[0]:
        raise ValueError(f"{key_name} must be [T, K] and values [T, V] with one T, got {list(keys.shape)} and "
                         f"{list(values.shape)}")
    return keys.shape[0], keys.shape[1], values.shape[1]


def _check_per_token(name: str, x: torch.Tensor, T: int, low: float, high: float) -> None:
    if x.shape != (T,):
        raise ValueError(f"{name} must have shape [T] = [{T}], got {list(x.shape)}")
    if ((x < low) | (x > high)).any().item():
        raise ValueError(f"{name} must lie in [{low}, {high}]")


def _value_retention(retention: torch.Tensor, T: int, V: int) -> torch.Tensor:
    """retention lambda: [T] (scalar gate) or [T, V] (diagonal on the value dimension), in [0, 1] -> [T, V]."""
    if retention.shape not in ((T,), (T, V)):
        raise ValueError(f"retention must have shape [T] = [{T}] or [T, V] = [{T}, {V}], got {list(retention.shape)}")
    if ((retention < 0) | (retention > 1)).any().item():
        raise ValueError("retention must lie in [0, 1] (lambda_t of Table 2)")
    return retention[:, None].expand(T, V) if retention.ndim == 1 else retention


def _eye(n: int, like: torch.Tensor) -> torch.Tensor:
    return torch.eye(n, dtype=like.dtype, device=like.device)


def _write(value: torch.Tensor, key: torch.Tensor) -> torch.Tensor:
    return value[:, None] * key[None, :]  # [V, K], v k^T


def linear_attention_steps(keys: torch.Tensor, values: torch.Tensor) -> list[MemoryStep]:
    """Linear attention (Table 2 row 1, eqs. 32-34): A = I, B = I, C = v_t k_t^T. keys: [T, K], values: [T, V]."""
    T, K, V = _check_pairs(keys, values)
    eye_v, eye_k = _eye(V, keys), _eye(K, keys)
    return [MemoryStep(eye_v, eye_k, _write(v, k), partial(linear_objective, key=k, value=v))
            for k, v in zip(keys, values, strict=True)]


def gated_linear_attention_steps(keys: torch.Tensor, values: torch.Tensor,
                                 retention: torch.Tensor) -> list[MemoryStep]:
    """Gated linear attention (Table 2 row 2, eqs. 68-69): A = diag(lambda_t) on the value dimension, B = I,
    C = v_t k_t^T. keys: [T, K], values: [T, V]; retention lambda: [T] (scalar gate) or [T, V], in [0, 1]."""
    T, K, V = _check_pairs(keys, values)
    lam = _value_retention(retention, T, V)  # [T, V]
    eye_k = _eye(K, keys)
    return [MemoryStep(torch.diag(l), eye_k, _write(v, k), partial(gla_objective, key=k, value=v, retention=l))
            for k, v, l in zip(keys, values, lam, strict=True)]


def deltanet_steps(keys: torch.Tensor, values: torch.Tensor, beta: torch.Tensor | None = None) -> list[MemoryStep]:
    """DeltaNet (Table 2 row 3, eqs. 70-71) with step size beta_t: A = I, B = I - beta_t k_t k_t^T,
    C = beta_t v_t k_t^T. keys: [T, K], values: [T, V]; beta: [T], >= 0, or None for the paper's beta = 1."""
    T, K, V = _check_pairs(keys, values)
    beta = keys.new_ones(T) if beta is None else beta
    _check_per_token("beta", beta, T, 0.0, float("inf"))
    eye_v, eye_k = _eye(V, keys), _eye(K, keys)
    return [MemoryStep(eye_v, eye_k - b * _write(k, k), b * _write(v, k),
                       partial(deltanet_objective, key=k, value=v, beta=b))
            for k, v, b in zip(keys, values, beta, strict=True)]


def deltanet_momentum_steps(keys: torch.Tensor, values: torch.Tensor, momentum: torch.Tensor,
                            *, objective: Version = "corrected") -> list[MemoryStep]:
    """DeltaNet + momentum (Table 2 row 4, eqs. 72-76): A = I, B = I - k_t k_t^T,
    C_t = eta_t C_{t-1} + v_t k_t^T = sum_{i<=t} (prod_{j=i+1}^t eta_j) v_i k_i^T (C_0 = 0, so eta_1 is unused).

    keys: [T, K], values: [T, V]; momentum eta: [T] in [0, 1]. objective: "corrected" (Table 2) or "paper"
    (eq. 76 as printed, which does not give the update)."""
    T, K, V = _check_pairs(keys, values)
    _check_per_token("momentum", momentum, T, 0.0, 1.0)
    if objective not in get_args(Version):
        raise ValueError(f"objective must be one of {get_args(Version)}, got {objective!r}")
    eye_v, eye_k = _eye(V, keys), _eye(K, keys)
    steps, weights, C = [], keys.new_zeros(0), keys.new_zeros(V, K)
    for t in range(T):
        k, v = keys[t], values[t]
        C = momentum[t] * C + _write(v, k)  # [V, K]
        weights = torch.cat([momentum[t] * weights, keys.new_ones(1)])  # [t + 1], prod_{j=i+1}^t eta_j
        if objective == "corrected":
            L = partial(momentum_objective, key=k, keys=keys[: t + 1], values=values[: t + 1], weights=weights)
        else:
            L = partial(paper_momentum_objective, key=k, value=v, weights=weights)
        steps.append(MemoryStep(eye_v, eye_k - _write(k, k), C, L))
    return steps


def unnormalized_softmax_steps(features: torch.Tensor, values: torch.Tensor) -> list[MemoryStep]:
    """Softmax attention without normalisation (Table 2 row 5, eq. 3): linear attention on phi(k_t), with phi an
    explicit finite feature map (exp(q^T k) ~ phi(q)^T phi(k), eq. 11). features phi(k): [T, m], values: [T, V]."""
    _check_pairs(features, values, "features")
    return linear_attention_steps(features, values)


def normalized_softmax_steps(features: torch.Tensor, values: torch.Tensor) -> list[MemoryStep]:
    """Softmax attention with normalisation (Table 2 row 6, eqs. 77-80): A = (t-1)/t I, B = I,
    C = 1/t v_t phi(k_t)^T, so S_t = 1/t sum_{i<=t} v_i phi(k_i)^T (eq. 79). features: [T, m], values: [T, V]."""
    T, m, V = _check_pairs(features, values, "features")
    eye_v, eye_m = _eye(V, features), _eye(m, features)
    return [MemoryStep((t - 1) / t * eye_v, eye_m, _write(v, f) / t,
                       partial(normalized_softmax_objective, feature=f, value=v, t=t))
            for t, (f, v) in enumerate(zip(features, values, strict=True), start=1)]


def gated_softmax_steps(features: torch.Tensor, values: torch.Tensor, retention: torch.Tensor,
                        *, objective: Version = "corrected") -> list[MemoryStep]:
    """Gated softmax attention, FoX (Table 2 row 7, eq. 81): A = (t-1)/t diag(lambda_t) on the value dimension,
    B = I, C = 1/t v_t phi(k_t)^T.

    features phi(k): [T, m], values: [T, V]; retention lambda: [T] or [T, V] in [0, 1]. objective: "corrected"
    (exact) or "paper" (Table 2 as printed, which does not give the update)."""
    T, m, V = _check_pairs(features, values, "features")
    lam = _value_retention(retention, T, V)  # [T, V]
    if objective not in get_args(Version):
        raise ValueError(f"objective must be one of {get_args(Version)}, got {objective!r}")
    L = gated_softmax_objective if objective == "corrected" else paper_gated_softmax_objective
    eye_m = _eye(m, features)
    return [MemoryStep((t - 1) / t * torch.diag(l), eye_m, _write(v, f) / t,
                       partial(L, feature=f, value=v, retention=l, t=t))
            for t, (f, v, l) in enumerate(zip(features, values, lam, strict=True), start=1)]
