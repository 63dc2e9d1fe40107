"""The report of part (c) of `regmem repro nl-optimizers` (*Nested Learning*, arXiv:2512.24695, Sec. 9.7, Figs.
11-12): the claims read from the rows of `nl_optimizers_real.run_real`, the report's table and text, and the plot's
panels."""

from __future__ import annotations

import math
import statistics

from regmem.lab.experiments.repro.nl_optimizers_real import PAPER_CLAIM_REAL, pair_text

M3_READINGS = {"m3": "M3 as printed (accumulate='sum')", "m3_ema": "M3 with EMA momenta (accumulate='ema')"}


def real_claims(rows: list[dict]) -> list[dict]:
    """Fig. 11 (M3 reaches the lowest test and the lowest training loss, per task and reading of Algorithm 1; each
    optimiser at its lr chosen on validation) and Fig. 12 (M3 slower per step than Muon, per task; the printed M3,
    whose step costs what the EMA reading's does)."""
    out = []
    for task in dict.fromkeys(r["task"] for r in rows):
        by = {r["optimizer"]: r for r in rows if r["task"] == task}
        for name, reading in M3_READINGS.items():
            if name not in by:
                continue
            mine = by[name]
            for kind, key in (("test", "test_loss"), ("training", "train_loss")):
                best = min(by.values(), key=lambda r, key=key: r[key])
                spread = (lambda r: f" [{r['test_min']:.4f}, {r['test_max']:.4f}]") if key == "test_loss" else (
                    lambda r: "")
                out.append({"claim": f"(c) {task}: {reading} reaches the lowest {kind} loss (Fig. 11), each "
                                     "optimiser at its lr chosen on validation",
                            "measured": f"lowest: {best['optimizer']} {best[key]:.4f}{spread(best)}; {name} "
                                        f"{mine[key]:.4f}{spread(mine)}",
                            "holds": best["optimizer"] == name})
        if "m3" not in by:
            continue
        for muon in ("muon", "torch_muon"):
            if muon in by:
                ratio = by["m3"]["step_ms"] / by[muon]["step_ms"]
                out.append({"claim": f"(c) {task}: an M3 step is slower than a {muon} step (Fig. 12)",
                            "measured": f"M3 {by['m3']['step_ms']:.2f} ms vs {muon} {by[muon]['step_ms']:.2f} ms "
                                        f"({ratio:.2f}x)",
                            "holds": ratio > 1.0})
    return out


def real_report_lines(rows: list[dict], settings: dict) -> list[str]:
    s = settings
    multipliers = ", ".join(f"{m:.3g}" for m in s["lr_multipliers"])
    halves = ", ".join(f"{m:.3g}" for m in s["adamw_half_multipliers"])
    search = ("the Muon half's grid with the AdamW half at its grid's middle, then the AdamW half's grid at the best "
              "Muon-half lr" if s["pair_search"] == "coordinate" else "every pair of the two grids")
    lines = [
        f"Paper (c): {PAPER_CLAIM_REAL}",
        f"Ours (c): digits MLP 64-{s['digits_hidden']}-{s['digits_hidden']}-10, {s['digits_steps']} steps x "
        f"{s['digits_batch_size']}; byte LM (attn + SwiGLU, d_model {s['lm_d_model']}, {s['lm_layers']} layers, "
        f"{s['lm_heads']} heads), {s['lm_steps']} steps x {s['lm_batch_size']} windows of {s['lm_seq_len']} bytes; "
        f"no weight decay, constant lr; each optimiser's lr grid is its centre x [{multipliers}]; the Muon family "
        f"(torch_muon, muon, m3, m3_ema) steps the hidden matrices at that lr and the rest (embeddings, head, "
        f"biases) with AdamW at its own lr, from AdamW's centre x [{halves}] ({search}); seeds {list(s['seeds'])}; "
        f"M3 f = {s['m3_frequency']}, m3 accumulate='sum' (Algorithm 1 as printed), m3_ema accumulate='ema'; "
        "delta_momentum: element-wise, key g / max|g|, delta 0.5; delta_momentum_eq49: eq. 49 as printed (matrix "
        "form, raw gradient as key, delta 1). Loss: cross-entropy (digits, nats) or bits per byte (text); the lr is "
        "chosen by the final validation loss, and the test loss (mean [min, max] over seeds) and the training loss "
        "(mean over the last tenth of the steps' batches) are reported at it; a grid whose best is at an edge grows "
        f"past it by up to {s.get('extend_grid', 0)} points. AdaMuon, Fig. 12's other peer (`regmem.optim."
        "AdaMuon`), is timed by `regmem bench optim`, not trained here. \"opt step ms\": median of "
        "optimizer.step() alone in a timing pass "
        "(one process, one thread, the optimisers taking turns on the same model and gradients); \"train step "
        "ms\": median forward + backward + step in the seed-0 run (two runs at a time on two cores, so noisier).",
        "",
        "| task | optimiser | best lr | AdamW-half lr | val loss | test loss | test spread | train loss | test acc | "
        "opt step ms | train step ms |",
        "|---|---|---:|---:|---:|---:|---|---:|---:|---:|---:|",
    ]
    for r in rows:
        acc = f"{r['accuracy']:.3f}" if "accuracy" in r else "-"
        edge = " (edge)" if r["edge"] else ""
        half = "-" if r["adamw_lr"] is None else f"{r['adamw_lr']:g}"
        lines.append(f"| {r['task']} | {r['optimizer']} | {r['lr']:g}{edge} | {half} | {r['final_loss']:.4f} | "
                     f"{r['test_loss']:.4f} | [{r['test_min']:.4f}, {r['test_max']:.4f}] | {r['train_loss']:.4f} | "
                     f"{acc} | {r['step_ms']:.2f} | {r['total_ms']:.2f} |")
    lines += ["", "\"(edge)\": the best lr (or AdamW-half lr) is still at an end of its grid after the extension, "
              "so a wider grid might do better. torch_muon runs at muon's best pair (the same update, Newton-Schulz "
              "in bfloat16 instead of float32), no grid.", "", *M3_DISCUSSION]
    return lines


M3_DISCUSSION = [
    "M3 divides the orthogonalised momentum element-wise by the square root of the gradients' second moment. "
    "Newton-Schulz gives every direction about the same size, so the step is about lr / |g| per coordinate: M3 "
    "wants an lr one to two decades below AdamW's, which is why its halves need their own lrs (with one shared lr "
    "M3 was the worst optimiser on both tasks). As printed (accumulate='sum') beta1 and beta3 only rescale the two "
    "momenta, which Newton-Schulz ignores, and the summed second moment shrinks every step like AdaGrad's; "
    "accumulate='ema' reads the betas as decays. Its step costs about one Muon step: the fast memory's "
    "Newton-Schulz dominates, and the slow one runs every f steps.",
    "torch_muon runs Newton-Schulz in bfloat16, which is slow on a CPU without bfloat16 units (the machine of the "
    "committed run has none; benchmarks/optimizers.md times one that has); compare M3 with muon, the same update "
    "in float32, for Fig. 12.",
]


def plot_real(axes, rows: list[dict]) -> None:
    """One panel per task (the first len(tasks) axes): the validation loss along training for each optimiser at its
    best lr (mean over seeds); the next axis: each optimiser's step time per task (log scale)."""
    tasks = list(dict.fromkeys(r["task"] for r in rows))
    for ax, task in zip(axes, tasks, strict=False):
        for r in (r for r in rows if r["task"] == task):
            steps = [e["step"] for e in r["runs"][0]["eval_curve"]]
            mean = [statistics.fmean(run["eval_curve"][i]["loss"] for run in r["runs"]) for i in range(len(steps))]
            ax.plot(steps, [v if math.isfinite(v) else float("nan") for v in mean], lw=1,
                    label=f"{r['optimizer']} (lr {pair_text(r['lr'], r['adamw_lr'])})")
        ax.set_xlabel("step")
        ax.set_ylabel("validation cross-entropy (log scale)" if task == "digits" else "validation bits per byte")
        if task == "digits":
            ax.set_yscale("log")  # M3's early losses are 100x the others'; a linear axis would hide the rest
        ax.set_title(f"(c) {task}: each optimiser at its best lr")
        ax.legend(fontsize=7)
    if len(axes) <= len(tasks):
        return
    ax = axes[len(tasks)]
    names = list(dict.fromkeys(r["optimizer"] for r in rows))
    width = 0.8 / len(tasks)
    for i, task in enumerate(tasks):
        by = {r["optimizer"]: r["step_ms"] for r in rows if r["task"] == task}
        ax.bar([j + i * width for j in range(len(names))], [by.get(n, float("nan")) for n in names], width,
               label=task)
    ax.set_xticks([j + width * (len(tasks) - 1) / 2 for j in range(len(names))], names, rotation=30, fontsize=7)
    ax.set_yscale("log")
    ax.set_ylabel("optimizer.step() ms (median)")
    ax.set_title("(c) step time per optimiser (Fig. 12's comparison)")
    ax.legend(fontsize=7)
