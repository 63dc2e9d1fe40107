"""`regmem repro ttr-mqar`: Fig. 3 of *Test-time regression* (arXiv:2501.12352, Sec. 6).

One test-time-regression layer whose keys come from a length-2 short convolution (keys only), no MLP,
d_model = D_k (one head), trained on MQAR with P key-value pairs. The paper's claim (d_model 64): linear attention
solves MQAR when P <= d_model (P = 64) but not when P > d_model (P = 128: 128 keys cannot be orthogonal in 64
dimensions), while RLS, which accounts for the key covariance, solves it in both cases — memory capacity, not
sequence length, limits recall.

The paper gives no training settings (Sec. 6). The default run is scaled to a 2-core CPU: d_model 32 with
P = d_model / 2 and P = d_model (seq_len 4P), zoology's generator with vocabulary 512, AdamW with warm-up and cosine
decay, early stop at 99 % validation accuracy. Each (layer, P) cell trains every learning rate of the grid with two
seeds, its lr is the one with the best mean validation accuracy (the grid grows past an edge where that lies) and
its score is the test accuracy there, mean (min-max) over the seeds (experiments/protocol.py); runs are stored
under the output directory, so the command resumes. `FULL` is the paper's d_model 64, P in {64, 128} (hours on
this CPU; `regmem repro ttr-mqar --full`). The RLS layer trains with 30 conjugate-gradient steps per token
(MesaNet's solver; `rls_solver="cholesky"` is exact and ~3x slower here); both settings are printed with the
results.
"""

from __future__ import annotations

import dataclasses
from dataclasses import asdict, dataclass
from pathlib import Path

from regmem.lab.experiments.presets import Preset
from regmem.lab.experiments.protocol import RunStore, execute_bracketed, run_grid, summarize
from regmem.lab.experiments.repro.record import Repro
from regmem.tasks.mqar import MQARConfig


def claim(mixer: str, pairs: int, d_model: int) -> str:
    """The paper's claim for a layer at P pairs, by the ratio P / d_model (Sec. 6)."""
    if mixer == "rls":
        return "solves MQAR" + (" even with P > d_model" if pairs > d_model else "")
    if mixer == "linear":
        return "solves MQAR (P <= d_model)" if pairs <= d_model else "cannot solve it perfectly (P > d_model)"
    return ""


@dataclass(frozen=True)
class MQARSettings:
    cells: tuple[tuple[int, int], ...] = ((16, 64), (32, 128))  # (P pairs, seq_len), seq_len >= 4P
    mixers: tuple[str, ...] = ("linear", "rls")
    d_model: int = 32
    vocab_size: int = 512  # zoology: must exceed seq_len
    steps: int = 1500
    batch_size: int = 64
    # the one lr of the earlier single-seed runs (1e-2) and its neighbours
    lrs: tuple[float, ...] = (3e-3, 1e-2, 3e-2)
    extend_grid: int = 2  # points added past a grid edge where a cell's best lr lies (protocol.execute_bracketed)
    seeds: tuple[int, ...] = (0, 1)
    num_eval: int = 128
    rls_solver: str = "cg"  # MesaNet's 30 CG steps: ~3x faster than the exact Cholesky chunk form on CPU here
    workers: int = 2  # runs trained at once, one process and one torch thread each


FULL = MQARSettings(cells=((64, 256), (128, 512)), d_model=64, vocab_size=1024, steps=5000)  # the paper's scale
QUICK = MQARSettings(cells=((8, 32), (16, 64)), d_model=16, vocab_size=128, steps=4, batch_size=8, num_eval=8,
                     lrs=(1e-2,), seeds=(0,), workers=1)


def mqar_preset(settings: MQARSettings) -> Preset:
    """The model and budget of every cell; each run's setting gives its P and seq_len (task fields)."""
    key_conv = {"short_conv": 2, "short_conv_on": "k", "qk_norm": True}  # the paper's length-2 key conv
    pairs, seq_len = settings.cells[0]
    return Preset(
        name="ttr-mqar", d_model=settings.d_model, n_layers=1, n_heads=1, ffn="none",
        task={"vocab_size": settings.vocab_size, "seq_len": seq_len, "num_kv_pairs": pairs,
              "random_non_queries": False},
        steps=settings.steps, batch_size=settings.batch_size, lr=settings.lrs[0],
        num_train=settings.steps * settings.batch_size, num_eval=settings.num_eval,
        eval_every=max(settings.steps // 10, 1),
        mixer_kwargs={name: {**key_conv, **({"solver": settings.rls_solver} if name == "rls" else {})}
                      for name in settings.mixers},
    )


def run(settings: MQARSettings, out_dir: Path, *, log=print, progress: bool = True) -> dict:
    """Every (layer, P, lr, seed) not yet stored under `out_dir`/ttr-mqar-runs; {"settings", "preset", "cells"
    (each cell's best lr by validation and its test score), "runs"}."""
    for pairs, seq_len in settings.cells:  # each point checked by the task itself before anything trains
        MQARConfig(vocab_size=settings.vocab_size, seq_len=seq_len, num_kv_pairs=pairs, random_non_queries=False)
    preset = mqar_preset(settings)
    grid = run_grid(["mqar"], settings.mixers, [{"num_kv_pairs": p, "seq_len": t} for p, t in settings.cells],
                    settings.lrs, settings.seeds)
    records = execute_bracketed(grid, preset, RunStore(out_dir / "ttr-mqar-runs", preset),
                                extend=settings.extend_grid, progress=progress, log=log, workers=settings.workers)
    cells = [dataclasses.asdict(c) for c in summarize(records)]
    return {"settings": asdict(settings), "preset": preset.to_dict(), "cells": cells, "runs": records}


def _cells(result: dict) -> list[dict]:
    """The cells in the settings' order: by (P, seq_len), then by layer."""
    points, mixers = [tuple(c) for c in result["settings"]["cells"]], result["settings"]["mixers"]
    return sorted(result["cells"], key=lambda c: (points.index((c["setting"]["num_kv_pairs"], c["setting"]["seq_len"])),
                                                  mixers.index(c["mixer"])))


def format_report(result: dict) -> str:
    s, p = result["settings"], result["preset"]
    lines = [
        "TTR Fig. 3 (Sec. 6): MQAR with one memory layer + a length-2 key convolution, no MLP "
        "(paper: d_model 64, P in {64, 128}; the claim: linear attention solves it while P <= d_model, RLS also "
        "beyond)",
        f"d_model = D_k = {s['d_model']} (one head), vocab {s['vocab_size']}, {p['steps']} steps x batch "
        f"{p['batch_size']}, early stop at 0.99 validation accuracy; RLS trained with solver={s['rls_solver']!r}; lr "
        f"grid {', '.join(f'{lr:g}' for lr in s['lrs'])}, grown past an edge where a cell's best lay; each cell at "
        f"the lr of its best mean validation accuracy; seeds {', '.join(map(str, s['seeds']))}: test accuracy mean "
        "(min-max).",
        "",
        "| layer | P | seq_len | test accuracy | validation | best lr | lr: mean validation | paper's claim |",
        "|---|---:|---:|---:|---:|---:|---|---|",
    ]
    for c in _cells(result):
        pairs, seq_len = c["setting"]["num_kv_pairs"], c["setting"]["seq_len"]
        means = ", ".join(f"{float(lr):g}: {v:.3f}" for lr, v in sorted(c["lr_means"].items(),
                                                                        key=lambda kv: float(kv[0])))
        lines.append(f"| {c['mixer']} | {pairs} | {seq_len} | {c['mean']:.3f} ({c['low']:.3f}-{c['high']:.3f}) | "
                     f"{c['valid_mean']:.3f} | {c['best_lr']:g} | {means} | {claim(c['mixer'], pairs, s['d_model'])} |")
    return "\n".join(lines)


def plot_rows(result: dict, path: Path) -> None:
    from regmem.lab.experiments.plots import plt, save_figure

    cells = _cells(result)
    fig, ax = plt.subplots(figsize=(5.5, 4), dpi=120)
    mixers = list(dict.fromkeys(c["mixer"] for c in cells))
    points = list(dict.fromkeys((c["setting"]["num_kv_pairs"], c["setting"]["seq_len"]) for c in cells))
    width = 0.8 / len(mixers)
    for i, mixer in enumerate(mixers):
        own = [c for c in cells if c["mixer"] == mixer]
        ax.bar([j + i * width for j in range(len(own))], [c["mean"] for c in own], width, label=mixer,
               yerr=[[c["mean"] - c["low"] for c in own], [c["high"] - c["mean"] for c in own]], capsize=3)
    ax.set_xticks([j + 0.4 - width / 2 for j in range(len(points))], [f"P={p}\nT={t}" for p, t in points])
    ax.set_ylim(0, 1.02)
    ax.set_ylabel("MQAR test accuracy (best lr, min-max over seeds)")
    ax.set_title(f"TTR Fig. 3: one layer + key conv, d_model {result['settings']['d_model']}")
    ax.legend(loc="lower left")
    ax.grid(alpha=0.3, axis="y")
    save_figure(fig, path)


REPRO = Repro(
    name="ttr-mqar",
    help="Test-time regression Fig. 3: one layer + key conv on MQAR, linear attention vs RLS at P <= d_model and "
         "P > d_model, 3 lrs x 2 seeds a cell, grown past an edge (about 40 minutes of 2 cores; resumable; "
         "--full: the paper's d_model 64, P 64/128, hours)",
    variants={"default": MQARSettings(), "quick": QUICK, "full": FULL},
    run=run, format_report=format_report, plot=plot_rows,
)
