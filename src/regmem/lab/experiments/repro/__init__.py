"""Reproductions of the papers' figures and tables: `regmem repro NAME` runs one, prints the paper's claim beside
the measured result and writes a markdown report, JSON and a plot. `REPROS` lists them; each module declares its
own `REPRO` (record.py: name, help line, settings variants, run, report, outputs)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path

from regmem.lab.experiments.repro import (
    am_dag,
    am_heads,
    am_stress,
    am_swap,
    lecture_lineage,
    nl_ablations,
    nl_formal,
    nl_mad,
    nl_niah,
    nl_optimizers,
    ttr_mqar,
    ttr_online,
)
from regmem.lab.experiments.repro.record import Repro

REPROS: dict[str, Repro] = {repro.name: repro for repro in (
    ttr_online.REPRO,
    ttr_mqar.REPRO,
    nl_mad.REPRO,
    nl_niah.REPRO,
    lecture_lineage.REPRO,
    nl_formal.REPRO,
    am_stress.REPRO,
    am_swap.REPRO,
    am_dag.REPRO,
    am_heads.REPRO,
    nl_optimizers.REPRO,
    nl_ablations.REPRO,
)}


def run_repro(name: str, out_dir: str | Path = "results/repro", *, variant: str = "default",
              overrides: Mapping[str, object] | None = None, log: Callable[[str], None] = print,
              progress: bool = True) -> dict[str, Path]:
    """Runs reproduction `name` at `variant` ("default", "quick" or, where it has one, "full") with the settings in
    `overrides` replaced, logs its report and writes its outputs under `out_dir`; returns their paths.
    ValueError for an unknown name, variant or setting, before anything runs."""
    if name not in REPROS:
        raise ValueError(f"unknown reproduction {name!r}; known: {', '.join(REPROS)}")
    repro = REPROS[name]
    settings = repro.settings(variant, overrides)
    out_dir = Path(out_dir)
    result = repro.run(settings, out_dir, log=log, progress=progress)
    paths = repro.write_outputs(result, out_dir)
    log(repro.format_report(result))
    log(f"wrote {', '.join(str(p) for p in paths.values())}")
    return paths


__all__ = ["REPROS", "Repro", "run_repro"]
