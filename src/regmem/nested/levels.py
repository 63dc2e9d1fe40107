"""Levels made visible: Nested Learning, arXiv:2512.24695, Sec. 3.2, Definition 2 (update frequency and the order
of components).

A component's frequency is how often its state changes, in tokens (a token is one step of data). Components are
sorted into levels: one level per frequency, the fastest first. Within a level, A comes before B ("A ≻ B") when
computing B at a step needs A at that step; two components of one frequency that do not need each other are
independent ("=^f"), the paper's example being Adam's first and second moments.

A model reports its in-context components through a `levels()` method on any of its submodules, returning dicts
with the keys "tensors" (what changes), "period" (tokens between changes; None: never in context) and optionally
"objective" (what the update minimises), "reset" (a schedule that restarts it) and "independent" (True when it
does not need the component before it, e.g. the parallel levels of an independent CMS). Submodules are visited in
forward order, which is computation order in a regmem LM. Everything the outer optimiser trains is one level below
all of them ("every outer step"), and an optimiser's state sits beside the weights it moves.

    >>> rows = describe_levels(model, optimizer)       # a list of Level
    >>> print(format_levels(rows))                       # a markdown table
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

OUTER = "outer step"


@dataclass(frozen=True)
class Level:
    """One component: its level (1 = fastest), frequency (words), what it is, the tensors that change, the rule, and
    its relation to the component listed before it in the same level ("≻": needs it; "=^f": independent)."""

    level: int
    frequency: str
    component: str
    tensors: str
    rule: str
    order: str


def _frequency(period) -> str:
    if period == OUTER:
        return "every outer step"
    if period is None:
        return "never in context (outer step only)"
    return "every token" if period == 1 else f"every {period} tokens"


def _sort_key(period) -> float:
    if period == OUTER:
        return float("inf")
    return float("inf") - 1 if period is None else float(period)


def describe_levels(model: nn.Module, optimizer: torch.optim.Optimizer | None = None) -> list[Level]:
    """The levels of `model` (and of `optimizer`'s state, when given), fastest first (module docstring)."""
    found = []  # (period, component, tensors, rule, independent)
    for name, module in model.named_modules():
        if not callable(getattr(module, "levels", None)):
            continue
        for row in module.levels():
            found.append((row["period"], name or type(module).__name__, row["tensors"],
                          _rule(row), bool(row.get("independent", False))))
    found += _optimizer_rows(optimizer)  # the weights' step needs the optimiser's state of the same step
    n_outer = sum(p.numel() for p in model.parameters() if p.requires_grad)
    found.append((OUTER, "model", f"{n_outer:,} trained parameters (initial states of every in-context memory "
                  "included)", _optimizer_rule(optimizer), False))
    periods = sorted({row[0] for row in found}, key=_sort_key)
    levels = []
    for number, period in enumerate(periods, start=1):
        rows = [row for row in found if row[0] == period]
        for i, (_, component, tensors, rule, independent) in enumerate(rows):
            order = "" if i == 0 else ("=^f previous" if independent else "≻: needs previous")
            levels.append(Level(number, _frequency(period), component, tensors, rule, order))
    return levels


def _rule(row: dict) -> str:
    parts = [row.get("objective", ""), row.get("reset", "")]
    return "; ".join(p for p in parts if p)


def _optimizer_rule(optimizer) -> str:
    return f"{type(optimizer).__name__} step on the task loss" if optimizer is not None else "the outer optimiser"


def _optimizer_rows(optimizer) -> list[tuple]:
    """Optimiser state: components of the outer level that the weights' step needs."""
    if optimizer is None:
        return []
    name = type(optimizer).__name__
    if isinstance(optimizer, torch.optim.Adam | torch.optim.AdamW):
        return [(OUTER, name, "exp_avg (first moment)", "EMA of gradients: a memory of the gradient stream", False),
                (OUTER, name, "exp_avg_sq (second moment)", "EMA of squared gradients", True)]
    if isinstance(optimizer, torch.optim.SGD) and any(g.get("momentum", 0) for g in optimizer.param_groups):
        return [(OUTER, name, "momentum_buffer", "a memory compressing past gradients (Sec. 4.2, eqs. 10-13)", False)]
    return []


def format_levels(levels: list[Level]) -> str:
    """A markdown table of `describe_levels`' rows."""
    lines = ["| level | updates | component | tensors | rule | order |", "|---|---|---|---|---|---|"]
    lines += [f"| {r.level} | {r.frequency} | {r.component} | {r.tensors} | {r.rule} | {r.order} |" for r in levels]
    return "\n".join(lines)
