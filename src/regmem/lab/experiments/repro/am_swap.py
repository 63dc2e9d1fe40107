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
weight decay 0.01, 128 warm-up steps then linear decay, dim 12, four query heads, one key/value head), each at its
best lr of the grid by mean validation accuracy over the seeds, and scored on fresh test sequences at the training
length and at each of `eval_lengths` (Fig. 6's length generalisation: trained at 16, scored at 16, 32 and 64).
Positions: Listing 2 passes `rotary_base=None` (no positions, "NoPE") while Sec. 3.2's text speaks of removing "the
default rotary position embeddings" (RoPE) and Fig. 6 compares the two; `positions` runs the arms of Figs. 4 and 6
once per choice, side by side (default both). RoPE rotates pairs of channels, so the RoPE arms use `rope_head_dim`
(4) channels per head where Listing 2 has 3 (`head_dim`); Fig. 6 uses `rope_head_dim` for both, and Fig. 8 (head
dim 3 by its caption) runs as the listing, without positions.
Figure 4 runs by default with six kappa_1: linear, relu, exp, softmax, rounding to two decimals ("round2", the rounding
of Fig. 4's caption, |1.236| = 1.24) and Listing 2's integer rounding ("round", its RoundSTE) as a named extra arm
(`--set kernels=...` picks others of KAPPA_1: Listing 2's zero-filled softmax), at 1000 steps per run (the listing
trains 4000, about four times the hours); `--set figures=4,6,8` adds the other figures; `--full` runs all three, every
kernel, at the listing's 4000 steps with three lrs and its three seeds.
"""

from __future__ import annotations

import dataclasses
import functools
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from regmem.lab.experiments.plots import pyplot, save_figure
from regmem.lab.experiments.protocol import RunStore, execute_bracketed, run_grid, summarize
from regmem.lab.experiments.repro.am_toys import ToyBudget, arm, arm_bars, toy_preset, train_toy
from regmem.lab.experiments.repro.record import Repro

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


Positions = Literal["none", "rope"]
POSITIONS: dict[str, str] = {"none": "NoPE", "rope": "RoPE"}  # each choice's name in the arms' labels


def figure4_arms(kernels: tuple[str, ...], positions: tuple[Positions, ...] = ("none",)) -> dict[str, tuple[str, dict]]:
    """Fig. 4: the Transformer (1 and 2 layers) and DeltaFormer with each kappa_1 of `kernels` (kappa_2 =
    softmax), once per choice of `positions`, side by side; each label ends with the positions' name ("NoPE",
    "RoPE"), and the NoPE arms keep the run-store labels of the runs made before RoPE arms existed."""
    for name in kernels:
        if name not in KAPPA_1:
            raise ValueError(f"setting 'kernels': each must be among {sorted(KAPPA_1)}, got {name!r}")
    base = {"Transformer, 1 layer": ("attn", "attn-1", 1, _ATTN),
            "Transformer, 2 layers": ("attn", "attn-2", 2, _ATTN),
            **{f"DeltaFormer, kappa_1 = {name}": ("deltaformer", f"df-{name}", 1, {**_DF, **KAPPA_1[name]})
               for name in kernels}}
    arms = {}
    for label, (mixer, run_label, layers, options) in base.items():
        for position in positions:
            suffix = "" if position == "none" else f"-{position}"
            arms[f"{label}, {POSITIONS[position]}"] = (
                mixer, arm(run_label + suffix, n_layers=layers, **{**options, "rotary": position == "rope"}))
    return arms


def figure6_arms(length: int, start: int, positions: tuple[Positions, ...] = ("rope", "none")
                 ) -> dict[str, tuple[str, dict]]:
    """Fig. 6: kappa_1 = round, trained at `length` directly or by doubling from `start` (threshold 0.99), once per
    choice of `positions`."""
    arms = {}
    for position in positions:
        options = {**_DF, "erase_kernel": "round", "rotary": position == "rope"}
        name = POSITIONS[position]
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
    kernels: tuple[str, ...] = ("linear", "relu", "exp", "softmax", "round2", "round")  # Fig. 4's kappa_1 (KAPPA_1)
    positions: tuple[Positions, ...] = ("none", "rope")  # Figs. 4 and 6: Listing 2's none, the text's RoPE, or both
    steps: int = 1000  # per run; the listing's 4000 take about four times as long
    lrs: tuple[float, ...] = (0.01, 0.03, 0.1)  # with (0.01, 0.03), 12 of 14 arms were best at the top
    extend_grid: int = 2  # points added past a grid edge where a cell's best lr lies (protocol.execute_bracketed)
    seeds: tuple[int, ...] = (42, 0)
    seq_len: int = 16  # Listing 2's length (Figs. 4 and 8)
    eval_lengths: tuple[int, ...] = (16, 32, 64)  # every run is also scored at these lengths (Fig. 6's 2x, 4x)
    head_dim: int = 3  # Listing 2's dim 12 over 4 heads (Figs. 4 and 8 without positions)
    rope_head_dim: int = 4  # RoPE rotates pairs of channels: the RoPE arms of Fig. 4 and both of Fig. 6
    curriculum_len: int = 64  # Fig. 6 (the paper: 256, from 32)
    curriculum_start: int = 16
    query_heads: tuple[int, ...] = (1, 2, 4, 8)
    num_eval: int = 512
    workers: int = 2

    def __post_init__(self):
        _check_choices("figures", self.figures, ("4", "6", "8"))
        _check_choices("kernels", self.kernels, tuple(KAPPA_1))
        _check_choices("positions", self.positions, tuple(POSITIONS))
        for key in ("steps", "seq_len", "head_dim", "curriculum_len", "curriculum_start", "num_eval", "workers"):
            _check_counts(key, (getattr(self, key),))
        _check_counts("seeds", self.seeds, least=0)
        _check_counts("query_heads", self.query_heads)
        if self.eval_lengths:  # empty: scored at the training length only
            _check_counts("eval_lengths", self.eval_lengths)
        _check_counts("rope_head_dim", (self.rope_head_dim,), least=2)
        if self.rope_head_dim % 2:
            raise ValueError(f"setting 'rope_head_dim': RoPE needs an even head dim >= 2, got {self.rope_head_dim!r}")


def _check_choices(key: str, values: tuple, choices: tuple[str, ...]) -> None:
    """ValueError naming `key` unless `values` is a non-empty tuple of distinct members of `choices`."""
    if not values or len(set(values)) != len(values) or any(v not in choices for v in values):
        raise ValueError(f"setting {key!r}: expected distinct values among {', '.join(choices)}, got {values!r}")


def _check_counts(key: str, values: tuple, least: int = 1) -> None:
    """ValueError naming `key` unless `values` is a non-empty tuple of integers >= `least`."""
    if not values or any(isinstance(v, bool) or not isinstance(v, int) or v < least for v in values):
        raise ValueError(f"setting {key!r}: expected integers >= {least}, got {values!r}")


FULL = SwapSettings(figures=("4", "6", "8"), kernels=tuple(KAPPA_1), steps=4000, lrs=(0.003, 0.01, 0.03),
                    seeds=(42, 0, 1), curriculum_len=256, curriculum_start=32)
QUICK = SwapSettings(figures=("4", "6", "8"), kernels=tuple(KAPPA_1), steps=4, lrs=(0.01,), seeds=(0,),
                     curriculum_len=32, query_heads=(1, 2),
                     num_eval=16, workers=1)


def _figure(settings: SwapSettings, figure: str) -> tuple[dict, int, dict[bool, int]]:
    """(arms, train and eval length, head dim by whether an arm has RoPE) of one figure."""
    if figure == "4":
        return (figure4_arms(settings.kernels, settings.positions), settings.seq_len,
                {False: settings.head_dim, True: settings.rope_head_dim})
    if figure == "6":
        return (figure6_arms(settings.curriculum_len, settings.curriculum_start, settings.positions),
                settings.curriculum_len, {False: settings.rope_head_dim, True: settings.rope_head_dim})
    return figure8_arms(settings.query_heads), settings.seq_len, {False: settings.head_dim}


def run(settings: SwapSettings, out_dir: Path, *, log=print, progress: bool = True) -> dict:
    """Every arm of every figure asked for, over lrs and seeds (runs stored under `out_dir`/am-swap-runs);
    {"settings", "figures": {figure: one row per arm}}. Arms of one head dim and head count share a budget."""
    figures = {}
    for figure in settings.figures:
        arms, length, head_dims = _figure(settings, figure)

        def shape(setting: dict, head_dims=head_dims) -> tuple[int, int]:
            return head_dims[setting["mixer_kwargs"]["rotary"]], setting.get("heads", 4)

        for head_dim, heads in sorted({shape(setting) for _, setting in arms.values()}):
            group = {label: (m, s) for label, (m, s) in arms.items() if shape(s) == (head_dim, heads)}
            budget = ToyBudget(steps=settings.steps, num_eval=settings.num_eval, d_model=head_dim * heads,
                               n_heads=heads)
            preset = toy_preset(f"am-swap-fig{figure}-h{heads}", budget, {"seq_len": length},
                                {"seq_len": length}, settings.eval_lengths)
            runs = [run for mixer, setting in group.values()
                    for run in run_grid(["swap"], [mixer], [setting], settings.lrs, settings.seeds)]
            records = execute_bracketed(runs, preset, RunStore(out_dir / "am-swap-runs", preset),
                                        extend=settings.extend_grid, progress=progress, log=log,
                              train=functools.partial(train_toy, budget=budget), workers=settings.workers)
            figures.setdefault(figure, []).extend(_cells(group, records))
        figures[figure].sort(key=lambda row, order=list(arms): order.index(row["arm"]))
    return {"settings": dataclasses.asdict(settings), "figures": figures}


def _cells(arms: dict, records: list[dict]) -> list[dict]:
    """One row per arm: its best lr (mean accuracy over seeds), the spread, its positions, the accuracy at each
    extra length at that lr ({length: {"mean", "low", "high"}} over seeds) and the runs' curriculum numbers."""
    rows = []
    for summary in summarize(records):
        label = next(name for name, (_, s) in arms.items() if s["label"] == summary.setting["label"])
        runs = [r for r in records if r["setting"]["label"] == summary.setting["label"] and r["lr"] == summary.best_lr]
        at_length = {n: [r["accuracy_at_length"][n] for r in runs] for n in runs[0].get("accuracy_at_length", {})}
        rows.append({"arm": label, **dataclasses.asdict(summary),
                     "positions": "rope" if summary.setting["mixer_kwargs"]["rotary"] else "none",
                     "at_length": {n: {"mean": sum(v) / len(v), "low": min(v), "high": max(v)}
                                   for n, v in at_length.items()},
                     "solved_at": [r["solved_at"] for r in runs], "train_len": [r["train_len"] for r in runs],
                     "params": runs[0]["parameters"]})
    return rows


CLAIMS = {
    "4": "Fig. 4: a one-layer DeltaFormer beats the Transformer for almost any simple kappa_1 (kappa_2 = softmax); "
         "a kappa_1 close to rounding reaches 100 %; more Transformer layers do not help; kappa_1 = softmax is worse "
         "than kappa_1 = exp.",
    "6": "Fig. 6 (kappa_1 = round): direct training at the long length converges slowly (NoPE: chance), the "
         "doubling curriculum reaches 100 %; RoPE helps optimisation, NoPE generalises in length better.",
    "8": "Fig. 8 (head dim 3): more query heads per key/value head raise the accuracy of nonlinear kappa_1, not of "
         "the linear one.",
}


def _spread(cell: dict) -> str:
    return f"{100 * cell['mean']:.1f} ({100 * cell['low']:.1f}-{100 * cell['high']:.1f})"


def _extra_lengths(settings: dict, length: int) -> list[int]:
    """The evaluation lengths shown in their own columns: all of `eval_lengths` but the training length."""
    return [n for n in settings["eval_lengths"] if n != length]


def _row(row: dict, extra: list[int]) -> str:
    solved = [s for s in row["solved_at"] if s is not None]
    when = f"{len(solved)}/{len(row['solved_at'])}" + (f" (step {min(solved)})" if solved else "")
    at = [_spread(row["at_length"][str(n)]) if str(n) in row["at_length"] else "-" for n in extra]
    return (f"| {row['arm']} | {row['best_lr']:g} | {_spread(row)} | {' | '.join([*at, when])} | "
            f"{', '.join(str(n) for n in row['train_len'])} | {row['params']} |")


def figure_length(settings: dict, figure: str) -> int:
    """The length a figure's arms train at (the curriculum's end for Fig. 6) and are ranked at."""
    return settings["curriculum_len"] if figure == "6" else settings["seq_len"]


def format_report(result: dict) -> str:
    s = result["settings"]
    names = " and ".join(POSITIONS[p] for p in s["positions"])
    lines = [f"arXiv:2505.19488 Sec. 3.2: swap tracking of 5 elements, token accuracy % on fresh test sequences. "
             f"{s['steps']} steps x batch 128 per run (the paper: 4000), lr grid "
             f"{', '.join(f'{lr:g}' for lr in s['lrs'])} (each arm at its best by mean validation accuracy at its "
             f"training length over seeds {', '.join(map(str, s['seeds']))}): test mean (min-max); the same runs "
             f"scored on test sequences at each length T. kappa_1 = round2 rounds to two decimals (Fig. 4's "
             f"caption), round to integers (Listing 2). "
             f"Positions ({names}, side by side in Figs. 4 and 6): NoPE is Listing 2's model, head dim "
             f"{s['head_dim']}; RoPE arms use head dim {s['rope_head_dim']} (RoPE rotates pairs of channels), "
             f"as do both arms of Fig. 6; Fig. 8 runs without positions."]
    for figure, rows in result["figures"].items():
        length = figure_length(s, figure)
        extra = _extra_lengths(s, length)
        header = [f"accuracy % at T = {length} (trained)", *(f"at T = {n}" for n in extra)]
        lines += ["", f"Paper, {CLAIMS[figure]}", "",
                  f"| arm | best lr | {' | '.join(header)} | runs reaching 99.9 % on a batch | train length reached "
                  "| params |",
                  "|---|---:|" + "---:|" * len(header) + "---|---|---:|", *(_row(r, extra) for r in rows)]
        lines += ["", *findings(figure, rows), *length_findings(rows, length, extra)]
    return "\n".join(lines)


def findings(figure: str, rows: list[dict]) -> list[str]:
    if figure == "4":
        return [line for position in POSITIONS for line in _figure4_findings(
            {r["arm"].rsplit(", ", 1)[0]: r["mean"] for r in rows if r["positions"] == position}, POSITIONS[position])]
    mean = {r["arm"]: r["mean"] for r in rows}
    if figure == "6":
        return [f"- {a}: {100 * m:.1f} %" for a, m in mean.items()]
    by_kernel = {}
    for r in rows:
        by_kernel.setdefault(r["arm"].split(",")[0], []).append(f"{100 * r['mean']:.1f}")
    return [f"- {k} by query heads: {' -> '.join(v)} %" for k, v in by_kernel.items()]


def _figure4_findings(mean: dict, name: str) -> list[str]:
    """Fig. 4's four claims for the arms of one choice of positions (`mean` by arm label without the positions)."""
    if not mean:
        return []
    transformer = max(mean["Transformer, 1 layer"], mean["Transformer, 2 layers"])
    deltas = {a: m for a, m in mean.items() if a.startswith("DeltaFormer")}
    better = [a for a, m in deltas.items() if m > transformer]
    best = max(deltas, key=deltas.get)
    return [f"- {name}: DeltaFormer beats the better Transformer ({100 * transformer:.1f} %) with {len(better)}/"
            f"{len(deltas)} kappa_1; the best is {best.split('= ')[1]} at {100 * deltas[best]:.1f} %.",
            f"- {name}: 100 % (>= 99.5 %) reached: {'yes' if deltas[best] >= 0.995 else 'no'} at this budget.",
            f"- {name}: two Transformer layers vs one: {100 * mean['Transformer, 2 layers']:.1f} vs "
            f"{100 * mean['Transformer, 1 layer']:.1f} %.",
            f"- {name}: {_softmax_vs_exp(mean)}"]


def length_findings(rows: list[dict], length: int, extra: list[int]) -> list[str]:
    """For each choice of positions: the mean over its arms of the accuracy drop from the training length to each
    longer length (the paper: NoPE drops less, Fig. 6)."""
    lines = []
    for position, name in POSITIONS.items():
        chosen = [r for r in rows if r["positions"] == position]
        drops = [(n, [r["mean"] - r["at_length"][str(n)]["mean"] for r in chosen if str(n) in r["at_length"]])
                 for n in extra if n > length]
        shown = [f"{length} -> {n}: {100 * sum(d) / len(d):.1f} points" for n, d in drops if d]
        if shown:
            lines.append(f"- {name}: mean accuracy drop over its {len(chosen)} arms, {'; '.join(shown)}.")
    return lines


def _softmax_vs_exp(mean: dict) -> str:
    pick = {k: mean.get(f"DeltaFormer, kappa_1 = {k}") for k in ("softmax", "exp", "softmax_listing2")}
    if pick["softmax"] is None or pick["exp"] is None:
        return "kappa_1 = softmax vs exp: not run."
    listing = ("" if pick["softmax_listing2"] is None
               else f" (Listing 2's masking: {100 * pick['softmax_listing2']:.1f} %)")
    return f"kappa_1 = softmax vs exp: {100 * pick['softmax']:.1f} vs {100 * pick['exp']:.1f} %{listing}."


def plot_swap(result: dict, path: Path) -> None:
    plt = pyplot()
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
         "Transformer on 5-element swaps, NoPE and RoPE side by side, trained at 16 and scored at 16/32/64 "
         "(56 runs of 1000 steps, the paper's 4000; about 15 min on 2 idle cores, resumable; --full: 4000 "
         "steps, 3 lrs, 3 seeds, hours)",
    variants={"default": SwapSettings(), "quick": QUICK, "full": FULL},
    run=run, format_report=format_report, plot=plot_swap,
)
