"""`regmem compare`: train several mixers on one task with one preset and budget; write a leaderboard.

For each mixer (and each value of an optional sweep over a task field) one cell is trained by `train_cell`, the
path `regmem train` takes, from the same seed on the same generated data, and evaluated on held-out data.
Outputs go to `<out_dir>/<task>-<timestamp>/`: leaderboard.md, results.csv, results.json and plot.png
(accuracy against the swept value, or a bar chart).
"""

from __future__ import annotations

import csv
import dataclasses
import datetime
import json
from pathlib import Path

from regmem.experiments.plots import plot_results
from regmem.experiments.presets import Preset
from regmem.experiments.runs import Cell, train_cell
from regmem.tasks import TASKS


@dataclasses.dataclass(frozen=True)
class RunResult:
    mixer: str
    sweep_value: int | float | None
    accuracy: float
    parameters: int
    state_floats: int  # decoding state per sequence at the task's seq_len (KV cache for attention)
    train_seconds: float
    tokens_per_second: float
    steps: int


def parse_sweep(text: str | None) -> tuple[str | None, list]:
    """"num_kv_pairs=4,8,16" -> ("num_kv_pairs", [4, 8, 16])."""
    if not text:
        return None, [None]
    if "=" not in text:
        raise ValueError(f"--sweep must look like FIELD=V1,V2,..., got {text!r}")
    field, values = text.split("=", 1)
    parsed = [float(v) if "." in v else int(v) for v in values.split(",") if v]
    return field.replace("-", "_"), parsed


def compare(task_name: str, mixers: list[str], preset: Preset, *, sweep: str | None = None, seed: int = 0,
            out_dir: str | Path = "results", progress: bool = True, log=print) -> Path:
    """Runs every (mixer, sweep value); writes the leaderboard, CSV, JSON and plot; returns the run directory."""
    if task_name not in TASKS:
        raise ValueError(f"task must be one of {sorted(TASKS)}, got {task_name!r}")
    field, values = parse_sweep(sweep)
    stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
    run_dir = Path(out_dir) / f"{task_name}-{stamp}"
    run_dir.mkdir(parents=True, exist_ok=False)
    results = []
    for value in values:
        overrides = {field: value} if field else {}
        for mixer in mixers:
            log(f"[compare] {task_name} {mixer} {field or ''}{'=' if field else ''}{value if field else ''}")
            trained = train_cell(Cell(task_name, mixer, preset, seed=seed, task_overrides=overrides), progress=progress)
            results.append(RunResult(mixer=mixer, sweep_value=value, **trained.row()))
            log(f"[compare]   accuracy {trained.accuracy:.3f} in {trained.train_seconds:.1f}s")
    write_outputs(run_dir, task_name, preset, field, results)
    log((run_dir / "leaderboard.md").read_text())
    log(f"wrote {run_dir}")
    return run_dir


def write_outputs(run_dir: Path, task_name: str, preset: Preset, field: str | None, results: list[RunResult]):
    rows = [dataclasses.asdict(r) for r in results]
    with open(run_dir / "results.csv", "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    meta = {"task": task_name, "preset": preset.to_dict(), "sweep_field": field}
    (run_dir / "results.json").write_text(json.dumps({"meta": meta, "results": rows}, indent=1))
    (run_dir / "leaderboard.md").write_text(leaderboard(task_name, preset, field, results))
    plot_results(run_dir / "plot.png", task_name, field, results)


def leaderboard(task_name: str, preset: Preset, field: str | None, results: list[RunResult]) -> str:
    column = field or "-"
    lines = [
        f"# {task_name}: preset {preset.name} (d_model {preset.d_model}, {preset.n_layers} layers, "
        f"{preset.steps} steps x batch {preset.batch_size})",
        "",
        f"| mixer | {column} | accuracy | parameters | state floats | train s | tokens/s |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for r in sorted(results, key=lambda r: (r.sweep_value or 0, -r.accuracy)):
        value = "" if r.sweep_value is None else r.sweep_value
        lines.append(
            f"| {r.mixer} | {value} | {r.accuracy:.3f} | {r.parameters:,} | {r.state_floats:,} | "
            f"{r.train_seconds:.1f} | {r.tokens_per_second:,.0f} |"
        )
    return "\n".join(lines) + "\n"
