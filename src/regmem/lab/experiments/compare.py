"""`regmem compare`: train several mixers on one task under one preset and budget; write a fair leaderboard.

For each mixer (and each value of an optional sweep over a task field) and each learning rate of its grid and
each seed, one run is trained by `train_and_evaluate`, the path `regmem train` takes, evaluated on the validation
split and scored on the test split. The leaderboard gives each mixer the learning rate with the best mean
validation score, and there the mean test score over the seeds, its spread (min-max) and the validation mean
(experiments/protocol.py). The grid is `--lrs`, or `--sweep-lr` for the default grid, or else the
mixer's tuned learning rate for the preset (experiments/tuned.py), or else the preset's.
Outputs go to `<out_dir>/<task>-<timestamp>/` (or `run_dir`, which resumes): leaderboard.md, results.csv,
results.json (every run and every cell) and plot.png (score against the swept value, or a bar chart).

`by_position` (`--by-position`) scores every trained model on the test split by position in the context
(experiments/positions.py: by needle depth for a needle task, else by eighths of the sequence); the leaderboard adds
each cell's curve at its best lr and positions.png draws it. A model with a Continuum Memory System (Hope,
Hope-Attention) is also scored with its CMS frozen (every level's in-context lr 0), as a second curve and a table of
both scores per seed: what the levels' updates within a sequence add.

`eval_lengths` (`--eval-lengths 32,64`) is the length-generalisation split of a task with a `seq_len`: every run,
trained at the task's length, is also scored on fresh sequences of each given length, and the leaderboard adds
those scores at each cell's best learning rate (chosen at the training length); experiments/lengths.py.
"""

from __future__ import annotations

import dataclasses
import datetime
import functools
import json
import math
import statistics
from pathlib import Path

from regmem.lab.experiments import positions
from regmem.lab.experiments.lengths import check_eval_lengths, length_table, refuse_stored_elsewhere, scores_at_lengths
from regmem.lab.experiments.plots import plot_results, pyplot, save_figure
from regmem.lab.experiments.presets import Preset
from regmem.lab.experiments.protocol import (
    SEEDS,
    CellSummary,
    RunStore,
    check_sweep_dir,
    claim_sweep_dir,
    divergence_note,
    execute_bracketed,
    higher_is_better,
    run_grid,
    summarize,
    train_run,
    write_results,
)
from regmem.lab.experiments.runs import Run, build_task
from regmem.lab.experiments.tuned import best_lrs_by_setting, load_tuned, save_tuned, setting_key, tuned_lr
from regmem.tasks import TASKS


def parse_sweep(text: str | None) -> tuple[str | None, list]:
    """"num_kv_pairs=4,8,16" -> ("num_kv_pairs", [4, 8, 16])."""
    if not text:
        return None, [None]
    field, _, values = text.partition("=")
    items = values.split(",")
    if not field or not values or any(not v.strip() for v in items):
        raise ValueError(f"--sweep must look like FIELD=V1,V2,... (a field and numbers, no empty value), got {text!r}")
    try:
        parsed = [float(v) if "." in v else int(v) for v in items]
    except ValueError:
        raise ValueError(f"--sweep values must be numbers, got {values!r}") from None
    return field.replace("-", "_"), parsed


def sweep_settings(task_name: str, preset: Preset, field: str | None) -> dict:
    """What a compare run directory's sweep compares (`protocol.claim_sweep_dir`): its task, preset and swept field;
    mixers, seeds, learning rates and swept values may grow between commands."""
    return {"command": "compare", "task": task_name, "preset": preset.to_dict(), "sweep_field": field}


def sweep_points(sweep: str | None) -> tuple[str | None, list[dict]]:
    """"num_kv_pairs=4,8" -> ("num_kv_pairs", [{"num_kv_pairs": 4}, {"num_kv_pairs": 8}]); no sweep: (None, [{}])."""
    field, values = parse_sweep(sweep)
    return field, [{field: v} if field else {} for v in values]


def planned_runs(task_name: str, mixers: list[str], preset: Preset, settings: list[dict], seeds: list[int],
                 lrs: list[float] | None) -> list[Run]:
    """Every run `compare` trains: each swept setting x mixer x learning rate of its grid x seed."""
    return [run for s in settings for run in run_grid([task_name], mixers, [s], lr_grid(preset, lrs, s), seeds)]


def check_compare_dir(run_dir: str | Path, task_name: str, preset: Preset, field: str | None, runs: list[Run],
                      eval_lengths: tuple[int, ...]) -> None:
    """What an existing run directory must satisfy before a compare starts in it (ValueError, nothing written): a
    sweep of the same task, preset and swept field (`check_sweep_dir`), and, with `eval_lengths`, its stored runs
    scored at those lengths (`refuse_stored_elsewhere`; its message starts with "eval_lengths:")."""
    check_sweep_dir(run_dir, sweep_settings(task_name, preset, field))
    if eval_lengths:
        refuse_stored_elsewhere(runs, RunStore(run_dir, preset), eval_lengths)


def lr_grid(preset: Preset, lrs: list[float] | None, setting: dict | None = None):
    """(task, mixer) -> the learning rates to train: `lrs` if given, else the one tuned at `setting` (or at the
    task's preset point), else the preset's. ValueError naming `lrs` if a given lr is not a finite number > 0."""
    bad = [lr for lr in lrs or () if not (math.isfinite(lr) and lr > 0)]
    if bad:
        raise ValueError(f"lrs: every learning rate must be finite and > 0, got {bad} in {list(lrs)}")

    def grid(task: str, mixer: str) -> list[float]:
        if lrs:
            return list(lrs)
        tuned = tuned_lr(preset.name, task, mixer, setting=setting)
        return [preset.lr if tuned is None else tuned]
    return grid


def lr_source(preset: Preset, lrs: list[float] | None, task: str, mixers: list[str],
              settings: list[dict] = ({},)) -> str:
    if lrs:
        return f"best of the grid {', '.join(f'{lr:g}' for lr in lrs)}"
    table = load_tuned().get(preset.name, {}).get("tasks", {})
    own = [key for key in dict.fromkeys(setting_key(task, s) for s in settings) if key != task and key in table]
    untuned = [m for m in mixers if any(tuned_lr(preset.name, task, m, setting=s) is None for s in settings)]
    text = f"tuned per mixer (src/regmem/lab/experiments/tuned_lr.json, preset {preset.name}"
    text += f", at {', '.join(own)})" if own else ")"
    return text + (f"; not tuned, the preset's {preset.lr:g}: {', '.join(untuned)}" if untuned else "")


class PlanError(ValueError):
    """A compare that cannot start, naming the argument at fault (`argument`: "task", "seeds", "sweep",
    "eval_lengths", "lrs" or "run_dir"), so a command line reports it under its flag."""

    def __init__(self, argument: str, message: str):
        super().__init__(message)
        self.argument = argument


@dataclasses.dataclass(frozen=True)
class ComparePlan:
    """Everything `compare` checked before training: the runs it plans and where they go (`plan_compare`)."""

    task_name: str
    mixers: list[str]
    preset: Preset
    field: str | None
    settings: list[dict]
    lrs: list[float] | None
    run_dir: Path
    runs: list[Run]
    eval_lengths: tuple[int, ...]


def plan_compare(task_name: str, mixers: list[str], preset: Preset, *, sweep: str | None = None,
                 seeds: list[int] = SEEDS, lrs: list[float] | None = None, out_dir: str | Path = "results",
                 run_dir: str | Path | None = None, eval_lengths: tuple[int, ...] = ()) -> ComparePlan:
    """Checks every argument of a compare once, before anything trains or is written: the task, the seeds, the
    sweep (each swept value builds the task), the lengths to score at, the lr grid and an existing run directory.
    Raises PlanError naming the argument."""
    if task_name not in TASKS:
        raise PlanError("task", f"task must be one of {sorted(TASKS)}, got {task_name!r}")
    if not seeds:
        raise PlanError("seeds", "seeds must name at least one seed")
    try:
        field, settings = sweep_points(sweep)
        for setting in settings:
            build_task(task_name, preset, setting)
    except (ValueError, TypeError) as err:
        raise PlanError("sweep", str(err)) from err
    try:
        eval_lengths = check_eval_lengths(task_name, preset, settings, eval_lengths)
    except ValueError as err:
        raise PlanError("eval_lengths", str(err)) from err
    if run_dir is None:
        run_dir = Path(out_dir) / f"{task_name}-{datetime.datetime.now().strftime('%Y%m%d-%H%M%S')}"
    try:
        runs = planned_runs(task_name, mixers, preset, settings, seeds, lrs)
    except ValueError as err:
        raise PlanError("lrs", str(err)) from err
    try:
        check_compare_dir(run_dir, task_name, preset, field, runs, eval_lengths)  # before anything is written
    except ValueError as err:
        message = str(err)
        argument = "eval_lengths" if message.startswith("eval_lengths:") else "run_dir"
        raise PlanError(argument, message) from err
    return ComparePlan(task_name, list(mixers), preset, field, settings, lrs, Path(run_dir), runs, eval_lengths)


def run_compare(plan: ComparePlan, *, progress: bool = True, log=print, workers: int = 1,
                save_tuned_to: str | Path | None = None, device: str = "cpu", cuda_graphs: bool = False,
                extend_grid: int = 0, by_position: bool = False) -> Path:
    """Trains every run of `plan` not yet in its run directory; writes the leaderboard, CSV, JSON and plot; with
    `save_tuned_to`, also each mixer's best lr at each swept setting (tuned.py); with the plan's eval_lengths,
    scores every run at those lengths too (module docstring); device, cuda_graphs: where and how each run trains
    (`train_run`); extend_grid: points a cell's grid may grow past the edge its best lr is at
    (`protocol.execute_bracketed`); by_position: also each run's test accuracy by position (module docstring);
    returns the run directory."""
    preset, run_dir = plan.preset, plan.run_dir
    claim_sweep_dir(run_dir, sweep_settings(plan.task_name, preset, plan.field))
    store = RunStore(run_dir, preset)
    train = functools.partial(train_run, device=device, cuda_graphs=cuda_graphs)
    hooks = ([functools.partial(scores_at_lengths, preset=preset, lengths=plan.eval_lengths)]
             if plan.eval_lengths else []) + ([functools.partial(positions.by_position, preset=preset)]
                                               if by_position else [])
    if hooks:
        train = functools.partial(train, evaluate=functools.partial(_all_of, hooks))
    records = execute_bracketed(plan.runs, preset, store, extend=extend_grid, progress=progress, log=log,
                                workers=workers, train=train)
    summaries = summarize(records)
    source = lr_source(preset, plan.lrs, plan.task_name, plan.mixers, plan.settings)
    if plan.lrs and any(s.grid != sorted(plan.lrs) for s in summaries):
        source += " (a cell whose best lay at an edge grew its grid past it: the lr column lists each cell's grid)"
    if save_tuned_to is not None:
        save_tuned(preset.name, best_lrs_by_setting(summaries), source=str(run_dir), path=save_tuned_to)
        log(f"[compare] tuned learning rates written to {save_tuned_to}")
    board = write_outputs(run_dir, plan.task_name, preset, plan.field, records, summaries, source, plan.eval_lengths)
    log(board)
    log(f"wrote {run_dir}")
    return run_dir


def compare(task_name: str, mixers: list[str], preset: Preset, *, sweep: str | None = None,
            seeds: list[int] = SEEDS, lrs: list[float] | None = None, out_dir: str | Path = "results",
            run_dir: str | Path | None = None, progress: bool = True, log=print, workers: int = 1,
            save_tuned_to: str | Path | None = None, eval_lengths: tuple[int, ...] = (), device: str = "cpu",
            cuda_graphs: bool = False, extend_grid: int = 0, by_position: bool = False) -> Path:
    """`plan_compare` then `run_compare`: trains every (mixer, sweep value, lr, seed) not yet in `run_dir` and
    writes the leaderboard; returns the run directory."""
    plan = plan_compare(task_name, mixers, preset, sweep=sweep, seeds=seeds, lrs=lrs, out_dir=out_dir,
                        run_dir=run_dir, eval_lengths=eval_lengths)
    return run_compare(plan, progress=progress, log=log, workers=workers, save_tuned_to=save_tuned_to,
                       device=device, cuda_graphs=cuda_graphs, extend_grid=extend_grid, by_position=by_position)


def _all_of(hooks, run: Run, trained) -> dict:
    """The evaluate hooks' results in one dict (a picklable `train_run` evaluate for worker processes)."""
    return {key: value for hook in hooks for key, value in hook(run, trained).items()}


def write_outputs(run_dir: Path, task_name: str, preset: Preset, field: str | None, records: list[dict],
                  summaries: list[CellSummary], source: str, eval_lengths: tuple[int, ...] = ()) -> str:
    """Writes the leaderboard, CSV, JSON and plots of a compare into `run_dir`; returns the leaderboard's text."""
    meta = {"task": task_name, "preset": preset.to_dict(), "sweep_field": field, "learning_rates": source}
    cells = [dataclasses.asdict(s) for s in summaries]
    board = leaderboard(task_name, preset, field, summaries, source)
    if eval_lengths:
        board += "\n".join(["", "Scored at other lengths (each cell at its best lr, chosen at its training length T; "
                             "mean (min-max) over its seeds):", "",
                             *length_table(records, summaries, eval_lengths, preset)]) + "\n"
    curves = position_curves(records, summaries)
    if curves:
        title = (f"Test {positions.curve_metric(task_name)} {positions.curve_label(task_name)}, each cell at its best "
                 "lr (mean over its seeds):")
        board += "\n".join(["", title, "", *position_table(task_name, curves)]) + "\n"
        for cell in cells:
            cell["by_position"] = curves.get((cell["mixer"], json.dumps(cell["setting"], sort_keys=True)), [])
        plot_positions(run_dir / "positions.png", task_name, curves)
    frozen = cms_frozen_table(records, summaries)
    if frozen:
        board += "\n".join(["", "The CMS's in-context updates: each model with a CMS scored on the same test sequences "
                             "as trained and with every level's lr set to 0 at test (experiments/positions.py), at "
                             "the cell's best lr, per seed:", "", *frozen]) + "\n"
    write_results(run_dir, [s.row() for s in summaries], {"meta": meta, "cells": cells, "runs": records}, board)
    plot_results(run_dir / "plot.png", task_name, field, summaries)
    return board


def _best_runs(records: list[dict], s: CellSummary) -> list[dict]:
    key = json.dumps(s.setting, sort_keys=True)
    return [r for r in records if r["mixer"] == s.mixer and r["lr"] == s.best_lr
            and json.dumps(r["setting"], sort_keys=True) == key]


def position_curves(records: list[dict], summaries: list[CellSummary]) -> dict[tuple[str, str], list]:
    """(mixer, setting as JSON) -> the mean test curve of the cell's best-lr runs, for runs scored by position; a
    cell whose runs were also scored with the CMS frozen adds ("<mixer> (CMS frozen)", setting)."""
    curves = {}
    for s in summaries:
        key = json.dumps(s.setting, sort_keys=True)
        best = _best_runs(records, s)
        if chosen := [r["by_position"] for r in best if "by_position" in r]:
            curves[s.mixer, key] = positions.mean_curve(chosen)
        if frozen := [r["test_cms_frozen"]["by_position"] for r in best if "test_cms_frozen" in r]:
            curves[f"{s.mixer} (CMS frozen)", key] = positions.mean_curve(frozen)
    return curves


def cms_frozen_table(records: list[dict], summaries: list[CellSummary]) -> list[str]:
    """Per cell with a CMS: its best-lr runs' test score as trained and with the CMS frozen, seed by seed, and the
    test loss both ways (experiments/positions.py, `cms_frozen`)."""
    lines = []
    for s in summaries:
        runs = sorted((r for r in _best_runs(records, s) if "test_cms_frozen" in r), key=lambda r: r["seed"])
        if not runs:
            continue
        trained = [r["test_score"] for r in runs]
        frozen = [r["test_cms_frozen"][s.metric] for r in runs]
        loss = [f"{r['test_metrics']['loss']:.4f} -> {r['test_cms_frozen']['loss']:.4f}" for r in runs]
        lines.append(f"| {s.mixer} | {_setting_words(json.dumps(s.setting, sort_keys=True))} | {s.best_lr:g} | "
                     f"{', '.join(str(r['seed']) for r in runs)} | {', '.join(f'{v:.4f}' for v in trained)} | "
                     f"{', '.join(f'{v:.4f}' for v in frozen)} | "
                     f"{statistics.fmean(frozen) - statistics.fmean(trained):+.4f} | {'; '.join(loss)} |")
    if not lines:
        return []
    metric = summaries[0].metric
    return [f"| mixer | setting | lr | seeds | test {metric} | CMS frozen | frozen - trained (mean) | test loss |",
            "|---|---|---:|---|---|---|---:|---|", *lines]


def position_table(task_name: str, curves: dict) -> list[str]:
    points = positions.curve_points(task_name)
    lines = ["| mixer | setting | " + " | ".join(f"{p:g}" for p in points) + " |", "|---|---|" + "---:|" * len(points)]
    for (mixer, setting), curve in curves.items():
        values = " | ".join("-" if v is None else f"{v:.3f}" for v in curve) if curve else "diverged"
        lines.append(f"| {mixer} | {_setting_words(setting)} | {values} |")
    return lines


def _setting_words(setting_json: str) -> str:
    return " ".join(f"{k}={v}" for k, v in json.loads(setting_json).items()) or "-"


def plot_positions(path: Path, task_name: str, curves: dict) -> None:
    """Test accuracy (text: bits per token) against the position in the context, one line per cell."""
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6, 4), dpi=120)
    points = positions.curve_points(task_name)
    for (mixer, setting), curve in curves.items():
        if curve:
            label = mixer if setting == "{}" else f"{mixer} {_setting_words(setting)}"
            ax.plot(points, [float("nan") if v is None else v for v in curve], marker="o", label=label)
    ax.set_xlabel("needle depth" if positions.is_needle(task_name) else "position (fraction of the sequence)")
    metric = positions.curve_metric(task_name)
    ax.set_ylabel(f"test {metric} (best lr, mean over seeds)")
    if not positions.is_loss_curve(task_name):
        ax.set_ylim(0, 1.02)
    ax.set_title(f"{task_name}: {metric} over the context")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    save_figure(fig, path)


def budget_line(preset: Preset) -> str:
    return (f"preset {preset.name} (d_model {preset.d_model}, {preset.n_layers} layer(s), ffn {preset.ffn}, "
            f"{preset.steps} steps x batch {preset.batch_size}, early stop at accuracy 0.99)")


def leaderboard(task_name: str, preset: Preset, field: str | None, summaries: list[CellSummary],
                source: str) -> str:
    column = field or "-"
    metric = summaries[0].metric
    higher = higher_is_better(metric)
    seeds = sorted({s.seeds for s in summaries})
    note = divergence_note(summaries)
    lines = [
        f"# {task_name}: {budget_line(preset)}",
        "",
        f"Learning rate: {source}; the best is the one with the best mean validation {metric}. Score: test "
        f"{metric}, mean over {'/'.join(map(str, seeds))} seeds at that learning rate, with the min-max over those "
        f"seeds; validation beside it. Test and validation are disjoint held-out splits (tasks/base.py).",
        "",
        *([note, ""] if note else []),
        f"| mixer | {column} | test {metric} | min-max | validation | best lr | lr: mean validation {metric} | "
        f"parameters | state floats | train s | tokens/s |",
        "|---|---:|---:|---:|---:|---:|---|---:|---:|---:|---:|",
    ]
    def order(s: CellSummary):
        value = next(iter(s.setting.values()), 0)
        return (value, -s.mean if higher else s.mean)
    for s in sorted(summaries, key=order):
        value = "" if not s.setting else next(iter(s.setting.values()))
        lines.append(
            f"| {s.mixer} | {value} | {s.shown()} | {s.low:.3f}-{s.high:.3f} | {s.valid_mean:.3f} | {s.best_lr:g} | "
            f"{s.lr_text()} | "
            f"{s.parameters:,} | {s.state_floats:,} | {s.train_seconds:.1f} | {s.tokens_per_second:,.0f} |"
        )
    return "\n".join(lines) + "\n"
