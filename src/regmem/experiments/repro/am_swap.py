"""`regmem repro am-swap`: swap tracking of five elements (arXiv:2505.19488, Sec. 3.2, Figs. 4, 6 and 8; Listing 2).

Each input token swaps two of five positions and the label is the element now at position 0 (tasks/swap.py).
Theorem 1 says a one-layer DeltaFormer with a rounding kernel tracks such swaps for any length; the paper's figures
(accuracy curves, no numbers) claim:
  - Fig. 4: with kappa_2 = softmax and almost any simple kappa_1, a one-layer DeltaFormer beats the Transformer, a
    kappa_1 close to rounding reaches 100 %, extra Transformer layers do not help, and softmax normalisation hurts
    the exp similarity (kappa_1 = softmax below kappa_1 = exp);
  - Fig. 6: with kappa_1 = round, a length curriculum (doubling at 0.99) reaches lengths that direct training does
    not, and without RoPE direct training is at chance while the curriculum reaches 100 %;
  - Fig. 8: with head dim 3, more query heads sharing one key/value head (the erase mixture of eq. 111) raise the
    accuracy of nonlinear kernels, not of the linear one.

Here every arm is trained with Listing 2's loop (experiments/repro/am_toys.py: fresh batches of 128, AdamW with
weight decay 0.01, 128 warm-up steps then linear decay, dim 12, four query heads, one key/value head, no RoPE
unless stated), each at its best lr of the grid by mean accuracy over the seeds, and scored on fresh sequences.
Figure 4 runs by default with five kappa_1 (`--set kernels=...` picks others of KAPPA_1: Listing 2's zero-filled
softmax, rounding to two decimals); `--set figures=4,6,8` adds the other figures; `--full` runs all three, every
kernel, at the listing's 4000 steps with three lrs and its three seeds.
"""

from __future__ import annotations

import dataclasses
import functools
from dataclasses import dataclass
from pathlib import Path

from regmem.experiments.plots import plt, save_figure
from regmem.experiments.protocol import RunStore, execute, run_grid, summarize
from regmem.experiments.repro.am_toys import ToyBudget, arm, arm_bars, toy_preset, train_toy
from regmem.experiments.repro.record import Repro

_DF = {"n_kv_heads": 1, "rotary": False, "bias": True, "read_kernel": "softmax"}  # Listing 2's DeltaAttention
_ATTN = {"n_kv_heads": 1, "rotary": False}


KAPPA_1 = {  # the kappa_1 arms of Fig. 4 by name (kappa_2 = softmax)
    "linear": {"erase_kernel": "linear"},
    "relu": {"erase_kernel": "relu"},
    "exp": {"erase_kernel": "exp"},
    "softmax": {"erase_kernel": "softmax"},
    "softmax_listing2": {"erase_kernel": "softmax", "listing2_softmax": True},  # Listing 2's zero-filled mask
    "round": {"erase_kernel": "round"},
    "round2": {"erase_kernel": "round", "decimals": 2},  # Fig. 4's caption: round to two decimals
}


def figure4_arms(kernels: tuple[str, ...]) -> dict[str, tuple[str, dict]]:
    """Fig. 4: the Transformer (1 and 2 layers) and DeltaFormer with each kappa_1 of `kernels` (kappa_2 =
    softmax)."""
    arms = {"Transformer, 1 layer": ("attn", arm("attn-1", **_ATTN)),
            "Transformer, 2 layers": ("attn", arm("attn-2", n_layers=2, **_ATTN))}
    for name in kernels:
        if name not in KAPPA_1:
            raise ValueError(f"kernels must be among {sorted(KAPPA_1)}, got {name!r}")
        arms[f"DeltaFormer, kappa_1 = {name}"] = ("deltaformer", arm(f"df-{name}", **_DF, **KAPPA_1[name]))
    return arms


def figure6_arms(length: int, start: int) -> dict[str, tuple[str, dict]]:
    """Fig. 6: kappa_1 = round, trained at `length` directly or by doubling from `start` (threshold 0.99), RoPE or
    not."""
    arms = {}
    for rope in (True, False):
        options = {**_DF, "erase_kernel": "round", "rotary": rope}
        name = "RoPE" if rope else "NoPE"
        arms[f"{name}, {length} directly"] = ("deltaformer", arm(f"df-round-{name}", **options))
        arms[f"{name}, {start} to {length}"] = ("deltaformer", arm(f"df-round-{name}-curriculum",
                                                                  curriculum=(start, 0.99, length), **options))
    return arms


def figure8_arms(query_heads: tuple[int, ...]) -> dict[str, tuple[str, dict]]:
    """Fig. 8: head dim 3 and G query heads on one key/value head, kappa_1 in {round, linear} (kappa_2 = softmax)."""
    arms = {}
    for kernel in ("round", "linear"):
        for g in query_heads:
            arms[f"kappa_1 = {kernel}, {g} query heads"] = (
                "deltaformer", arm(f"df-{kernel}-G{g}", **{**_DF, "erase_kernel": kernel}) | {"heads": g})
    return arms


@dataclass(frozen=True)
class SwapSettings:
    figures: tuple[str, ...] = ("4",)
    kernels: tuple[str, ...] = ("linear", "relu", "exp", "softmax", "round")  # Fig. 4's kappa_1 (KAPPA_1)
    steps: int = 1000
    lrs: tuple[float, ...] = (0.01, 0.03)
    seeds: tuple[int, ...] = (42, 0)
    seq_len: int = 16  # Listing 2's length (Figs. 4 and 8)
    curriculum_len: int = 64  # Fig. 6 (the paper: 256, from 32)
    curriculum_start: int = 16
    query_heads: tuple[int, ...] = (1, 2, 4, 8)
    num_eval: int = 512
    workers: int = 2


FULL = SwapSettings(figures=("4", "6", "8"), kernels=tuple(KAPPA_1), steps=4000, lrs=(0.003, 0.01, 0.03),
                    seeds=(42, 0, 1), curriculum_len=256, curriculum_start=32)
QUICK = SwapSettings(figures=("4", "6", "8"), kernels=tuple(KAPPA_1), steps=4, lrs=(0.01,), seeds=(0,),
                     curriculum_len=32, query_heads=(1, 2),
                     num_eval=16, workers=1)


def _figure(settings: SwapSettings, figure: str):
    """(arms, train length, eval length, head dim) of one figure. Head dim 3 is Listing 2's (dim 12, 4 heads);
    Fig. 6 uses 4, since RoPE rotates pairs of channels."""
    if figure == "4":
        return figure4_arms(settings.kernels), settings.seq_len, settings.seq_len, 3
    if figure == "6":
        return (figure6_arms(settings.curriculum_len, settings.curriculum_start), settings.curriculum_len,
                settings.curriculum_len, 4)
    if figure == "8":
        return figure8_arms(settings.query_heads), settings.seq_len, settings.seq_len, 3
    raise ValueError(f"figures must be among 4, 6, 8, got {figure!r}")


def run(settings: SwapSettings, out_dir: Path, *, log=print, progress: bool = True) -> dict:
    """Every arm of every figure asked for, over lrs and seeds (runs stored under `out_dir`/am-swap-runs);
    {"settings", "figures": {figure: one row per arm}}."""
    figures = {}
    for figure in settings.figures:
        arms, train_len, eval_len, head_dim = _figure(settings, figure)
        for heads in sorted({setting.get("heads", 4) for _, setting in arms.values()}):
            group = {label: (m, s) for label, (m, s) in arms.items() if s.get("heads", 4) == heads}
            budget = ToyBudget(steps=settings.steps, num_eval=settings.num_eval, d_model=head_dim * heads,
                               n_heads=heads)
            preset = toy_preset(f"am-swap-fig{figure}-h{heads}", budget, {"seq_len": train_len},
                                {"seq_len": eval_len})
            runs = [run for mixer, setting in group.values()
                     for run in run_grid(["swap"], [mixer], [setting], settings.lrs, settings.seeds)]
            records = execute(runs, preset, RunStore(out_dir / "am-swap-runs", preset), progress=progress, log=log,
                              train=functools.partial(train_toy, budget=budget), workers=settings.workers)
            figures.setdefault(figure, []).extend(_cells(group, records))
    return {"settings": dataclasses.asdict(settings), "figures": figures}


def _cells(arms: dict, records: list[dict]) -> list[dict]:
    """One row per arm: its best lr (mean accuracy over seeds), the spread and the runs' curriculum numbers."""
    rows = []
    for summary in summarize(records):
        label = next(name for name, (_, s) in arms.items() if s["label"] == summary.setting["label"])
        runs = [r for r in records if r["setting"]["label"] == summary.setting["label"] and r["lr"] == summary.best_lr]
        rows.append({"arm": label, **dataclasses.asdict(summary),
                     "solved_at": [r["solved_at"] for r in runs], "train_len": [r["train_len"] for r in runs],
                     "params": runs[0]["parameters"]})
    order = list(arms)
    return sorted(rows, key=lambda r: order.index(r["arm"]))


CLAIMS = {
    "4": "Fig. 4: a one-layer DeltaFormer beats the Transformer for almost any simple kappa_1 (kappa_2 = softmax); "
         "a kappa_1 close to rounding reaches 100 %; more Transformer layers do not help; kappa_1 = softmax is worse "
         "than kappa_1 = exp.",
    "6": "Fig. 6 (kappa_1 = round): direct training at the long length converges slowly (NoPE: chance), the "
         "doubling curriculum reaches 100 %.",
    "8": "Fig. 8 (head dim 3): more query heads per key/value head raise the accuracy of nonlinear kappa_1, not of "
         "the linear one.",
}


def _row(row: dict) -> str:
    solved = [s for s in row["solved_at"] if s is not None]
    when = f"{len(solved)}/{len(row['solved_at'])}" + (f" (step {min(solved)})" if solved else "")
    return (f"| {row['arm']} | {row['best_lr']:g} | {100 * row['mean']:.1f} ({100 * row['low']:.1f}-"
            f"{100 * row['high']:.1f}) | {when} | {', '.join(str(n) for n in row['train_len'])} | {row['params']} |")


def format_report(result: dict) -> str:
    s = result["settings"]
    lines = [f"arXiv:2505.19488 Sec. 3.2: swap tracking of 5 elements, token accuracy % on fresh sequences. "
             f"{s['steps']} steps x batch 128 per run, lr grid {', '.join(f'{lr:g}' for lr in s['lrs'])} (each arm "
             f"at its best by mean over seeds {', '.join(map(str, s['seeds']))}): mean (min-max)."]
    for figure, rows in result["figures"].items():
        lines += ["", f"Paper, {CLAIMS[figure]}", "",
                  "| arm | best lr | accuracy % | runs reaching 99.9 % on a batch | train length reached | params |",
                  "|---|---:|---:|---|---|---:|", *(_row(r) for r in rows)]
        lines += ["", *findings(figure, rows)]
    return "\n".join(lines)


def findings(figure: str, rows: list[dict]) -> list[str]:
    mean = {r["arm"]: r["mean"] for r in rows}
    if figure == "4":
        transformer = max(mean["Transformer, 1 layer"], mean["Transformer, 2 layers"])
        deltas = {a: m for a, m in mean.items() if a.startswith("DeltaFormer")}
        better = [a for a, m in deltas.items() if m > transformer]
        best = max(deltas, key=deltas.get)
        return [f"- DeltaFormer beats the better Transformer ({100 * transformer:.1f} %) with {len(better)}/"
                f"{len(deltas)} kappa_1; the best is {best.split('= ')[1]} at {100 * deltas[best]:.1f} %.",
                f"- 100 % (>= 99.5 %) reached: {'yes' if deltas[best] >= 0.995 else 'no'} at this budget.",
                f"- Two Transformer layers vs one: {100 * mean['Transformer, 2 layers']:.1f} vs "
                f"{100 * mean['Transformer, 1 layer']:.1f} %.",
                _softmax_vs_exp(mean)]
    if figure == "6":
        return [f"- {a}: {100 * m:.1f} %" for a, m in mean.items()]
    by_kernel = {}
    for r in rows:
        by_kernel.setdefault(r["arm"].split(",")[0], []).append(f"{100 * r['mean']:.1f}")
    return [f"- {k} by query heads: {' -> '.join(v)} %" for k, v in by_kernel.items()]


def _softmax_vs_exp(mean: dict) -> str:
    pick = {k: mean.get(f"DeltaFormer, kappa_1 = {k}") for k in ("softmax", "exp", "softmax_listing2")}
    if pick["softmax"] is None or pick["exp"] is None:
        return "- kappa_1 = softmax vs exp: not run."
    listing = ("" if pick["softmax_listing2"] is None
               else f" (Listing 2's masking: {100 * pick['softmax_listing2']:.1f} %)")
    return f"- kappa_1 = softmax vs exp: {100 * pick['softmax']:.1f} vs {100 * pick['exp']:.1f} %{listing}."


def plot_swap(result: dict, path: Path) -> None:
    figures = result["figures"]
    fig, axes = plt.subplots(1, len(figures), figsize=(6 * len(figures), 4.5), squeeze=False)
    for ax, (figure, rows) in zip(axes[0], figures.items(), strict=True):
        arm_bars(ax, rows, metric="token accuracy", chance=0.2, chance_label="chance (1/5)", fontsize=7)
        ax.set_title(f"Fig. {figure}")
        ax.legend(loc="lower right", fontsize=7)
    save_figure(fig, path, dpi=120)


REPRO = Repro(
    name="am-swap",
    help="Associative memory Figs. 4 (default), 6 and 8 (--set figures=4,6,8): one-layer DeltaFormer vs "
         "Transformer on 5-element swaps (resumable; --full: 4000 steps, 3 lrs, 3 seeds)",
    variants={"default": SwapSettings(), "quick": QUICK, "full": FULL},
    run=run, format_report=format_report, plot=plot_swap,
)
