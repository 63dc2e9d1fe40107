"""Plots of comparison results (matplotlib, Agg backend: files only, no display)."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def plot_results(path: Path, task_name: str, field: str | None, results) -> None:
    """Accuracy against the swept value per mixer; a bar chart of accuracy without a sweep."""
    fig, ax = plt.subplots(figsize=(6, 4), dpi=120)
    mixers = list(dict.fromkeys(r.mixer for r in results))
    if field is None:
        accuracies = [next(r.accuracy for r in results if r.mixer == m) for m in mixers]
        ax.bar(mixers, accuracies, color="tab:blue")
        ax.set_xlabel("mixer")
    else:
        for mixer in mixers:
            points = sorted((r.sweep_value, r.accuracy) for r in results if r.mixer == mixer)
            ax.plot([p[0] for p in points], [p[1] for p in points], marker="o", label=mixer)
        values = sorted({r.sweep_value for r in results})
        ax.set_xscale("log", base=2)
        ax.set_xticks(values, [str(v) for v in values])
        ax.minorticks_off()
        ax.set_xlabel(field)
        ax.legend()
    ax.set_ylabel("accuracy")
    ax.set_ylim(0, 1.02)
    ax.set_title(f"{task_name}: accuracy by mixer")
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
