"""Renames the stored runs of a run directory to their current `Run.key` (src/regmem/lab/experiments/runs.py).

A run's file is named by a hash of what fixes the run. Until 2026-11-28 that hash covered every mixer's options in
the preset, so giving one mixer new preset options renamed the runs of all of them; now it covers the run's own
mixer's only. This script renames the committed runs once: each file's spec, under the preset its directory stored,
gives the new name. Files already under their key are left alone; a name taken by another file is an error.

    python benchmarks/scripts/rekey_runs.py RUNS_DIR RESULTS_JSON KEY [KEY ...]

RESULTS_JSON is the file beside the runs that stores their preset, KEY... the path to it inside the JSON, e.g.
`benchmarks/results/text-quick/runs benchmarks/results/text-quick/results.json meta preset`.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from regmem.lab.experiments.presets import Preset
from regmem.lab.experiments.runs import Run


def rekey(runs_dir: Path, preset: Preset) -> int:
    """Renames every `<runs_dir>/*.json` to `<key>.json`; returns how many moved."""
    moved = 0
    for path in sorted(runs_dir.glob("*.json")):
        key = Run(**json.loads(path.read_text())["spec"]).key(preset)
        if key == path.stem:
            continue
        target = path.with_name(f"{key}.json")
        if target.exists():
            raise FileExistsError(f"{target} exists: {path.name} and it are the same run")
        path.rename(target)
        moved += 1
    return moved


def main(argv: list[str]) -> None:
    runs_dir, results, *where = argv
    stored = json.loads(Path(results).read_text())
    for name in where:
        stored = stored[name]
    print(f"{runs_dir}: {rekey(Path(runs_dir), Preset(**stored))} runs renamed")


if __name__ == "__main__":
    main(sys.argv[1:])
