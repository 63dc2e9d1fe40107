"""`regmem repro am-heads`: the multi-head trade-off of *Understanding Transformer from the Perspective of
Associative Memory* (Zhong, Xu, Ao, Shi; arXiv:2505.19488), Fig. 2 (Sec. 3.1), at CPU scale.

The paper's argument (Sec. 2.1, eqs. 19-23): splitting d_model into more, smaller heads buys expressivity (more
similarity patterns per query-key pair) at the price of retrieval precision per head. The exp kernel has precision to
spare, so softmax attention gains from many heads; the linear kernel is capacity-limited (retrieval noise-to-signal
SNR^-1 ~ N / d_k for N stored pairs in d_k dims, Sec. 2.1), so linear attention gains from fewer, larger heads. Fig. 2
(GPT-2 small, 12 layers, d 768, FineWeb; validation loss): linear attention improves markedly at 1 head, softmax
attention gets worse. Both arms apply a per-head RMSNorm to the attention output; for softmax this equals
un-normalised exp attention plus that norm (the denominator is a positive per-head scalar, Sec. 2.1, eq. 18).

Here both kernels run at n_heads in {1, 2, 4, 8} at a fixed d_model on two tasks:
(a) MQAR, one layer, N key-value pairs against head dims d_model / n_heads on both sides of N, the direct test of
    the capacity argument (accuracy);
(b) byte-level text (CPython's documentation, regmem.tasks.text), one block of mixer + SwiGLU, validation bits per
    byte (the paper's validation loss, in bits).
The arms differ only in the kernel: `attn` with `head_norm=True` (SDPA softmax, then per-head RMSNorm) and `linear`
(the identity feature map, q.k / sqrt(d_k), then per-head RMSNorm with the output gate off). Neither has positional
encodings (`rotary=False`: the linear layer has none); a length-2 causal convolution supplies local order, on q, k
and v for attention (its only option) and on the keys for linear attention (TTR Sec. 6's key convolution: with q
and v convolved too it did not learn MQAR at this budget). Every cell (task, kernel, n_heads) trains the same steps
at each learning rate of the grid and seed, and is reported at its own best learning rate, mean over seeds with the
min-max spread (experiments/protocol.py). Runs are stored under the output directory, so the command resumes.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path

from regmem.lab.experiments.presets import Preset
from regmem.lab.experiments.protocol import (
    RunStore,
    execute_bracketed,
    higher_is_better,
    run_grid,
    summarize,
    train_run,
)
from regmem.lab.experiments.repro.outputs import selection_note
from regmem.lab.experiments.repro.record import Repro
from regmem.lab.experiments.runs import Run

KERNEL_NAMES = {"attn": "softmax", "linear": "linear"}
# The paper's Fig. 2, per kernel: what 1 head does against the default multi-head model (validation loss).
PAPER_CLAIM = {"linear": "improves significantly at 1 head", "attn": "degrades at 1 head"}
CLAIM = ("Paper (Fig. 2, Sec. 3.1; GPT-2 small, d 768, FineWeb, validation loss; qualitative, no numbers printed): "
         "with per-head RMSNorm in both arms, linear attention improves significantly when the heads are reduced to "
         "1 (capacity-limited, SNR^-1 ~ N/d_k), softmax attention degrades at 1 head (the exp kernel has precision "
         "to spare, so many small heads win).")


@dataclass(frozen=True)
class HeadsSettings:
    tasks: tuple[str, ...] = ("mqar", "text")
    kernels: tuple[str, ...] = ("attn", "linear")
    head_counts: tuple[int, ...] = (1, 2, 4, 8)  # at fixed d_model: head dim = d_model / n_heads
    seeds: tuple[int, ...] = (0, 1)
    short_conv: int = 2  # causal conv length (module docstring): the only source of order, no positions
    linear_chunk_size: int = 16  # linear attention's chunk length: speed only (the chunk form is exact)
    workers: int = 2  # runs trained at once, one process and one torch thread each
    extend_grid: int = 2  # points added past a grid edge where a cell's best lr lies (protocol.execute_bracketed)
    # (a) MQAR: pairs N = 8 against head dims 32 / 16 / 8 / 4, so N / d_k = 0.25 ... 2
    mqar_d_model: int = 32
    mqar_pairs: int = 8
    mqar_seq_len: int = 32  # >= 4 N
    mqar_vocab_size: int = 128  # must exceed seq_len
    mqar_steps: int = 300  # early stop at 99% held-out accuracy
    mqar_batch_size: int = 64
    mqar_lrs: tuple[float, ...] = (1e-2, 3e-2, 1e-1)  # softmax needed 1e-1 at 8 heads of 4 dims in a probe
    mqar_num_eval: int = 256
    # (b) byte-level text: one block of mixer + SwiGLU, head dims 64 / 32 / 16 / 8
    text_d_model: int = 64
    text_layers: int = 1
    text_seq_len: int = 64
    text_steps: int = 200
    text_batch_size: int = 32
    text_lrs: tuple[float, ...] = (3e-3, 1e-2)  # 3e-2 was worse for both kernels at 1 and 8 heads in a probe
    text_num_eval: int = 512  # validation windows of text_seq_len bytes (32k bytes), scored once at the end


# Twice the width (the same N / d_k for MQAR), two blocks and five times the steps on text, three seeds (hours on 2
# cores; `--set workers=16` on a bigger machine).
FULL = HeadsSettings(seeds=(0, 1, 2), mqar_d_model=64, mqar_pairs=16, mqar_seq_len=64, mqar_vocab_size=256,
                     mqar_steps=1000, text_d_model=128, text_layers=2, text_seq_len=128, text_steps=1000,
                     text_lrs=(1e-3, 3e-3, 1e-2))
QUICK = HeadsSettings(head_counts=(1, 2), workers=1, mqar_d_model=8, mqar_pairs=2, mqar_seq_len=8, mqar_vocab_size=16,
                      mqar_steps=2, mqar_batch_size=4, mqar_lrs=(1e-2,), mqar_num_eval=8, text_d_model=8,
                      text_seq_len=8, text_steps=2, text_batch_size=4, text_lrs=(1e-2,), text_num_eval=4)


def mixer_kwargs(settings: HeadsSettings) -> dict:
    """Both arms: per-head RMSNorm on the output, no positions, a short conv (module docstring)."""
    return {
        "attn": {"head_norm": True, "rotary": False, "short_conv": settings.short_conv},
        "linear": {"output_gate": False, "short_conv": settings.short_conv, "short_conv_on": "k",
                   "chunk_size": settings.linear_chunk_size},
    }


def task_preset(settings: HeadsSettings, task: str) -> Preset:
    """The model and budget of one task; n_heads is a placeholder that every run replaces (`train_heads_run`)."""
    s, heads = settings, max(settings.head_counts)
    if task == "mqar":
        return Preset(
            name="am-heads-mqar", d_model=s.mqar_d_model, n_layers=1, n_heads=heads, ffn="none",
            task={"vocab_size": s.mqar_vocab_size, "seq_len": s.mqar_seq_len, "num_kv_pairs": s.mqar_pairs,
                  "random_non_queries": False},
            steps=s.mqar_steps, batch_size=s.mqar_batch_size, lr=s.mqar_lrs[0],
            num_train=s.mqar_steps * s.mqar_batch_size, num_eval=s.mqar_num_eval,
            eval_every=max(s.mqar_steps // 10, 1), mixer_kwargs=mixer_kwargs(s))
    if task == "text":
        return Preset(
            name="am-heads-text", d_model=s.text_d_model, n_layers=s.text_layers, n_heads=heads, ffn="swiglu",
            task={"seq_len": s.text_seq_len}, steps=s.text_steps, batch_size=s.text_batch_size, lr=s.text_lrs[0],
            num_train=s.text_steps * s.text_batch_size, num_eval=s.text_num_eval,
            eval_every=s.text_steps, mixer_kwargs=mixer_kwargs(s))
    raise ValueError(f"tasks must name 'mqar' or 'text', got {task!r}")


def train_heads_run(run: Run, preset: Preset) -> dict:
    """`train_run` with the model's n_heads taken from the run's setting (the other setting fields are task
    fields, as in the protocol)."""
    fields = dict(run.setting)
    heads = fields.pop("n_heads")
    return train_run(dataclasses.replace(run, setting=fields), dataclasses.replace(preset, n_heads=heads))


def run(settings: HeadsSettings, out_dir: Path, *, log=print, progress: bool = True) -> dict:
    """Every (task, kernel, n_heads, lr, seed); {"settings", "presets", "cells" (best lr per cell), "runs"}."""
    for heads in settings.head_counts:
        for d_model in (settings.mqar_d_model, settings.text_d_model):
            if d_model % heads:
                raise ValueError(f"head_counts: {heads} does not divide d_model {d_model}")
    lrs = {"mqar": settings.mqar_lrs, "text": settings.text_lrs}
    presets, cells, records = {}, [], []
    for task in settings.tasks:
        presets[task] = task_preset(settings, task)
        grid = run_grid([task], settings.kernels, [{"n_heads": h} for h in settings.head_counts], lrs[task],
                          settings.seeds)
        runs = execute_bracketed(grid, presets[task], RunStore(out_dir / "am-heads-runs", presets[task]),
                                 extend=settings.extend_grid, progress=progress,
                       log=log, train=train_heads_run, workers=settings.workers)
        records += runs
        cells += [dataclasses.asdict(c) for c in summarize(runs)]
    return {"settings": dataclasses.asdict(settings), "presets": {t: p.to_dict() for t, p in presets.items()},
            "cells": cells, "runs": records}


def _cell(result: dict, task: str, kernel: str, heads: int) -> dict:
    return next(c for c in result["cells"]
                if (c["task"], c["mixer"], c["setting"]["n_heads"]) == (task, kernel, heads))


def _stat(cell: dict) -> str:
    return f"{cell['mean']:.3f} ({cell['low']:.3f}-{cell['high']:.3f}) @{cell['best_lr']:g}"


def one_head_effect(result: dict, task: str, kernel: str) -> dict:
    """1 head against the most heads (the paper's default): the change in the task's metric, signed so that
    positive means 1 head is better, and whether the two cells' seed ranges are apart."""
    heads = result["settings"]["head_counts"]
    one, many = _cell(result, task, kernel, min(heads)), _cell(result, task, kernel, max(heads))
    sign = 1.0 if higher_is_better(one["metric"]) else -1.0
    apart = one["low"] > many["high"] or many["low"] > one["high"]
    cells = [_cell(result, task, kernel, h) for h in heads]
    best = max(cells, key=lambda c: sign * c["mean"])["setting"]["n_heads"]
    return {"gain": sign * (one["mean"] - many["mean"]), "apart": apart, "many": max(heads), "best": best,
            "metric": one["metric"]}


def verdict(kernel: str, effect: dict) -> str:
    """Whether the paper's direction for `kernel` (linear: 1 head better; softmax: 1 head worse) holds."""
    wanted = effect["gain"] > 0 if kernel == "linear" else effect["gain"] < 0
    if effect["gain"] == 0:
        return "Does not reproduce (no difference)"
    if not wanted:
        return "Does not reproduce (opposite direction" + (", beyond the seed spread)" if effect["apart"] else ")")
    return "Reproduces (beyond the seed spread)" if effect["apart"] else "Same direction, within the seed spread"


def findings(result: dict) -> list[str]:
    out = []
    s = result["settings"]
    for task in s["tasks"]:
        effects = {}
        for kernel in s["kernels"]:
            e = effects[kernel] = one_head_effect(result, task, kernel)
            better = "better" if e["gain"] > 0 else "worse"
            out.append(f"- {task}, {KERNEL_NAMES[kernel]}: paper {PAPER_CLAIM[kernel]}. Ours: 1 head is "
                       f"{abs(e['gain']):.3f} {e['metric']} {better} than {e['many']} heads; best at {e['best']} "
                       f"head(s). {verdict(kernel, e)}.")
        if set(effects) == {"attn", "linear"}:
            gap = effects["linear"]["gain"] - effects["attn"]["gain"]
            out.append(f"- {task}: 1 head helps linear attention {gap:+.3f} {effects['linear']['metric']} more than "
                       f"softmax (paper: positive).")
    return out


def format_report(result: dict) -> str:
    s, presets = result["settings"], result["presets"]
    lines = [CLAIM, ""]
    for task in s["tasks"]:
        p = presets[task]
        metric = _cell(result, task, s["kernels"][0], s["head_counts"][0])["metric"]
        lrs = s["mqar_lrs"] if task == "mqar" else s["text_lrs"]
        what = (f"MQAR, {s['mqar_pairs']} pairs, seq_len {s['mqar_seq_len']}, vocab {s['mqar_vocab_size']}, "
                f"one layer, no MLP, runs stop at 0.99 validation accuracy (above it: solved)" if task == "mqar" else
                f"byte-level text (CPython docs), seq_len {s['text_seq_len']}, {p['n_layers']} block(s) + SwiGLU")
        lines += [
            f"{task}: {what}; d_model {p['d_model']}, {p['steps']} steps x batch {p['batch_size']}, lr grid "
            f"{', '.join(f'{lr:g}' for lr in lrs)} (best per cell), seeds {', '.join(map(str, s['seeds']))}. "
            f"Cells: {metric} ({'higher' if higher_is_better(metric) else 'lower'} is better), mean (min-max over "
            f"seeds) @ best lr. " + selection_note(metric),
            "",
            "| kernel + per-head RMSNorm | " + " | ".join(
                f"{h} head(s), d_k {p['d_model'] // h}" for h in s["head_counts"]) + " |",
            "|---|" + "---:|" * len(s["head_counts"]),
        ]
        for kernel in s["kernels"]:
            lines.append(f"| {KERNEL_NAMES[kernel]} (`{kernel}`) | "
                         + " | ".join(_stat(_cell(result, task, kernel, h)) for h in s["head_counts"]) + " |")
        if task == "mqar":
            lines.append("| N / d_k (linear SNR^-1 estimate) | " + " | ".join(
                f"{s['mqar_pairs'] * h / p['d_model']:.2f}" for h in s["head_counts"]) + " |")
        lines.append("")
    lines += findings(result)
    return "\n".join(lines)


def plot_heads(result: dict, path: Path) -> None:
    """One panel per task: the metric against n_heads (log 2 axis), one line per kernel, min-max error bars."""
    from regmem.lab.experiments.plots import plt, save_figure

    s = result["settings"]
    fig, axes = plt.subplots(1, len(s["tasks"]), figsize=(5 * len(s["tasks"]), 4), dpi=120, squeeze=False)
    for ax, task in zip(axes[0], s["tasks"], strict=True):
        for kernel in s["kernels"]:
            cells = [_cell(result, task, kernel, h) for h in s["head_counts"]]
            ax.errorbar(s["head_counts"], [c["mean"] for c in cells], marker="o", capsize=3,
                        yerr=[[c["mean"] - c["low"] for c in cells], [c["high"] - c["mean"] for c in cells]],
                        label=f"{KERNEL_NAMES[kernel]} + head RMSNorm")
        metric = cells[0]["metric"]
        ax.set_xscale("log", base=2)
        ax.set_xticks(s["head_counts"], [str(h) for h in s["head_counts"]])
        ax.minorticks_off()
        ax.set_xlabel(f"n_heads (d_model {result['presets'][task]['d_model']} fixed)")
        ax.set_ylabel(f"{metric} ({'higher' if higher_is_better(metric) else 'lower'} is better)")
        ax.set_title(f"{task}: best lr, mean and min-max over seeds")
        ax.grid(alpha=0.3)
        ax.legend()
    fig.suptitle("arXiv:2505.19488 Fig. 2: heads vs kernel")
    save_figure(fig, path)


REPRO = Repro(
    name="am-heads",
    help="Associative memory Fig. 2: softmax vs linear attention x 1-8 heads at fixed width, on MQAR and byte "
         "text (resumable; --full: wider models, 3 seeds)",
    variants={"default": HeadsSettings(), "quick": QUICK, "full": FULL},
    run=run, format_report=format_report, plot=plot_heads,
)
