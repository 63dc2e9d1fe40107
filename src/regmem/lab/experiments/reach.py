"""`regmem analyze reach`: how far back a layer's gradient reaches, at initialisation.

A token mixer that must recall something from s tokens back is trained through the derivative of its output at the
query with respect to the input at the key. For one layer with random weights and input x ~ N(0, 1) [B, T, d_model]
this reads

    r(s) = || d ||y_{T-1}|| / d x_s ||        for every position s <= T - 1 (mean over the batch and the seeds)

and its trend with the distance T - 1 - s. A decaying memory's r falls with the distance (Gated DeltaNet: by ~1e4
over 256 tokens); a layer whose r *grows* with the distance has a backward dominated by the first tokens, which
gradient clipping then flattens: the obstacle found in Hope at T 256 (benchmarks/nested-learning.md, "Hope's
backward at initialisation"). `growth_per_token` is the slope of log r against the distance, fitted by least
squares over positions T/8 to 3T/4 (the first tokens are special to a short conv and a first mini-batch, the last
reach the output directly): negative for a memory that forgets, positive for one whose backward expands, e-fold
every 1 / |slope| tokens.

Writes the table, the JSON and the plot (log r against the distance, a line per layer) as `reach.*` in the
output directory; `docs/analysis/reach.md` is a run of it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch
from torch import nn

from regmem.lab.experiments.analyze import write_analysis
from regmem.lab.experiments.plots import pyplot, save_figure


@dataclass(frozen=True)
class ReachSettings:
    # each layer: (label, mixer name, its options)
    layers: tuple[tuple[str, str, dict], ...] = (("gated_deltanet", "gated_deltanet", {}), ("hope", "hope", {}))
    seq_len: int = 256
    d_model: int = 64
    n_heads: int = 4
    batch: int = 1
    seeds: tuple[int, ...] = (0, 1)
    distances: tuple[int, ...] = field(default=(1, 32, 128, 224, 255))  # distances the table shows (T - 1 - s)


def input_sensitivity(mixer: nn.Module, x: torch.Tensor) -> torch.Tensor:
    """r(s) = ||d ||y_{T-1}|| / d x_s|| for s = 0 .. T - 1, [T], mean over the batch; x: [B, T, d_model]. The mixer
    returns (y, state) with y [B, T, d_model], as every regmem mixer does."""
    if x.ndim != 3:
        raise ValueError(f"x must have shape [B, T, d_model], got {list(x.shape)}")
    x = x.detach().requires_grad_(True)
    y, _ = mixer(x)
    (grad,) = torch.autograd.grad(y[:, -1].norm(dim=-1).sum(), x)
    return grad.norm(dim=-1).mean(0)


def growth_per_token(r: torch.Tensor) -> float:
    """The least-squares slope of log r against the distance T - 1 - s over the middle of the context, positions
    T/8 <= s < 3T/4 (the first tokens are special to a short conv and a first mini-batch, the last reach the output
    directly); positive: r grows with the distance. NaN if r has a non-positive or non-finite entry there."""
    T = r.shape[0]
    start, stop = T // 8, T - T // 4
    window = r[start:stop].double()
    if window.numel() < 2 or not bool(torch.isfinite(window).all()) or not bool((window > 0).all()):
        return math.nan
    distance = (T - 1 - torch.arange(start, stop, dtype=torch.float64))
    d, lr = distance - distance.mean(), window.log() - window.log().mean()
    return float((d * lr).sum() / (d * d).sum())


def run(settings: ReachSettings) -> dict:
    from regmem.layers import build_mixer

    T = settings.seq_len
    out = {"settings": asdict(settings), "layers": {}}
    for label, name, options in settings.layers:
        curves = []
        for seed in settings.seeds:
            torch.manual_seed(seed)
            mixer = build_mixer(name, settings.d_model, settings.n_heads, **options)
            x = torch.randn(settings.batch, T, settings.d_model, generator=torch.Generator().manual_seed(seed))
            curves.append(input_sensitivity(mixer, x))
        r = torch.stack(curves).mean(0)
        out["layers"][label] = {"mixer": name, "options": options, "r": r.tolist(),
                                "growth_per_token": growth_per_token(r)}
    return out


def format_report(result: dict) -> str:
    s = result["settings"]
    T = s["seq_len"]
    distances = [d for d in s["distances"] if d < T]
    lines = [f"How far back each layer's gradient reaches at initialisation: r(s) = ||d ||y_T|| / d x_s|| at T {T}, "
             f"d_model {s['d_model']}, {s['n_heads']} heads, x ~ N(0, 1), mean over seeds "
             f"{', '.join(map(str, s['seeds']))} (regmem/lab/experiments/reach.py). Growth: the slope of log r "
             "against the distance (per token; > 0: the backward expands with the distance).", "",
             "| layer | " + " | ".join(f"distance {d}" for d in distances) + " | growth per token | e-fold every |",
             "|---|" + "---:|" * (len(distances) + 2)]
    for label, layer in result["layers"].items():
        r, g = layer["r"], layer["growth_per_token"]
        efold = "-" if not math.isfinite(g) or g == 0 else f"{1 / abs(g):.0f} tokens ({'grows' if g > 0 else 'falls'})"
        lines.append(f"| {label} | " + " | ".join(f"{r[T - 1 - d]:.2e}" for d in distances)
                     + f" | {g:+.4f} | {efold} |")
    return "\n".join(lines)


def plot(result: dict, path: Path) -> None:
    fig, ax = pyplot().subplots(figsize=(7, 4))
    T = result["settings"]["seq_len"]
    for label, layer in result["layers"].items():
        r = layer["r"]
        ax.plot([T - 1 - s for s in range(T)], r, label=label)
    ax.set_yscale("log")
    ax.set_xlabel("distance from the output token")
    ax.set_ylabel("||d ||y_T|| / d x_s||")
    ax.set_title("How far back the gradient reaches, at initialisation")
    ax.legend(fontsize=7)
    save_figure(fig, path)


def analyze_reach(out_dir, settings: ReachSettings, log=print) -> dict:
    result = run(settings)
    write_analysis(out_dir, "reach", result, format_report(result), plot, log=log)
    return result


def parse_layers(mixers: Sequence[str], variants: Sequence[str]) -> tuple[tuple[str, str, dict], ...]:
    """`--mixers` names and `--variant MIXER:OPT=VALUE[:OPT=VALUE...]` (each option read as its type,
    regmem/layers/options.py) as (label, mixer, options); ValueError naming the variant otherwise."""
    from regmem.layers.options import check_mixer_options

    layers = [(name, name, {}) for name in mixers]
    for text in variants:
        name, *assignments = text.split(":")
        raw = {}
        for item in assignments:
            key, sep, value = item.partition("=")
            if not sep or not key:
                raise ValueError(f"variant {text!r}: expected MIXER:OPTION=VALUE[:OPTION=VALUE...]")
            raw[key.replace("-", "_")] = value
        if not raw:
            raise ValueError(f"variant {text!r}: expected MIXER:OPTION=VALUE[:OPTION=VALUE...]")
        options = check_mixer_options(name, raw)
        label = name + " " + ", ".join(f"{k}={v}" for k, v in raw.items())
        layers.append((label, name, options))
    return tuple(layers)
