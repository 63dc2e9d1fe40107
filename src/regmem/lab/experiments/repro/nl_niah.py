"""`regmem repro nl-niah`: the pattern of Table 1 of *Nested Learning* (arXiv:2512.24695, Sec. 9.2) at CPU lengths.

The paper trains from scratch and scores RULER's needle tasks (Hsieh et al. 2024, arXiv:2404.06654) at 4K, 8K and
16K tokens; its claims: deep memories (Titans, Hope) stay above linear memories as the context grows, attention
keeps the single-needle tasks near 100 %, and every attention-free model falls on multi-key and multi-value
needles. Here: regmem's tiny-vocabulary needles (regmem/tasks/niah.py), a one-layer d_model-64 model trained at
`train_len` tokens and scored at 1x, 2x and 4x that length by needle depth (experiments/niah_maps.py), each mixer at
its learning rate chosen on the validation split over two seeds and scored on the test split (the fair protocol),
one heat map per variant. Runs are stored under the output directory, so the command resumes. RWKV-7, Comba and DLA
are not in regmem.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from pathlib import Path

from regmem.lab.experiments.niah_maps import run_niah
from regmem.lab.experiments.presets import PRESETS
from regmem.lab.experiments.repro.record import Repro

VARIANTS = ("niah_single", "niah_multikey", "niah_multivalue")
# Table 1, mean over the three lengths 4K/8K/16K (accuracy %), of the rows whose mixer regmem has.
PAPER_MEANS = {
    "Transformer": {"niah_single": 81.6, "niah_multikey": 74.6, "niah_multivalue": 31.0},
    "Titans": {"niah_single": 100.0, "niah_multikey": 19.4, "niah_multivalue": 16.0},
}


@dataclass(frozen=True)
class NIAHSettings:
    mixers: tuple[str, ...] = ("attn", "titans", "gated_deltanet", "linear", "deltanet")
    variants: tuple[str, ...] = VARIANTS
    preset: str = "quick"
    train_len: int = 64
    multiples: tuple[int, ...] = (1, 2, 4)
    depths: tuple[float, ...] = (0.0, 0.25, 0.5, 0.75, 1.0)
    steps: int | None = None  # None: the preset's
    # Each mixer at the better of two learning rates by validation accuracy at the training length: the grid spans the
    # best MQAR learning rates of these mixers at the quick preset (src/regmem/lab/experiments/tuned_lr.json).
    lrs: tuple[float, ...] = (1e-2, 3e-2)
    extend_grid: int = 2  # points added past a grid edge where a cell's best lr lies (protocol.execute_bracketed)
    seeds: tuple[int, ...] = (0, 1)
    num_examples: int = 128


QUICK = NIAHSettings(mixers=("attn", "linear"), variants=("niah_single",), preset="tiny", train_len=32,
                     multiples=(1, 2), depths=(0.0, 1.0), steps=4, lrs=(1e-2,), seeds=(0,), num_examples=8)


def run(settings: NIAHSettings, out_dir: Path, *, log=print, progress: bool = True) -> dict:
    """Each variant's heat maps (experiments/niah_maps.py; runs stored under `out_dir`/nl-niah-runs); {"settings",
    "runs": {variant: its niah.json without the runs}}."""
    preset = PRESETS[settings.preset]
    if settings.steps is not None:
        preset = dataclasses.replace(preset, steps=settings.steps, num_train=settings.steps * preset.batch_size,
                                     eval_every=max(settings.steps // 4, 1))
    runs = {}
    for variant in settings.variants:
        run_dir = run_niah(variant, settings.mixers, preset, train_len=settings.train_len,
                           multiples=settings.multiples, depths=settings.depths, lrs=settings.lrs,
                           seeds=settings.seeds, num_examples=settings.num_examples, out_dir=out_dir / "nl-niah-runs",
                           progress=progress, log=log, extend_grid=settings.extend_grid)
        result = json.loads((run_dir / "niah.json").read_text())
        runs[variant] = {"dir": str(run_dir), **{k: result[k] for k in ("meta", "grids", "seed_means", "cells")}}
    return {"settings": dataclasses.asdict(settings), "runs": runs}


def format_report(result: dict) -> str:
    s = result["settings"]
    lengths = [s["train_len"] * m for m in s["multiples"]]
    lines = [
        "Nested Learning Table 1 (Sec. 9.2), pattern at CPU lengths: accuracy by context length, mean over needle "
        f"depths {', '.join(f'{100 * d:.0f}%' for d in s['depths'])} and over seeds {', '.join(map(str, s['seeds']))} "
        f"(min-max over seeds in brackets) at each mixer's best lr of the grid "
        f"{', '.join(f'{lr:g}' for lr in s['lrs'])} (grown past an edge where a best lay) by validation accuracy "
        f"at the training length; every length and "
        f"depth scored on the test split (tasks/base.py); "
        f"trained at {s['train_len']} tokens, preset {s['preset']}. Paper (4K-16K, mean of its three lengths): "
        + "; ".join(f"{name} " + ", ".join(f"{v} {x}" for v, x in row.items()) for name, row in PAPER_MEANS.items()),
        "",
        "| variant | mixer | lr | " + " | ".join(f"T={n}" for n in lengths) + " |",
        "|---|---|---:|" + "---:|" * len(lengths),
    ]
    for variant, run in result["runs"].items():
        for mixer, seed_means in run["seed_means"].items():
            per_seed = list(zip(*seed_means, strict=True))  # [lengths][seeds]
            lines.append(f"| {variant} | {mixer} | {run['cells'][mixer]['best_lr']:g} | " + " | ".join(
                f"{_length_mean(run, mixer, i):.3f} ({min(v):.2f}-{max(v):.2f})" for i, v in enumerate(per_seed))
                + " |")
    lines += ["", *findings(result, lengths),
              "", f"Heat maps: {', '.join(run['dir'] + '/niah.png' for run in result['runs'].values())}"]
    return "\n".join(lines)


def findings(result: dict, lengths: list[int]) -> list[str]:
    """The paper's checkable statements against our numbers, at the longest length scored."""
    out, last = [], len(lengths) - 1
    runs = result["runs"]
    if all({"titans", "linear"} <= set(run["seed_means"]) for run in runs.values()):
        pairs = [f"{v} {_length_mean(r, 'titans', last):.3f} vs {_length_mean(r, 'linear', last):.3f}"
                 for v, r in runs.items()]
        out.append(f"- Paper: the deep memory (Titans) stays above linear memories as the context grows. Ours at "
                   f"T={lengths[last]}, Titans vs linear attention: {'; '.join(pairs)}.")
    if all("attn" in run["seed_means"] for run in runs.values()):
        drops = [f"{v} {_length_mean(r, 'attn', 0):.3f} -> {_length_mean(r, 'attn', last):.3f}"
                 for v, r in runs.items()]
        out.append(f"- Attention from the training length to {lengths[last] // lengths[0]}x it: {'; '.join(drops)} "
                   "(the paper trains at the lengths it scores; here longer contexts are also unseen positions).")
    return out


def _length_mean(run: dict, mixer: str, i: int) -> float:
    """A mixer's accuracy at the i-th length: the mean over seeds of each seed's mean over depths."""
    seeds = run["seed_means"][mixer]
    return sum(seed[i] for seed in seeds) / len(seeds)


def heat_maps(result: dict, path: Path) -> dict[str, Path]:
    """Each variant's heat map, drawn with its runs (experiments/niah_maps.py); nothing is drawn at `path`."""
    return {variant: Path(run["dir"]) / "niah.png" for variant, run in result["runs"].items()}


REPRO = Repro(
    name="nl-niah",
    help="Nested Learning Table 1's pattern: needle-in-a-haystack heat maps at 1x/2x/4x the training length, 3 "
         "variants x 5 mixers x 2 lrs x 2 seeds (60 runs, about 35 min of one thread; resumable)",
    variants={"default": NIAHSettings(), "quick": QUICK},
    run=run, format_report=format_report, plot=heat_maps,
)
