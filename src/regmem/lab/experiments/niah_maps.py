"""NIAH heat maps: train mixers at one length, then score them across lengths x needle depths.

RULER (Hsieh et al., arXiv:2404.06654, Sec. 3.1) and *Nested Learning* (arXiv:2512.24695, Sec. 9.2, Table 1)
score needle-in-a-haystack retrieval at several context lengths; the usual picture is a heat map of accuracy
over length and the needle's depth. `run_niah` trains each mixer on a task of `regmem.tasks.niah` at `train_len`
with the needle anywhere, over a learning-rate grid and seeds (the fair protocol of `regmem compare`), then
`niah_grid` scores every trained model on fresh data at `train_len` x each multiple and at each depth, and
`plot_niah` draws one panel per mixer: the mean over seeds at the mixer's best learning rate.

Outputs go to `<out_dir>/<task>/` (resumable: `runs/` holds one JSON per run, its grid included): a markdown
report (a table per mixer, rows depth, columns length, the seeds' spread), niah.json (the grids, cells, settings
and every run) and niah.png (the heat maps).
"""

from __future__ import annotations

import dataclasses
import functools
import json
from collections.abc import Callable, Sequence
from pathlib import Path

import torch

from regmem.lab.experiments.plots import pyplot
from regmem.lab.experiments.presets import Preset
from regmem.lab.experiments.protocol import (
    SEEDS,
    CellSummary,
    RunStore,
    execute_bracketed,
    run_grid,
    summarize,
    train_run,
)
from regmem.lab.experiments.runs import Run, RunResult, build_task
from regmem.tasks.base import split_seed


def niah_grid(
    model: torch.nn.Module, task, lengths: Sequence[int], depths: Sequence[float], *, num_examples: int, seed: int,
    batch_size: int = 64, metric: str = "accuracy",
) -> torch.Tensor:
    """Scores `model` on `task.with_seq_len(L).with_depth(d)` for every length L and depth d.

    Every cell draws `num_examples` fresh sequences from `seed` (the same seed in every cell, so cells differ
    only by length and depth), runs the model in eval mode without gradients in batches of `batch_size`, and
    reports the task's `metric` ("accuracy": answer tokens; "exact_match": whole answers), averaged over the
    batches by their number of sequences (every NIAH sequence has the same number of answer tokens). The model's
    training mode is restored afterwards. Returns float64 `[len(lengths), len(depths)]`, values in [0, 1].
    """
    if not lengths or not depths:
        raise ValueError(f"lengths and depths must be non-empty, got {list(lengths)} and {list(depths)}")
    device = next(model.parameters()).device
    was_training = model.training
    model.eval()
    grid = torch.zeros(len(lengths), len(depths), dtype=torch.float64)
    try:
        with torch.no_grad():
            for i, length in enumerate(lengths):
                for j, depth in enumerate(depths):
                    inputs, targets = task.with_seq_len(length).with_depth(depth).generate(num_examples, seed=seed)
                    total = 0.0
                    for start in range(0, num_examples, batch_size):
                        batch = slice(start, start + batch_size)
                        logits = model(inputs[batch].to(device))  # [B, T, V]
                        scores = task.metric(logits, targets[batch].to(device))
                        total += scores[metric] * len(inputs[batch])
                    grid[i, j] = total / num_examples
    finally:
        model.train(was_training)
    return grid


def plot_niah(path: Path, grids: dict[str, torch.Tensor], lengths: Sequence[int], depths: Sequence[float],
              title: str) -> None:
    """The NIAH heat map, one panel per mixer: x = context length, y = needle depth (%), colour = accuracy on a
    red (0) to green (1) scale, the value written in each cell. grids: mixer -> `[len(lengths), len(depths)]`."""
    plt = pyplot()
    names = list(grids)
    fig, axes = plt.subplots(1, len(names), figsize=(1.2 + 0.9 * len(lengths) * len(names), 0.6 + 0.5 * len(depths)),
                             dpi=120, squeeze=False, constrained_layout=True)
    image = None
    for ax, name in zip(axes[0], names, strict=True):
        values = torch.as_tensor(grids[name], dtype=torch.float64).T  # [depths, lengths]
        image = ax.imshow(values.numpy(), cmap="RdYlGn", vmin=0.0, vmax=1.0, aspect="auto", origin="upper")
        for j in range(len(depths)):
            for i in range(len(lengths)):
                ax.text(i, j, f"{values[j, i].item():.2f}", ha="center", va="center", fontsize=8)
        ax.set_xticks(range(len(lengths)), [str(length) for length in lengths])
        ax.set_yticks(range(len(depths)), [f"{100 * depth:.0f}" for depth in depths])
        ax.set_xlabel("context length")
        ax.set_title(name)
    axes[0, 0].set_ylabel("needle depth (%)")
    fig.colorbar(image, ax=axes[0].tolist(), label="accuracy", fraction=0.05)
    fig.suptitle(title)
    fig.savefig(path)
    plt.close(fig)


def niah_table(mixer: str, cell: CellSummary, grid: torch.Tensor, seed_means: torch.Tensor, lengths: Sequence[int],
               depths: Sequence[float]) -> list[str]:
    """Markdown lines of one mixer's grid (the mean over seeds at its best lr): rows depth (%), columns length,
    a mean row and the min-max over seeds of each length's mean. seed_means: `[seeds, len(lengths)]`."""
    lines = [f"## {mixer}", "", f"lr {cell.best_lr:g} (best of {', '.join(f'{lr:g}' for lr in cell.lr_means)} by "
             f"validation accuracy at the training length: {cell.lr_text()}), test grid, mean over {cell.seeds} seeds",
             "",
             "| depth \\ length | " + " | ".join(str(length) for length in lengths) + " |",
             "|---|" + "---:|" * len(lengths)]
    for j, depth in enumerate(depths):
        lines.append(f"| {100 * depth:.0f}% | " + " | ".join(f"{grid[i, j]:.3f}" for i in range(len(lengths))) + " |")
    lines.append("| mean | " + " | ".join(f"{grid[i].mean():.3f}" for i in range(len(lengths))) + " |")
    lines.append("| min-max over seeds | " + " | ".join(
        f"{seed_means[:, i].min():.3f}-{seed_means[:, i].max():.3f}" for i in range(len(lengths))) + " |")
    return [*lines, ""]


def run_niah(
    task_name: str, mixers: Sequence[str], preset: Preset, *, train_len: int, multiples: Sequence[int] = (1, 2, 4),
    depths: Sequence[float] = (0.0, 0.25, 0.5, 0.75, 1.0), lrs: Sequence[float] = (1e-2,),
    seeds: Sequence[int] = SEEDS, num_examples: int = 256, out_dir: str | Path = "results", progress: bool = True,
    log: Callable[[str], None] = print, extend_grid: int = 0,
) -> Path:
    """Trains every (mixer, lr, seed) on `task_name` (a NIAH task in `regmem.tasks.TASKS`) at `train_len` under
    the fair protocol (experiments/protocol.py), scores each trained model with `niah_grid` at lengths
    `train_len` x `multiples` and at `depths` on `num_examples` fresh sequences per cell of the test split (the
    run's test seed, tasks/base.py: training and validation read their own), and writes the report, niah.json and
    niah.png into `<out_dir>/<task_name>/`; returns that directory.

    Each mixer is shown at its best learning rate (by mean validation accuracy over the seeds at `train_len`); its heat
    map is the mean over those seeds' test grids, and the report gives the min-max over seeds beside each length's mean.
    Every run is stored under `<out_dir>/<task_name>/runs/`, so the call repeated after an interruption trains only what
    is missing; runs scored on another grid of lengths, depths or examples raise ValueError."""
    lengths = [train_len * multiple for multiple in multiples]
    depths = [float(depth) for depth in depths]
    setting = {"seq_len": train_len}
    task = build_task(task_name, preset, setting)  # the task the cells train on

    def evaluate(run: Run, trained: RunResult) -> dict:
        grid = niah_grid(trained.model, task, lengths, depths, num_examples=num_examples,
                         seed=split_seed(run.seed, "test"))
        return {"lengths": lengths, "depths": depths, "num_examples": num_examples, "grid": grid.tolist()}

    run_dir = Path(out_dir) / task_name
    runs = run_grid([task_name], mixers, [setting], list(lrs), list(seeds))
    log(f"[niah] {task_name}: {len(mixers)} mixers x {len(lrs)} lrs x {len(seeds)} seeds, trained at {train_len}, "
        f"scored at {lengths}")
    records = execute_bracketed(runs, preset, RunStore(run_dir, preset), extend=extend_grid, progress=progress,
                                log=log, train=functools.partial(train_run, evaluate=evaluate))
    stale = [r for r in records if (r["lengths"], r["depths"], r["num_examples"]) != (lengths, depths, num_examples)]
    if stale:
        raise ValueError(f"{run_dir}: {len(stale)} stored runs were scored at lengths {stale[0]['lengths']}, depths "
                         f"{stale[0]['depths']}, {stale[0]['num_examples']} examples; use another out_dir")
    cells = {s.mixer: s for s in summarize(records)}
    best = {m: [r for r in records if r["mixer"] == m and r["lr"] == cells[m].best_lr] for m in mixers}
    stacked = {m: torch.tensor([r["grid"] for r in runs], dtype=torch.float64) for m, runs in best.items()}  # [S, L, D]
    grids = {m: g.mean(0) for m, g in stacked.items()}  # [lengths, depths], mean over seeds
    seed_means = {m: g.mean(2) for m, g in stacked.items()}  # [seeds, lengths], mean over depths
    title = f"{task_name}: trained at {train_len}, preset {preset.name}"
    lines = [f"# {title} (d_model {preset.d_model}, {preset.n_layers} layers, {preset.steps} steps x batch "
             f"{preset.batch_size}; lrs {', '.join(f'{lr:g}' for lr in lrs)}, seeds {', '.join(map(str, seeds))}; "
             f"{num_examples} sequences per cell)", ""]
    for mixer in mixers:
        lines += niah_table(mixer, cells[mixer], grids[mixer], seed_means[mixer], lengths, depths)
    (run_dir / "niah.md").write_text("\n".join(lines))
    meta = {"task": task_name, "task_config": dataclasses.asdict(task.config), "preset": preset.to_dict(),
            "train_len": train_len, "lengths": lengths, "depths": depths, "lrs": list(lrs), "seeds": list(seeds),
            "num_examples": num_examples}
    result = {"meta": meta, "grids": {m: g.tolist() for m, g in grids.items()},
              "seed_means": {m: g.tolist() for m, g in seed_means.items()},
              "cells": {m: dataclasses.asdict(c) for m, c in cells.items()}, "runs": records}
    (run_dir / "niah.json").write_text(json.dumps(result, indent=1))
    plot_niah(run_dir / "niah.png", {f"{m} (lr {cells[m].best_lr:g})": g for m, g in grids.items()}, lengths, depths,
              title)
    log((run_dir / "niah.md").read_text())
    log(f"wrote {run_dir}")
    return run_dir
