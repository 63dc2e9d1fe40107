"""What every reproduction writes: `<name>.md` (the report: the paper's claim beside the measured result) and
`<name>.json` (settings, cells, every run) under the output directory; each repro adds its own plot."""

from __future__ import annotations

import json
from pathlib import Path


def selection_note(metric: str = "score", shown: str | None = None) -> str:
    """The sentence a report of protocol runs carries (experiments/protocol.py's `summarize`): which split picks the
    learning rate (by `metric`), and what the numbers are (`shown`; default: the test `metric`)."""
    shown = f"the test {metric}" if shown is None else shown
    return (f"Each learning rate is picked by the mean validation {metric} over seeds; every number shown is "
            f"{shown} at that pick (validation and test are disjoint held-out splits, tasks/base.py).")


def write_report(out_dir: Path, name: str, result: dict, report: str) -> dict[str, Path]:
    """Writes the report and the result; returns their paths ("report", "json") and, as "plot", where the
    repro's plot belongs (`<name>.png`), for the caller to draw."""
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = {"report": out_dir / f"{name}.md", "json": out_dir / f"{name}.json", "plot": out_dir / f"{name}.png"}
    paths["report"].write_text(report + "\n")
    paths["json"].write_text(json.dumps(result, indent=1))
    return paths
