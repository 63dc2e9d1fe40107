"""What a reproduction declares: its name, a line of help, its settings and how it runs and reports.

Each reproduction module ends with `REPRO = Repro(...)`; `regmem.lab.experiments.repro.REPROS` lists them, one line
each, and `regmem repro` takes its choices, help text and dispatch from there.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from regmem.lab.experiments.repro.outputs import write_report

REQUIRED_VARIANTS = ("default", "quick")  # "full" (hours of CPU) where a reproduction has one


@dataclass(frozen=True)
class Repro:
    """One reproduction of a paper's figure or table.

    `variants` maps "default", "quick" (a seconds-long smoke run for tests, not a reproduction) and optionally
    "full" to instances of one frozen settings dataclass. `run(settings, out_dir, *, log=print, progress=True)`
    returns a JSON-able result (runs it stores for resuming go under `out_dir`); `format_report(result)` is the
    paper's claim beside ours; `plot(result, path)` draws the figure at `path` and returns None, or returns the
    figures the runs drew themselves (by name) and draws none.
    `write_outputs(result, out_dir)` writes `<name>.md`, `<name>.json` and `<name>.png` and returns their paths."""

    name: str  # the command-line name, e.g. "ttr-mqar"
    help: str  # one line: paper, figure or table, what runs and roughly how long
    variants: Mapping[str, Any]
    run: Callable[..., dict]
    format_report: Callable[[dict], str]
    plot: Callable[[dict, Path], dict[str, Path] | None]

    def __post_init__(self):
        missing = [v for v in REQUIRED_VARIANTS if v not in self.variants]
        if missing:
            raise ValueError(f"{self.name}: variants must include {list(REQUIRED_VARIANTS)}, missing {missing}")
        kinds = {type(settings) for settings in self.variants.values()}
        if len(kinds) != 1 or not dataclasses.is_dataclass(next(iter(kinds))):
            raise ValueError(f"{self.name}: every variant must be an instance of one settings dataclass, got {kinds}")

    def write_outputs(self, result: dict, out_dir: Path) -> dict[str, Path]:
        """Writes the report, the result and the plot under `out_dir`; returns their paths by kind."""
        paths = write_report(out_dir, self.name, result, self.format_report(result))
        figures = self.plot(result, paths["plot"])
        if figures is not None:
            del paths["plot"]
            paths.update(figures)
        return paths

    def settings(self, variant: str = "default", overrides: Mapping[str, object] | None = None):
        """The variant's settings with the fields in `overrides` replaced (values as `--set` gives them: a tuple
        field takes a comma-separated list). ValueError naming an unknown variant or field, or a bad value."""
        if variant not in self.variants:
            raise ValueError(f"{self.name} has no {variant!r} variant; variants: {', '.join(self.variants)}")
        return replace_fields(self.variants[variant], overrides or {})


def replace_fields(settings, overrides: Mapping[str, object]):
    """`settings` with the fields in `overrides` replaced; unknown fields, and a learning-rate setting (`is_lr_field`)
    with a value that is not a finite number > 0, raise ValueError naming them."""
    known = [f.name for f in dataclasses.fields(settings)]
    unknown = sorted(set(overrides) - set(known))
    if unknown:
        raise ValueError(f"unknown settings {unknown}; known: {known}")
    values = {k: _as_field(k, getattr(settings, k), v) for k, v in overrides.items()}
    for key, value in values.items():
        if is_lr_field(key):
            _check_positive(key, value)
    return dataclasses.replace(settings, **values)


def is_lr_field(name: str) -> bool:
    """A learning rate or a grid of them, or multipliers of one: `lr`, `lrs`, `*_lr`, `*_lrs`, `*_multipliers`."""
    return name in ("lr", "lrs") or name.endswith(("_lr", "_lrs", "_multipliers"))


def _check_positive(key: str, value) -> None:
    items = value if isinstance(value, tuple) else (value,)
    bad = [v for v in items if not (isinstance(v, int | float) and math.isfinite(v) and v > 0)]
    if bad or not items:
        raise ValueError(f"setting {key!r}: every learning rate must be a finite number > 0, got {value!r}")


def _as_field(key: str, default, value):
    """A `--set` value in the shape of the field it replaces: a tuple field takes a comma-separated list
    (`mixers=attn,linear`, `lrs=0.003,0.01`) or one value, each item converted like the field's first item."""
    if not isinstance(default, tuple):
        return value
    items = str(value).split(",") if isinstance(value, str) else [value]
    kind = type(default[0]) if default else str
    try:
        return tuple(kind(item) for item in items)
    except ValueError:
        raise ValueError(f"setting {key!r}: expected comma-separated {kind.__name__} values, got {value!r}") \
            from None
