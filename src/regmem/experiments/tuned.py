"""Tuned learning rates: each mixer's best learning rate per task from a committed sweep, used by the presets.

`src/regmem/experiments/tuned_lr.json` holds, per preset name, the directory of the sweep it came from (under
`benchmarks/results/`) and {task: {mixer: lr}}. `regmem compare` and `regmem suite` train a mixer at its tuned
learning rate when the table has one and the grid is not given (`--lrs`, `--sweep-lr`); otherwise at the
preset's. `regmem suite --sweep-lr --save-tuned` writes the table from a new sweep.
"""

from __future__ import annotations

import json
import statistics
from pathlib import Path

from regmem.experiments.protocol import higher_is_better

TUNED_FILE = Path(__file__).with_name("tuned_lr.json")


def load_tuned(path: str | Path = TUNED_FILE) -> dict:
    path = Path(path)
    return json.loads(path.read_text()) if path.exists() else {}


def tuned_lr(preset_name: str, task: str, mixer: str, path: str | Path = TUNED_FILE) -> float | None:
    """The committed best learning rate of `mixer` on `task` under the preset, or None if it was not swept."""
    return load_tuned(path).get(preset_name, {}).get("tasks", {}).get(task, {}).get(mixer)


def best_lrs(summaries) -> dict[str, dict[str, float]]:
    """{task: {mixer: lr}} from protocol summaries: the lr whose mean score, averaged over the cell's settings,
    is best (ties: the smaller lr)."""
    grouped: dict[tuple[str, str], list] = {}
    for s in summaries:
        grouped.setdefault((s.task, s.mixer), []).append(s)
    table: dict[str, dict[str, float]] = {}
    for (task, mixer), cells in grouped.items():
        lrs = sorted(set.intersection(*(set(c.lr_means) for c in cells)))
        means = {lr: statistics.fmean(c.lr_means[lr] for c in cells) for lr in lrs}
        sign = 1 if higher_is_better(cells[0].metric) else -1
        table.setdefault(task, {})[mixer] = max(lrs, key=lambda lr, means=means: (sign * means[lr], -lr))
    return table


def save_tuned(preset_name: str, table: dict[str, dict[str, float]], source: str,
               path: str | Path = TUNED_FILE) -> None:
    """Merges `table` into the preset's entry (a new sweep of a task and mixer replaces the old lr)."""
    data = load_tuned(path)
    entry = data.setdefault(preset_name, {"sources": [], "tasks": {}})
    if source not in entry["sources"]:
        entry["sources"].append(source)
    for task, lrs in table.items():
        entry["tasks"].setdefault(task, {}).update(lrs)
    Path(path).write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")
