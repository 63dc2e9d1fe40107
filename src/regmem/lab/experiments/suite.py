"""`regmem suite`: many tasks, one table — every mixer on every task under one preset and the fair protocol.

Task names may be groups (`regmem.tasks.TASK_GROUPS`: "mad" is MAD's six tasks, "niah" the three needle
variants, "state_tracking" parity, cycle navigation and modular arithmetic, "languages" the formal languages).
Each task is trained at the preset's point for it
(`Preset.task_points`), each mixer at its tuned learning rate or over a grid, over the seeds
(experiments/protocol.py). The run directory (default `results/suite-<preset>`) keeps every finished run, so the
command repeated after an interruption continues where it stopped, and `reuse` reads the runs of earlier sweeps
(e.g. one per task) so their cells join the table without training again; one progress bar with an ETA covers
all runs.
Outputs: leaderboard.md (mixers x tasks, and per task the cells in detail), results.csv, results.json and
heatmap.png.
"""

from __future__ import annotations

import dataclasses
import functools
import statistics
from pathlib import Path

from regmem.lab.experiments.compare import budget_line, lr_grid, lr_source
from regmem.lab.experiments.plots import plot_heatmap
from regmem.lab.experiments.presets import Preset
from regmem.lab.experiments.protocol import (
    SEEDS,
    CellSummary,
    RunStore,
    claim_sweep_dir,
    divergence_note,
    execute_bracketed,
    run_grid,
    summarize,
    train_run,
    write_results,
)
from regmem.lab.experiments.tuned import best_lrs, save_tuned
from regmem.tasks import TASK_GROUPS, TASKS


def resolve_tasks(names: list[str]) -> list[str]:
    """Task and group names -> task names, groups expanded in place, duplicates dropped."""
    tasks = []
    for name in names:
        if name in TASK_GROUPS:
            tasks += TASK_GROUPS[name]
        elif name in TASKS:
            tasks.append(name)
        else:
            raise ValueError(f"tasks: unknown {name!r}; tasks: {', '.join(TASKS)}; groups: {', '.join(TASK_GROUPS)}")
    return list(dict.fromkeys(tasks))


def suite_settings(preset: Preset) -> dict:
    """What a suite run directory's sweep compares (`protocol.claim_sweep_dir`): its preset; tasks, mixers, seeds and
    learning rates may grow between commands."""
    return {"command": "suite", "preset": preset.to_dict()}


def default_run_dir(preset: Preset) -> Path:
    return Path(f"results/suite-{preset.name}")


def suite(task_names: list[str], mixers: list[str], preset: Preset, *, seeds: list[int] = SEEDS,
          lrs: list[float] | None = None, run_dir: str | Path | None = None, save_tuned_to: str | Path | None = None,
          reuse: list[str | Path] = (), progress: bool = True, log=print, workers: int = 1, device: str = "cpu",
          cuda_graphs: bool = False, extend_grid: int = 0) -> Path:
    """Trains every (task, mixer, lr, seed) not yet in `run_dir` (or in a `reuse` directory, read only); writes
    the mixers x tasks leaderboard, CSV, JSON and heat map; with `save_tuned_to`, also each mixer's best lr per
    task into that tuned-lr table. device, cuda_graphs: where and how each run trains (`train_run`); extend_grid:
    points a cell's grid may grow past the edge its best lr is at (`protocol.execute_bracketed`)."""
    tasks = resolve_tasks(task_names)
    if not mixers:
        raise ValueError("mixers must name at least one mixer")
    if not seeds:
        raise ValueError("seeds must name at least one seed")
    run_dir = Path(run_dir or default_run_dir(preset))
    claim_sweep_dir(run_dir, suite_settings(preset))
    runs = run_grid(tasks, mixers, [{}], lr_grid(preset, lrs), seeds)
    log(f"[suite] {len(tasks)} tasks x {len(mixers)} mixers: {len(runs)} runs into {run_dir}")
    train = functools.partial(train_run, device=device, cuda_graphs=cuda_graphs)
    records = execute_bracketed(runs, preset, RunStore(run_dir, preset, reuse), extend=extend_grid, progress=progress,
                                log=log, workers=workers, train=train)
    summaries = summarize(records)
    sources = {task: lr_source(preset, lrs, task, mixers) for task in tasks}
    write_suite(run_dir, preset, tasks, mixers, records, summaries, sources)
    if save_tuned_to is not None:
        save_tuned(preset.name, best_lrs(summaries), source=str(run_dir), path=save_tuned_to)
        log(f"[suite] tuned learning rates written to {save_tuned_to}")
    log((run_dir / "leaderboard.md").read_text())
    log(f"wrote {run_dir}")
    return run_dir


def write_suite(run_dir: Path, preset: Preset, tasks: list[str], mixers: list[str], records: list[dict],
                summaries: list[CellSummary], sources: dict[str, str]) -> None:
    cell = {(s.task, s.mixer): s for s in summaries}
    meta = {"tasks": tasks, "mixers": mixers, "preset": preset.to_dict(), "learning_rates": sources}
    results = {"meta": meta, "cells": [dataclasses.asdict(s) for s in summaries], "runs": records}
    write_results(run_dir, [s.row() for s in summaries], results, suite_table(preset, tasks, mixers, cell, sources))
    labels = {key: c.shown(digits=2) for key, c in cell.items() if c.diverged}
    plot_heatmap(run_dir / "heatmap.png", tasks, mixers, cell, title=f"suite, preset {preset.name}", labels=labels)


def suite_table(preset: Preset, tasks: list[str], mixers: list[str], cell: dict, sources: dict[str, str]) -> str:
    """The mixers x tasks table (mean test score over seeds at the best lr by validation) and, per task, min-max,
    the validation mean and the best lr."""
    lines = [f"# Suite: {budget_line(preset)}", "",
             "Each cell: the mean test score over seeds at the mixer's learning rate with the best mean validation "
             "score for the task (test and validation are disjoint held-out splits, tasks/base.py); details below.",
             ""]
    note = divergence_note(list(cell.values()))
    lines += [note, ""] if note else []
    header = [f"{t} ({cell[(t, mixers[0])].metric})" if cell[(t, mixers[0])].metric != "accuracy" else t
              for t in tasks]
    lines += ["| mixer | " + " | ".join(header) + " | mean accuracy |",
              "|---|" + "---:|" * (len(tasks) + 1)]
    for m in mixers:
        values = [cell[(t, m)] for t in tasks]
        accuracies = [c.mean for c in values if c.metric == "accuracy"]
        mean = f"{statistics.fmean(accuracies):.3f}" if accuracies else "-"
        lines.append(f"| {m} | " + " | ".join(c.shown() for c in values) + f" | {mean} |")
    for t in tasks:
        metric = cell[(t, mixers[0])].metric
        lines += ["", f"## {t}", "", f"Learning rate: {sources[t]}.", "",
                  f"| mixer | test {metric} | min-max | validation | seeds | best lr | lr: mean validation | "
                  "train s |",
                  "|---|---:|---:|---:|---:|---:|---|---:|"]
        for m in mixers:
            c = cell[(t, m)]
            lines.append(f"| {m} | {c.shown()} | {c.low:.3f}-{c.high:.3f} | {c.valid_mean:.3f} | {c.seeds} | "
                         f"{c.best_lr:g} | {c.lr_text()} | {c.train_seconds:.1f} |")
    return "\n".join(lines) + "\n"
