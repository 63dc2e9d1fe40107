"""`regmem repro lecture-lineage`: the closing table of a lecture's "State Space Model Lineage", measured.

Todd Morrill, "Continual Learning & Memory Models" (Columbia COMS6998 lecture slides, February 2026), traces linear
attention -> delta rule -> TTT -> SSMs; its section "State Space Model Lineage" ends with "the modern recurrent
hierarchy": Mamba (S6) keeps a vector state per channel updated by selective scalar gating, DeltaNet a matrix state
updated by a least-squares (delta-rule) step, TTT the weights of a model updated by gradient descent; its conclusion
is a move from dynamic compression to online learning. It states no numbers. Here the three train on MQAR at the
quick preset (one layer, d_model 64, no MLP) with recurrent memories of (nearly) equal size: Mamba with d_inner 128
and N = 8 (1024 floats), DeltaNet with 4 heads of 16 x 16 (1024 floats), TTT-Linear with 4 heads of a 17 x 16 linear
model with bias (1088 floats; its state also keeps the mini-batch's anchor copy for decoding). Each is reported at the
better of its learning rates over two seeds (the fair protocol), with training tokens per second measured in the
same runs (single thread, a budget rather than a speed benchmark). Runs are stored under the output directory, so
the command resumes.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path

from regmem.lab.experiments.presets import PRESETS
from regmem.lab.experiments.protocol import RunStore, execute_bracketed, run_grid, summarize
from regmem.lab.experiments.repro.record import Repro

ROWS = {  # mixer -> (the method, state representation and update logic as the lecture's table gives them)
    "mamba": ("Mamba (S6)", "vector h in R^{N x D}", "selective scalar gating"),
    "deltanet": ("DeltaNet", "matrix S in R^{d_k x d_v}", "linear least-squares step"),
    "ttt_linear": ("TTT", "weights theta in R^P", "gradient descent on L_t"),
    "ttt_mlp": ("TTT (MLP)", "weights theta in R^P", "gradient descent on L_t"),
}
# Memory sizes matched to DeltaNet's 4 x 16 x 16 at the quick preset (module docstring).
MIXER_KWARGS = {"mamba": {"state_size": 8}}


@dataclass(frozen=True)
class LineageSettings:
    mixers: tuple[str, ...] = ("mamba", "deltanet", "ttt_linear")
    preset: str = "quick"
    lrs: tuple[float, ...] = (0.03, 0.1)
    extend_grid: int = 2  # points added past a grid edge where a cell's best lr lies (protocol.execute_bracketed)
    seeds: tuple[int, ...] = (0, 1)
    steps: int | None = None  # None: the preset's


QUICK = LineageSettings(preset="tiny", lrs=(0.03,), seeds=(0,), steps=4)


def lineage_preset(settings: LineageSettings):
    preset = PRESETS[settings.preset]
    kwargs = {**preset.mixer_kwargs, **MIXER_KWARGS}
    preset = dataclasses.replace(preset, name=f"{preset.name}-lineage", mixer_kwargs=kwargs)
    if settings.steps is not None:
        preset = dataclasses.replace(preset, steps=settings.steps, num_train=settings.steps * preset.batch_size,
                                     eval_every=max(settings.steps // 4, 1))
    return preset


def run(settings: LineageSettings, out_dir: Path, *, log=print, progress: bool = True) -> dict:
    """Every (mixer, lr, seed) on MQAR not yet stored under `out_dir`/lecture-lineage-runs; {"settings", "preset",
    "cells", "runs"}."""
    unknown = [m for m in settings.mixers if m not in ROWS]
    if unknown:
        raise ValueError(f"mixers: the lineage table has rows for {sorted(ROWS)}, got {unknown}")
    preset = lineage_preset(settings)
    runs = run_grid(["mqar"], settings.mixers, [{}], settings.lrs, settings.seeds)
    records = execute_bracketed(runs, preset, RunStore(out_dir / "lecture-lineage-runs", preset),
                                extend=settings.extend_grid, progress=progress, log=log)
    cells = [dataclasses.asdict(c) for c in summarize(records)]
    return {"settings": dataclasses.asdict(settings), "preset": preset.to_dict(), "cells": cells, "runs": records}


def format_report(result: dict) -> str:
    s, p = result["settings"], result["preset"]
    lines = [
        "Morrill, 'Continual Learning & Memory Models' (Columbia COMS6998 lecture slides, 2026), 'State Space Model "
        "Lineage' -> 'The Modern Recurrent Hierarchy': the three rows measured on MQAR (the slides give no numbers; "
        "their claim is the progression compression -> online learning).",
        f"Ours: one layer, d_model {p['d_model']}, no MLP, {p['steps']} steps x batch {p['batch_size']}, "
        f"{p['task']['num_kv_pairs']} pairs in {p['task']['seq_len']} tokens; lr grid "
        f"{', '.join(f'{lr:g}' for lr in s['lrs'])}, grown past an edge where a mixer's best lay; each mixer at "
        f"the lr of its best validation mean; seeds {', '.join(map(str, s['seeds']))}: test accuracy mean (min-max).",
        "",
        "| method | state (lecture) | update (lecture) | regmem mixer | state floats / seq | MQAR accuracy | best lr "
        "| grid | train tokens/s |",
        "|---|---|---|---|---:|---:|---:|---|---:|",
    ]
    for cell in result["cells"]:
        method, state, update = ROWS[cell["mixer"]]
        grid = ", ".join(f"{lr:g}" for lr in cell.get("grid", s["lrs"]))
        lines.append(f"| {method} | {state} | {update} | `{cell['mixer']}` | {cell['state_floats']:,} | "
                     f"{cell['mean']:.3f} ({cell['low']:.3f}-{cell['high']:.3f}) | {cell['best_lr']:g} | {grid} | "
                     f"{cell['tokens_per_second']:,.0f} |")
    best = max(result["cells"], key=lambda c: c["mean"])
    lines += ["", f"- Best recall at this state size: {best['mixer']} ({best['mean']:.3f}). State floats include "
              "each mixer's short-conv cache (and TTT's mini-batch anchor copy and offset)."]
    return "\n".join(lines)


def plot(result: dict, path: Path) -> None:
    from regmem.lab.experiments.plots import plt, save_figure

    cells = result["cells"]
    fig, ax = plt.subplots(figsize=(5.5, 3.8), dpi=120)
    names = [ROWS[c["mixer"]][0] for c in cells]
    means = [c["mean"] for c in cells]
    errors = [[c["mean"] - c["low"] for c in cells], [c["high"] - c["mean"] for c in cells]]
    ax.bar(names, means, yerr=errors, capsize=4, color=["#4c72b0", "#dd8452", "#55a868", "#c44e52"][:len(cells)])
    for i, c in enumerate(cells):
        ax.text(i, 0.02, f"{c['state_floats']:,} floats", ha="center", fontsize=8, color="white")
    ax.set_ylim(0, 1.02)
    ax.set_ylabel("MQAR accuracy (best lr, min-max over seeds)")
    ax.set_title("The recurrent hierarchy at equal memory")
    ax.grid(alpha=0.3, axis="y")
    save_figure(fig, path)


REPRO = Repro(
    name="lecture-lineage",
    help="Morrill, 'Continual Learning & Memory Models' (COMS6998 slides, 2026), 'State Space Model Lineage': "
         "Mamba / DeltaNet / TTT on MQAR at equal memory, 3 mixers x 2 lrs x 2 seeds (12 runs; resumable)",
    variants={"default": LineageSettings(), "quick": QUICK},
    run=run, format_report=format_report, plot=plot,
)
