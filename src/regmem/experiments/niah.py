"""NIAH heat maps: train mixers at one length, then score them across lengths x needle depths.

RULER (Hsieh et al., arXiv:2404.06654, Sec. 3.1) and *Nested Learning* (arXiv:2512.24695, Sec. 9.2, Table 1)
score needle-in-a-haystack retrieval at several context lengths; the usual picture is a heat map of accuracy
over length and the needle's depth. `run_niah` trains each mixer on a task of `regmem.tasks.niah` at `train_len`
with the needle anywhere (`train_cell`, the path of `regmem compare`), then `niah_grid` scores the trained model
on fresh data at `train_len` x each multiple and at each depth, and `plot_niah` draws one panel per mixer.

Outputs go to `<out_dir>/<task>-<timestamp>/`: a markdown report named after the module (a table per mixer,
rows depth, columns length), niah.json (the grids, the settings and each mixer's training row) and niah.png
(the heat maps).
"""

from __future__ import annotations

import dataclasses
import datetime
import json
from collections.abc import Callable, Sequence
from pathlib import Path

import matplotlib
import torch

from regmem.experiments.presets import Preset
from regmem.experiments.runs import Cell, build_task, train_cell

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


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


def niah_table(mixer: str, grid: torch.Tensor, lengths: Sequence[int], depths: Sequence[float]) -> list[str]:
    """Markdown lines of one mixer's grid: rows depth (%), columns length, and a mean row."""
    lines = [f"## {mixer}", "", "| depth \\ length | " + " | ".join(str(length) for length in lengths) + " |",
             "|---|" + "---:|" * len(lengths)]
    for j, depth in enumerate(depths):
        lines.append(f"| {100 * depth:.0f}% | " + " | ".join(f"{grid[i, j]:.3f}" for i in range(len(lengths))) + " |")
    lines.append("| mean | " + " | ".join(f"{grid[i].mean():.3f}" for i in range(len(lengths))) + " |")
    return [*lines, ""]


def run_niah(
    task_name: str, mixers: Sequence[str], preset: Preset, *, train_len: int, multiples: Sequence[int] = (1, 2, 4),
    depths: Sequence[float] = (0.0, 0.25, 0.5, 0.75, 1.0), seed: int = 0, num_examples: int = 256,
    out_dir: str | Path = "results", progress: bool = True, log: Callable[[str], None] = print,
) -> Path:
    """Trains every mixer on `task_name` (a NIAH task in `regmem.tasks.TASKS`) at `train_len` with the preset,
    scores it with `niah_grid` at lengths `train_len` x `multiples` and at `depths` on `num_examples` fresh
    sequences per cell (seed + 2: training uses seed, its evaluation seed + 1), writes the markdown report,
    niah.json and niah.png into a new directory under `out_dir`, and returns that directory."""
    lengths = [train_len * multiple for multiple in multiples]
    task = build_task(task_name, preset, {"seq_len": train_len})  # the task the cells train on
    stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
    run_dir = Path(out_dir) / f"{task_name}-{stamp}"
    run_dir.mkdir(parents=True, exist_ok=False)
    grids, rows = {}, {}
    for mixer in mixers:
        log(f"[niah] {task_name} {mixer}: training at length {train_len}")
        trained = train_cell(Cell(task_name, mixer, preset, seed=seed, task_overrides={"seq_len": train_len}),
                             progress=progress)
        rows[mixer] = trained.row()
        log(f"[niah]   accuracy {trained.accuracy:.3f} in {trained.train_seconds:.1f}s; scoring lengths {lengths}")
        grids[mixer] = niah_grid(trained.model, task, lengths, list(depths), num_examples=num_examples,
                                 seed=seed + 2)
        log("[niah]   mean accuracy by length: " + ", ".join(
            f"{length}: {grids[mixer][i].mean():.3f}" for i, length in enumerate(lengths)))
    title = f"{task_name}: trained at {train_len}, preset {preset.name}"
    lines = [f"# {title} (d_model {preset.d_model}, {preset.n_layers} layers, {preset.steps} steps x batch "
             f"{preset.batch_size}; {num_examples} sequences per cell)", ""]
    for mixer in mixers:
        lines += niah_table(mixer, grids[mixer], lengths, depths)
    (run_dir / "niah.md").write_text("\n".join(lines))
    meta = {"task": task_name, "task_config": dataclasses.asdict(task.config), "preset": preset.to_dict(),
            "train_len": train_len, "lengths": lengths, "depths": list(depths), "seed": seed,
            "num_examples": num_examples}
    result = {"meta": meta, "grids": {m: g.tolist() for m, g in grids.items()}, "train": rows}
    (run_dir / "niah.json").write_text(json.dumps(result, indent=1))
    plot_niah(run_dir / "niah.png", grids, lengths, depths, title)
    log((run_dir / "niah.md").read_text())
    log(f"wrote {run_dir}")
    return run_dir
