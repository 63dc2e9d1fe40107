"""The design space of *Test-time regression* (Wang, Shi, Fox; arXiv:2501.12352, Sec. 3, Fig. 1).

A token mixer memorises key -> value pairs by solving, at every step t,
    m_t = argmin_{m in M} 1/2 sum_{i<=t} gamma_i^(t) ||v_i - m(k_i)||^2      (eq. 8)
and answers y_t = m_t(q_t) (eq. 9). Three choices fix it: the regression weights gamma (`Weights`), the function
class M (`Regressor`) and how the regression is solved (`Solver`). A `Recipe` is one point of that space.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, get_args

WeightsKind = Literal["uniform", "constant_decay", "scalar_decay", "diagonal_decay", "query_similarity"]
RegressorKind = Literal["linear", "feature_linear", "mlp", "kernel", "local_polynomial"]
SolverKind = Literal[
    "analytic", "gd_step", "gd_steps", "sgd", "sgd_adaptive", "sgd_weight_decay", "sgd_momentum", "cg",
    "metric_gd_step", "dgd",
]

def _check_kind(field: str, value: str, kinds) -> None:
    if value not in get_args(kinds):
        raise ValueError(f"{field} must be one of {get_args(kinds)}, got {value!r}")


@dataclass(frozen=True)
class Weights:
    """Which associations matter: the regression weights gamma_i^(t) of eq. (8)."""

    kind: WeightsKind

    def __post_init__(self):
        _check_kind("Weights.kind", self.kind, WeightsKind)

    def __str__(self) -> str:
        return self.kind


@dataclass(frozen=True)
class Regressor:
    """The function class M: linear {k -> M k}, feature-mapped {k -> M phi(k)}, an MLP, an RKHS, or local
    polynomials of degree `degree` (0: Nadaraya-Watson / softmax attention, 1: local linear)."""

    kind: RegressorKind
    degree: int | None = None  # local_polynomial only
    feature_map: str | None = None  # feature_linear (and kernels given by a feature map) only

    def __post_init__(self):
        _check_kind("Regressor.kind", self.kind, RegressorKind)
        if (self.kind == "local_polynomial") != (self.degree is not None):
            raise ValueError("Regressor.degree is set exactly for kind='local_polynomial'")
        if self.degree is not None and self.degree < 0:
            raise ValueError(f"Regressor.degree must be >= 0, got {self.degree}")

    def __str__(self) -> str:
        parts = [self.kind]
        if self.degree is not None:
            parts.append(f"p={self.degree}")
        if self.feature_map is not None:
            parts.append(f"phi={self.feature_map}")
        return " ".join(parts)


@dataclass(frozen=True)
class Solver:
    """How the regression is solved: analytically (one Newton step), by `steps` full-batch gradient steps from
    0, or by streaming SGD (one example per step) with its variants. `metric_gd_step` is one gradient step from 0
    preconditioned by the key second moment S_t = sum_i k_i k_i^T (a data-adaptive metric; Newton would use an
    inverse second moment) — second-order HLA, which is outside the TTR paper's taxonomy. `dgd` is Delta Gradient
Descent with weight decay (Nested Learning, arXiv:2512.24695, eq. 88): SGD whose decay also depends on the state."""

    kind: SolverKind
    steps: int = 1  # gradient steps per token (gd_steps) or per example (sgd variants)

    def __post_init__(self):
        _check_kind("Solver.kind", self.kind, SolverKind)
        if self.steps < 1:
            raise ValueError(f"Solver.steps must be >= 1, got {self.steps}")

    def __str__(self) -> str:
        return self.kind if self.steps == 1 else f"{self.kind} x{self.steps}"


@dataclass(frozen=True)
class Recipe:
    """One point of the design space: (weights, regressor, solver). A value: the mixer at a point is built by
    `regmem.layers.build_mixer(recipe, d_model, n_heads)`, which sits above this package."""

    weights: Weights
    regressor: Regressor
    solver: Solver

    def __str__(self) -> str:
        return f"Recipe({self.weights}, {self.regressor}, {self.solver})"
