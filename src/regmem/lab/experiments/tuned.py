"""Tuned learning rates: each mixer's best learning rate per task from a committed sweep, used by the presets.

`src/regmem/lab/experiments/tuned_lr.json` holds, per preset name, the directory of the sweep it came from (under
`benchmarks/results/`) and {task: {mixer: lr}}; a task at a setting of its own (`regmem compare --sweep
num_kv_pairs=16`) has its own entry, "mqar num_kv_pairs=16" (`setting_key`), read first. `regmem compare` and
`regmem suite` train a mixer at its tuned learning rate when the table has one and the grid is not given (`--lrs`,
`--sweep-lr`); otherwise at the preset's. `regmem suite --sweep-lr --save-tuned` writes the table from a new
sweep, `regmem compare --lrs ... --sweep F=V --save-tuned` the entries of each swept setting.
"""

from __future__ import annotations

import json
import statistics
from pathlib import Path

from regmem.lab.experiments.protocol import higher_is_better
from regmem.storage import write_atomic

TUNED_FILE = Path(__file__).with_name("tuned_lr.json")


def load_tuned(path: str | Path = TUNED_FILE) -> dict:
    path = Path(path)
    return json.loads(path.read_text()) if path.exists() else {}


def setting_key(task: str, setting: dict | None) -> str:
    """The table's key of a task at a setting: "mqar num_kv_pairs=16"; the task's name without one."""
    return " ".join([task, *(f"{k}={v}" for k, v in sorted((setting or {}).items()))])


def tuned_lr(preset_name: str, task: str, mixer: str, path: str | Path = TUNED_FILE, *,
             setting: dict | None = None) -> float | None:
    """The committed best learning rate of `mixer` on `task` under the preset -- tuned at `setting` if the table
    has that, else at the preset's point of the task -- or None if it was not swept."""
    tasks = load_tuned(path).get(preset_name, {}).get("tasks", {})
    at_setting = tasks.get(setting_key(task, setting), {}).get(mixer)
    return at_setting if at_setting is not None else tasks.get(task, {}).get(mixer)


def best_lrs(summaries) -> dict[str, dict[str, float]]:
    """{task: {mixer: lr}} from protocol summaries: the lr whose mean validation score, averaged over the cell's
    settings, is best (ties: the smaller lr)."""
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


def best_lrs_by_setting(summaries) -> dict[str, dict[str, float]]:
    """{setting_key: {mixer: lr}}: each cell's best learning rate under the key of its task and setting."""
    table: dict[str, dict[str, float]] = {}
    for s in summaries:
        table.setdefault(setting_key(s.task, s.setting), {})[s.mixer] = s.best_lr
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
    write_atomic(path, json.dumps(data, indent=1, sort_keys=True) + "\n")
