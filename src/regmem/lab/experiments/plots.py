"""Plots of comparison results (matplotlib, Agg backend: files only, no display)."""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import NamedTuple

from regmem.lab.experiments.protocol import higher_is_better
from regmem.storage import temporary_path


def pyplot():
    """matplotlib.pyplot on the Agg backend, imported on the first plot rather than with the module (a command that
    only parses its arguments, or a run that draws nothing, never loads matplotlib)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot

    return matplotlib.pyplot


def __getattr__(name: str):
    """`from regmem.lab.experiments.plots import plt` inside a plotting function: pyplot, loaded then."""
    if name == "plt":
        return pyplot()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def save_figure(fig, path: Path, *, dpi: int | None = None) -> None:
    """Lays out, writes and closes a figure (the plots of the experiments end here, but for the NIAH heat maps,
    whose colour bar sets its own layout). The file is written whole, then renamed into place (storage.py)."""
    plt = pyplot()
    fig.tight_layout()
    path = Path(path)
    temporary = temporary_path(path)
    try:
        fig.savefig(temporary, dpi=dpi, format=path.suffix.lstrip(".") or "png")
        os.replace(temporary, path)
    finally:
        temporary.unlink(missing_ok=True)
        plt.close(fig)


def plot_results(path: Path, task_name: str, field: str | None, summaries) -> None:
    """Score against the swept value per mixer, or a bar chart without a sweep; the mean over seeds at each
    mixer's best learning rate, error bars from the min to the max over those seeds. A non-finite value (a
    lower-is-better score of a diverged cell) is left out."""
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6, 4), dpi=120)
    mixers = list(dict.fromkeys(s.mixer for s in summaries))
    metric = summaries[0].metric
    if field is None:
        cells = [next(s for s in summaries if s.mixer == m) for m in mixers]
        means = [_drawn(c.mean) for c in cells]
        errors = [[_drawn(c.mean - c.low) for c in cells], [_drawn(c.high - c.mean) for c in cells]]
        ax.bar(mixers, means, yerr=errors, capsize=3, color="tab:blue")
        ax.set_xlabel("mixer")
        ax.tick_params(axis="x", labelrotation=45)
    else:
        for mixer in mixers:
            cells = sorted((s for s in summaries if s.mixer == mixer), key=lambda s: s.setting[field])
            x = [c.setting[field] for c in cells]
            ax.errorbar(x, [_drawn(c.mean) for c in cells], capsize=3, marker="o", label=mixer,
                        yerr=[[_drawn(c.mean - c.low) for c in cells], [_drawn(c.high - c.mean) for c in cells]])
        values = sorted({s.setting[field] for s in summaries})
        ax.set_xscale("log", base=2)
        ax.set_xticks(values, [str(v) for v in values])
        ax.minorticks_off()
        ax.set_xlabel(field)
        ax.legend()
    ax.set_ylabel(f"test {metric.replace('_', ' ')}\n(best lr; mean, min-max over seeds)")
    if higher_is_better(metric):  # accuracies: on the 0-1 scale
        ax.set_ylim(0, 1.02)
    ax.set_title(f"{task_name}: {metric} by mixer")
    ax.grid(alpha=0.3)
    save_figure(fig, path)


def _drawn(value: float) -> float:
    """The value, or NaN (not drawn) where it is not finite."""
    return value if math.isfinite(value) else math.nan


class HeatCell(NamedTuple):
    """One cell of `plot_heatmap`: the value shown and the metric it is (which sets the colour scale)."""

    mean: float
    metric: str


def plot_heatmap(path: Path, tasks: list[str], mixers: list[str], cell: dict, title: str,
                 labels: dict | None = None) -> None:
    """Mixers x tasks, colour = accuracy (0 red .. 1 green); a lower-is-better column (bits per byte) is coloured
    by its rank among the mixers, best green, a non-finite value (a diverged cell's) red. Every cell shows its
    value, or its text in `labels[(task, mixer)]` where given (e.g. "diverged@120"). `cell[(task, mixer)]` has
    `.mean` and `.metric` (a `HeatCell` or a protocol summary)."""
    plt = pyplot()
    import numpy as np

    labels = labels or {}
    colours = np.zeros((len(mixers), len(tasks)))
    for j, t in enumerate(tasks):
        values = [cell[(t, m)].mean for m in mixers]
        if higher_is_better(cell[(t, mixers[0])].metric):
            colours[:, j] = values
        else:  # lower is better: min -> 1, max -> 0, over the finite values
            finite = [v for v in values if math.isfinite(v)] or [0.0]
            low, high = min(finite), max(finite)
            colours[:, j] = [0.0 if not math.isfinite(v) else 1.0 if high == low else (high - v) / (high - low)
                             for v in values]
    fig, ax = plt.subplots(figsize=(1.0 + 0.75 * len(tasks), 1.2 + 0.4 * len(mixers)), dpi=120)
    ax.imshow(colours, cmap="RdYlGn", vmin=0, vmax=1, aspect="auto")
    for i, m in enumerate(mixers):
        for j, t in enumerate(tasks):
            text = labels.get((t, m), f"{cell[(t, m)].mean:.2f}")
            ax.text(j, i, text.replace(" (", "\n("), ha="center", va="center", fontsize=7)
    labels = [t if cell[(t, mixers[0])].metric == "accuracy" else f"{t}\n({cell[(t, mixers[0])].metric})"
              for t in tasks]
    ax.set_xticks(range(len(tasks)), labels, rotation=45, ha="right", fontsize=7)
    ax.set_yticks(range(len(mixers)), mixers, fontsize=8)
    ax.set_title(title, fontsize=9)
    save_figure(fig, path)
