"""`regmem repro nl-mad`: Table 4 of *Nested Learning* (arXiv:2512.24695, Sec. 9.4) at CPU scale.

The paper scores Transformer, RWKV-7, Comba, Titans and Hope on MAD's synthetic tasks (Poli et al. 2024,
arXiv:2403.17844): compression, in-context recall, fuzzy in-context recall, selective copying and memorisation
(noisy recall is not in its table), and claims Hope is best on all (ties at 100 on recall). It gives no model
sizes. MAD's own protocol is dim 128, two blocks (mixer + SwiGLU), 200 epochs of 12,800 sequences and an lr grid.

Here: two blocks of d_model 64 (mixer + SwiGLU), each task at a CPU point (shorter sequences than MAD's
baselines, `MAD_POINTS`), a fixed step budget, the fair protocol of experiments/protocol.py (each mixer's best
learning rate of the grid, mean and min-max over seeds). Mixers: attention (the Transformer row), Titans, Gated
DeltaNet, DeltaNet and linear attention; RWKV-7 and Comba are not in regmem. Hope (`--set mixers=hope`) is not in
the default set: at this protocol (one lr for the whole model, grid up to 1e-2) it stays at or below a third on
ICR, and it learns only at lr 0.03 with its MLPs at 0.1 x the lr (`--set mlp_lr_scale=0.1`), the rule the MQAR
presets use; a table with that rule for every mixer is not measured yet. Runs are stored in the output directory,
so the command resumes after an interruption.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from pathlib import Path

from regmem.lab.experiments.plots import HeatCell, plot_heatmap
from regmem.lab.experiments.presets import Preset
from regmem.lab.experiments.protocol import RunStore, execute_bracketed, run_grid, summarize
from regmem.lab.experiments.repro.outputs import selection_note
from regmem.lab.experiments.repro.record import Repro

# Table 4 of the paper (accuracy %), columns in TASK_ORDER minus noisy recall.
PAPER_TABLE4 = {
    "Transformers": {"compression": 49.4, "icr": 100, "fuzzy_icr": 47.9, "selective_copy": 96.2, "memorization": 83.7},
    "RWKV-7": {"compression": 45.1, "icr": 100, "fuzzy_icr": 32.8, "selective_copy": 95.6, "memorization": 82.2},
    "Comba": {"compression": 46.3, "icr": 100, "fuzzy_icr": 32.8, "selective_copy": 96.4, "memorization": 82.9},
    "Titans": {"compression": 49.8, "icr": 100, "fuzzy_icr": 50.0, "selective_copy": 99.4, "memorization": 83.4},
    "HOPE": {"compression": 51.2, "icr": 100, "fuzzy_icr": 52.1, "selective_copy": 99.7, "memorization": 85.2},
}
TASK_ORDER = ("compression", "icr", "noisy_icr", "fuzzy_icr", "selective_copy", "memorization")
HEADERS = {"compression": "Compress.", "icr": "ICR", "noisy_icr": "Noisy ICR", "fuzzy_icr": "Fuzzy ICR",
           "selective_copy": "Sel. copying", "memorization": "Memory"}
PAPER_NAMES = {"attn": "Transformers", "titans": "Titans"}

# Each task's CPU point: MAD's baseline vocabularies, sequences cut to <= 64 tokens so a run takes a minute.
MAD_POINTS = {
    "icr": {"vocab_size": 16, "seq_len": 64},
    "noisy_icr": {"vocab_size": 32, "seq_len": 64},
    "fuzzy_icr": {"vocab_size": 16, "seq_len": 64},
    "selective_copy": {"vocab_size": 16, "seq_len": 64, "num_tokens_to_copy": 8},
    "compression": {"vocab_size": 16, "input_len": 32},  # T = 2 x 32 - 1 = 63
    "memorization": {"vocab_size": 256, "seq_len": 32},
}


@dataclass(frozen=True)
class MADSettings:
    mixers: tuple[str, ...] = ("attn", "titans", "gated_deltanet", "deltanet", "linear")
    tasks: tuple[str, ...] = TASK_ORDER
    d_model: int = 64
    n_layers: int = 2
    steps: int = 256
    batch_size: int = 64
    # Each mixer and task at its best of four learning rates (MAD's protocol tunes the lr per setting; its own
    # grid is 1e-4 to 1e-3 for 200 epochs). Measured here: with 3e-3 and 1e-2 alone, 1e-2 trailed on every recall
    # task and mixer, and with 1e-3 added 15 of 30 cells (ties included) were best at the bottom, so it extends to 3e-4.
    lrs: tuple[float, ...] = (3e-4, 1e-3, 3e-3, 1e-2)
    extend_grid: int = 2  # points added past a grid edge where a cell's best lr lies (protocol.execute_bracketed)
    seeds: tuple[int, ...] = (0, 1)
    num_eval: int = 256
    task_points: dict = field(default_factory=lambda: dict(MAD_POINTS))  # each task's config fields
    # The lr of every MLP (the blocks' SwiGLU, Hope's CMS) as a multiple of the run's lr (`Preset.mlp_lr_scale`).
    # 1 here (one lr for the whole model, as the committed table was measured); the MQAR presets use 0.1, and Hope
    # learns ICR only under that rule (benchmarks/leaderboards.md, "MAD: Hope needs the MLP lr rule").
    mlp_lr_scale: float = 1.0
    workers: int = 1  # runs trained at once, one process and one torch thread each (2 on a 2-core CPU)

    def __post_init__(self):
        if not self.mlp_lr_scale > 0:
            raise ValueError(f"mlp_lr_scale must be > 0, got {self.mlp_lr_scale!r}")
        if self.workers < 1:
            raise ValueError(f"workers must be >= 1, got {self.workers!r}")


PRESET_LR = 3e-3  # the preset's nominal lr; every protocol run trains at its own lr from `MADSettings.lrs`

QUICK_POINTS = {"icr": {"vocab_size": 16, "seq_len": 16}, "memorization": {"vocab_size": 32, "seq_len": 16}}
QUICK = MADSettings(mixers=("attn", "linear"), tasks=("icr", "memorization"), d_model=16, n_layers=1, steps=4,
                    batch_size=8, lrs=(3e-3,), seeds=(0,), num_eval=16, task_points=QUICK_POINTS)


def mad_preset(settings: MADSettings) -> Preset:
    points = {t: p for t, p in settings.task_points.items() if t in settings.tasks}
    return Preset(
        name=f"mad-d{settings.d_model}", d_model=settings.d_model, n_layers=settings.n_layers,
        n_heads=max(settings.d_model // 16, 1), ffn="swiglu", task={}, steps=settings.steps,
        batch_size=settings.batch_size, lr=PRESET_LR, num_train=settings.steps * settings.batch_size,
        num_eval=settings.num_eval, eval_every=max(settings.steps // 8, 1), task_points=points,
        mixer_kwargs={"attn": {"short_conv": 4}}, mlp_lr_scale=settings.mlp_lr_scale,
    )


def run(settings: MADSettings, out_dir: Path, *, log=print, progress: bool = True) -> dict:
    """Every (task, mixer, lr, seed) not yet stored under `out_dir`/nl-mad-runs; {"settings", "preset", "cells",
    "runs"}."""
    preset = mad_preset(settings)
    runs = run_grid(settings.tasks, settings.mixers, [{}], settings.lrs, settings.seeds)
    records = execute_bracketed(runs, preset, RunStore(out_dir / "nl-mad-runs", preset), extend=settings.extend_grid,
                                progress=progress, log=log, workers=settings.workers)
    cells = [dataclasses.asdict(c) for c in summarize(records)]
    return {"settings": dataclasses.asdict(settings), "preset": preset.to_dict(), "cells": cells, "runs": records}


def _cell(result: dict, task: str, mixer: str) -> dict:
    return next(c for c in result["cells"] if (c["task"], c["mixer"]) == (task, mixer))


def format_report(result: dict) -> str:
    s, p = result["settings"], result["preset"]
    tasks = [t for t in TASK_ORDER if t in s["tasks"]]
    lines = [
        "Nested Learning Table 4 (Sec. 9.4): MAD tasks, accuracy %. Paper: model sizes not given; claim: Hope best "
        "on all, ties at 100 on ICR.",
        f"Ours: {p['n_layers']} blocks of d_model {p['d_model']} + SwiGLU, {p['steps']} steps x batch "
        f"{p['batch_size']}, lr grid {', '.join(f'{lr:g}' for lr in s['lrs'])} (best per mixer and task)"
        + (f", MLPs at {s['mlp_lr_scale']:g} x the lr" if s.get("mlp_lr_scale", 1.0) != 1.0 else ", one lr for all")
        + f", seeds {', '.join(map(str, s['seeds']))}: mean (min-max). Points: "
        + "; ".join(f"{t} {json.dumps(p['task_points'][t])}" for t in tasks) + ". " + selection_note("accuracy"),
        "",
        "| model | " + " | ".join(HEADERS[t] for t in tasks) + " |",
        "|---|" + "---:|" * len(tasks),
    ]
    for name, row in PAPER_TABLE4.items():
        lines.append(f"| paper: {name} | " + " | ".join(str(row.get(t, "-")) for t in tasks) + " |")
    for mixer in s["mixers"]:
        label = f"ours: {mixer}" + (f" ({PAPER_NAMES[mixer]})" if mixer in PAPER_NAMES else "")
        cells = [_cell(result, t, mixer) for t in tasks]
        lines.append(f"| {label} | " + " | ".join(
            f"{100 * c['mean']:.1f} ({100 * c['low']:.0f}-{100 * c['high']:.0f})" for c in cells) + " |")
    lines += ["", *findings(result, tasks)]
    return "\n".join(lines)


def findings(result: dict, tasks: list[str]) -> list[str]:
    """The paper's checkable statements against our numbers."""
    mixers = result["settings"]["mixers"]
    out = []
    if "icr" in tasks:
        solved = [m for m in mixers if _cell(result, "icr", m)["mean"] >= 0.99]
        out.append(f"- Paper: every model reaches 100 on ICR. Ours: {len(solved)} of {len(mixers)} reach 99% "
                   f"({', '.join(solved) or 'none'}).")
    wins = [t for t in tasks if t in PAPER_TABLE4["Titans"] and PAPER_TABLE4["Titans"][t] > PAPER_TABLE4[
        "Transformers"][t]]
    if {"attn", "titans"} <= set(mixers) and wins:  # none among the tasks run: no claim to line up
        ours = [t for t in wins if _cell(result, t, "titans")["mean"] > _cell(result, t, "attn")["mean"]]
        out.append(f"- Paper: Titans above the Transformer on {', '.join(wins)}. Ours: Titans above attention on "
                   f"{', '.join(ours) or 'none of them'}.")
    best = []
    for t in tasks:
        top = max(_cell(result, t, m)["mean"] for m in mixers)
        tied = [m for m in mixers if _cell(result, t, m)["mean"] >= top - 0.005]  # within half a point
        best.append(f"{HEADERS[t]} {', '.join(tied)} {100 * top:.1f}")
    out.append("- Best of ours per task (within half a point of the top): " + "; ".join(best) + ".")
    if "compression" in tasks:
        out.append("- Compression here is causal (the sequence is reproduced after the compression token, "
                   "tasks/mad.py), not MAD's encoder-decoder: attention can copy from its KV cache, a fixed-state "
                   "memory must compress, so this column does not compare with the paper's ~50.")
    if "hope" in mixers:
        tops = [t for t in tasks if _cell(result, t, "hope")["mean"] >= max(_cell(result, t, m)["mean"]
                                                                         for m in mixers) - 0.005]
        out.append(f"- Paper: Hope best on every task. Ours: Hope best (within half a point) on {len(tops)} of "
                   f"{len(tasks)} ({', '.join(HEADERS[t] for t in tops) or 'none'}).")
    else:
        out.append("- Hope is not among this run's mixers (`--set mixers=...,hope` adds it): the paper's claim "
                   "that it is best on all tasks is not tested by this table.")
    return out


def plot_mad(result: dict, path: Path) -> None:
    tasks = [t for t in TASK_ORDER if t in result["settings"]["tasks"]]
    cells = {(c["task"], c["mixer"]): HeatCell(c["mean"], c["metric"]) for c in result["cells"]}
    plot_heatmap(path, tasks, list(result["settings"]["mixers"]), cells,
                 title="MAD at CPU scale (Nested Learning Table 4's tasks)")


REPRO = Repro(
    name="nl-mad",
    help="Nested Learning (arXiv:2512.24695) Table 4: MAD's six tasks at CPU scale beside the paper, 5 mixers x "
         "lr grid of 4 x 2 seeds (240 runs, about 2 h 15 min of one CPU thread; resumable; --set "
         "mixers=attn,linear splits it; --set workers=2 trains two at a time)",
    variants={"default": MADSettings(), "quick": QUICK},
    run=run, format_report=format_report, plot=plot_mad,
)
