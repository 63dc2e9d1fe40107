"""Part (c) of `regmem repro nl-optimizers`: Nested Learning's optimisers on two small real tasks (Behrouz et al.,
*Nested Learning: The Illusion of Deep Learning Architectures*, arXiv:2512.24695, Sec. 7.2 and Sec. 9.7, Figs.
11-12, scaled down to a CPU).

* digits: an MLP 64 -> hidden -> hidden -> 10 on scikit-learn's handwritten digits (1,797 8x8 images shipped inside
  the scikit-learn wheel, no download), a fixed 80/20 split, cross-entropy; scored by test loss and accuracy.
* text: a regmem LM (softmax attention + SwiGLU, bytes) on the byte-level text task (CPython's documentation,
  `regmem.tasks.text`); scored by validation bits per byte.

Optimisers (`OPTIMIZERS`), every one over the whole model: "adamw"; "torch_muon" (`torch.optim.Muon`, bfloat16
Newton-Schulz) and "muon" (`regmem.optim.MuonMemory` with float32 Newton-Schulz, otherwise the same update) and "m3"
(`regmem.optim.M3`), each on the hidden 2-D weights with AdamW on the rest (`regmem.optim.param_groups`; the
digits MLP's first and last layers count as embedding and head), one lr for both halves (Muon's update is scaled to
AdamW's RMS, "match_rms_adamw"; M3 has no such scale); "sgd_momentum" (`torch.optim.SGD`, the baseline delta
momentum changes); "delta_momentum" (`regmem.optim.DeltaMomentum`, element-wise) and "dmgd"
(`regmem.optim.DeepMomentum`). Each optimiser gets the same steps and batches, a grid of learning rates (its
centre from `BASE_LRS` times `lr_multipliers`) and two seeds; its best lr is the lowest mean final validation loss.
"torch_muon" alone takes "muon"'s best lr (their updates differ only in the precision of Newton-Schulz, and torch's
bfloat16 one is 10-20x slower on a CPU); it is there for its curve beside "muon"'s and for Fig. 12's timing.
No weight decay and no schedule, so the comparison is of the optimisers alone.

Step time: the median wall time of `optimizer.step()` alone, in a timing pass after the runs (`time_steps`: one
process, one thread, every optimiser at its best lr taking turns on the same model and gradients), and of the whole
training step (forward, backward, step) in the seed-0 run at the best lr (runs go two at a time on two cores).
Fig. 12's claim is that M3 is slower than Muon per step; on CPUs without bfloat16 units torch's bfloat16
Newton-Schulz is itself slow, so "muon" (float32) is the like-for-like comparison.
"""

from __future__ import annotations

import copy
import math
import statistics
import time

import torch
import torch.nn.functional as F
from torch import nn

from regmem.experiments.protocol import worker_pool
from regmem.models import LM, LMConfig
from regmem.optim import M3, Combined, DeepMomentum, DeltaMomentum, MuonMemory, param_groups
from regmem.tasks.text import sample_windows, split_corpus

OPTIMIZERS = ("adamw", "torch_muon", "muon", "m3", "sgd_momentum", "delta_momentum", "dmgd")
TASKS = ("digits", "text")
# Grid centres, per task and optimiser (a probe over decades picked them; the grid is centre x lr_multipliers).
BASE_LRS = {
    "digits": {"adamw": 1e-2, "torch_muon": 1e-2, "muon": 1e-2, "m3": 3e-3, "sgd_momentum": 0.1,
               "delta_momentum": 0.3, "dmgd": 0.3},
    "text": {"adamw": 3e-3, "torch_muon": 3e-2, "muon": 3e-2, "m3": 1e-3, "sgd_momentum": 3e-2,
             "delta_momentum": 0.1, "dmgd": 0.1},
}
# Optimisers that run at another's best lr instead of a grid of their own: the same update, other precision.
FOLLOWS = {"torch_muon": "muon"}
WARMUP_STEPS = 5  # steps left out of the step-time medians (lazy state, allocator warm-up)
TIMING_ROUNDS, TIMING_STEPS = 4, 5  # the timing pass: rounds in which each optimiser takes this many steps
PAPER_CLAIM_REAL = ("Sec. 9.7, Figs. 11-12 (ViT on ImageNet-21K; 140M and 1.3B Transformer LMs): M3 reaches the "
                    "lowest train and test loss against AdamW and Muon, each tuned; M3 is slower per step than Muon "
                    "(its extra momenta), on par with AdaMuon. No numbers are given.")


def load_digits(split_seed: int = 0) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """scikit-learn's digits as (x_train [1438, 64] float32 in [0, 1], y_train [1438] int64, x_test [359, 64],
    y_test [359]): one random 80/20 split fixed by `split_seed`."""
    try:
        from sklearn.datasets import load_digits as sklearn_digits
    except ImportError as error:
        raise RuntimeError("the digits task needs scikit-learn (a regmem dependency): pip install scikit-learn") \
            from error
    data = sklearn_digits()
    x = torch.tensor(data.data, dtype=torch.float32) / 16.0  # pixel values 0..16
    y = torch.tensor(data.target, dtype=torch.long)
    order = torch.randperm(x.shape[0], generator=torch.Generator().manual_seed(split_seed))
    n_test = x.shape[0] // 5
    test, train = order[:n_test], order[n_test:]
    return x[train], y[train], x[test], y[test]


def digits_model(hidden: int) -> nn.Sequential:
    return nn.Sequential(nn.Linear(64, hidden), nn.ReLU(), nn.Linear(hidden, hidden), nn.ReLU(),
                         nn.Linear(hidden, 10))


def text_model(settings) -> LM:
    s = settings
    return LM(LMConfig(vocab_size=256, d_model=s.lm_d_model, n_layers=s.lm_layers, n_heads=s.lm_heads,
                       mixer="attn", ffn="swiglu"))


def build_optimizer(name: str, model: nn.Module, lr: float, *, m3_frequency: int,
                    exclude: tuple[str, ...] = ()) -> torch.optim.Optimizer:
    """The optimiser `name` (module docstring) over every parameter of `model`; `exclude` names parameters kept
    out of the Muon family's group (beside param_groups' embeddings, head, norms and biases)."""
    if name == "adamw":
        return torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.0)
    if name == "sgd_momentum":
        return torch.optim.SGD(model.parameters(), lr=lr, momentum=0.9)
    if name == "delta_momentum":
        return DeltaMomentum(model.parameters(), lr=lr, momentum=0.9, delta=0.5, form="elementwise")
    if name == "dmgd":
        return DeepMomentum(model.parameters(), lr=lr, momentum=0.9)
    hidden, rest = param_groups(model, muon_lr=lr, adamw_lr=lr, exclude=exclude)
    if name == "torch_muon":
        first = torch.optim.Muon(hidden["params"], lr=lr, weight_decay=0.0, adjust_lr_fn="match_rms_adamw")
    elif name == "muon":
        first = MuonMemory(hidden["params"], lr=lr, adjust_lr_fn="match_rms_adamw", ns_dtype=None)
    elif name == "m3":
        first = M3(hidden["params"], lr=lr, frequency=m3_frequency)
    else:
        raise ValueError(f"unknown optimiser {name!r}; known: {OPTIMIZERS}")
    return Combined([first, torch.optim.AdamW(rest["params"], lr=lr, weight_decay=0.0)])


def _train(model: nn.Module, optimizer, steps: int, batch, loss_of, evaluate, eval_every: int) -> dict:
    """The shared loop: `batch(step)` -> inputs, targets; `loss_of(model, inputs, targets)`; `evaluate(model)` ->
    {"loss", ...} every `eval_every` steps and at the end. Records the train loss, the evaluations and the times."""
    train_curve, eval_curve, step_ms, total_ms = [], [], [], []
    for step in range(steps):
        inputs, targets = batch(step)
        start = time.perf_counter()
        loss = loss_of(model, inputs, targets)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        before_step = time.perf_counter()
        optimizer.step()
        end = time.perf_counter()
        step_ms.append((end - before_step) * 1e3)
        total_ms.append((end - start) * 1e3)
        train_curve.append(float(loss.detach()))
        if (step + 1) % eval_every == 0 or step + 1 == steps:
            eval_curve.append({"step": step + 1, **evaluate(model)})
    final = eval_curve[-1]
    finite = math.isfinite(final["loss"])
    return {"train_curve": [_sig(v) for v in train_curve], "eval_curve": eval_curve,
            "final_loss": final["loss"] if finite else math.inf, "final": final,
            "step_ms": statistics.median(step_ms[WARMUP_STEPS:] or step_ms),
            "total_ms": statistics.median(total_ms[WARMUP_STEPS:] or total_ms)}


def _sig(v: float) -> float:
    return float(f"{v:.5g}") if math.isfinite(v) else math.inf


def train_digits(name: str, lr: float, seed: int, settings) -> dict:
    s = settings
    x_train, y_train, x_test, y_test = load_digits()
    torch.manual_seed(seed)
    model = digits_model(s.digits_hidden)
    optimizer = build_optimizer(name, model, lr, m3_frequency=s.m3_frequency, exclude=("0", "4"))
    g = torch.Generator().manual_seed(seed)
    order = [torch.randint(0, x_train.shape[0], (s.digits_batch_size,), generator=g) for _ in range(s.digits_steps)]

    def evaluate(m):
        with torch.no_grad():
            logits = m(x_test)
            return {"loss": float(F.cross_entropy(logits, y_test)),
                    "accuracy": float((logits.argmax(-1) == y_test).float().mean())}

    return _train(model, optimizer, s.digits_steps, lambda i: (x_train[order[i]], y_train[order[i]]),
                  lambda m, x, y: F.cross_entropy(m(x), y), evaluate, s.digits_eval_every)


def train_text(name: str, lr: float, seed: int, settings) -> dict:
    s = settings
    train_bytes, val_bytes = split_corpus()
    val_x, val_y = sample_windows(val_bytes, s.lm_eval_windows, s.lm_seq_len, seed=12345)
    torch.manual_seed(seed)
    model = text_model(s)
    optimizer = build_optimizer(name, model, lr, m3_frequency=s.m3_frequency)
    g = torch.Generator().manual_seed(seed)

    def loss_of(m, x, y):
        return F.cross_entropy(m(x).flatten(0, 1), y.flatten())

    def evaluate(m):
        with torch.no_grad():
            bits = float(loss_of(m, val_x, val_y)) / math.log(2.0)
        return {"loss": bits}  # bits per byte

    return _train(model, optimizer, s.lm_steps,
                  lambda i: sample_windows(train_bytes, s.lm_batch_size, s.lm_seq_len, generator=g),
                  loss_of, evaluate, s.lm_eval_every)


def _one_run(task: str, name: str, lr: float, seed: int, settings) -> dict:
    train = train_digits if task == "digits" else train_text
    return {"task": task, "optimizer": name, "lr": lr, "seed": seed, **train(name, lr, seed, settings)}


def run_real(settings, log=print) -> list[dict]:
    """Every (task, optimiser, lr, seed) of part (c); returns one row per (task, optimiser) at its best lr, with
    that lr's runs, the grid's mean final losses and the step times (seed-0 run). "torch_muon" takes no grid of its
    own: it is "muon"'s update with bfloat16 Newton-Schulz (`FOLLOWS`), so it runs at "muon"'s best lr, after it."""
    s = settings
    unknown = sorted(set(s.real_optimizers) - set(OPTIMIZERS)) + sorted(set(s.real_tasks) - set(TASKS))
    if unknown:
        raise ValueError(f"real_optimizers / real_tasks: unknown {unknown}; known: {OPTIMIZERS}, {TASKS}")
    follows = {f: leader for f, leader in FOLLOWS.items() if f in s.real_optimizers and leader in s.real_optimizers}
    runs = _map([(task, name, BASE_LRS[task][name] * m, seed) for task in s.real_tasks
                 for name in s.real_optimizers if name not in follows for m in s.lr_multipliers for seed in s.seeds],
                s, log)
    best = {(row["task"], row["optimizer"]): row["lr"] for row in summarize_real(runs, s, names=follows.values())}
    runs += _map([(task, name, best[task, leader], seed) for task in s.real_tasks
                  for name, leader in follows.items() for seed in s.seeds], s, log)
    rows = summarize_real(runs, s)
    for task in s.real_tasks:
        mine = [r for r in rows if r["task"] == task]
        times = time_steps(task, {r["optimizer"]: r["lr"] for r in mine}, s)
        for r in mine:
            r["step_ms"] = times[r["optimizer"]]
        log(f"(c) {task} optimizer.step() ms: " + ", ".join(f"{n} {t:.2f}" for n, t in times.items()))
    return rows


def time_steps(task: str, lrs: dict[str, float], settings) -> dict[str, float]:
    """Median ms of `optimizer.step()` alone per optimiser (at its lr), on one model and one batch's gradients, in
    this process with one torch thread; the optimisers take turns (TIMING_ROUNDS rounds of TIMING_STEPS steps after
    WARMUP_STEPS), so a slow spell of the machine hits them alike. The runs' own times are two processes at once."""
    torch.manual_seed(0)
    if task == "digits":
        model, exclude = digits_model(settings.digits_hidden), ("0", "4")
        x, y, _, _ = load_digits()
        loss = F.cross_entropy(model(x[:settings.digits_batch_size]), y[:settings.digits_batch_size])
    else:
        model, exclude = text_model(settings), ()
        x, y = sample_windows(split_corpus()[0], settings.lm_batch_size, settings.lm_seq_len, seed=0)
        loss = F.cross_entropy(model(x).flatten(0, 1), y.flatten())
    loss.backward()
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        optimizers = {}
        for name, lr in lrs.items():
            twin = copy.deepcopy(model)  # its own weights to step
            for mine, theirs in zip(twin.parameters(), model.parameters(), strict=True):
                mine.grad = theirs.grad.clone()
            optimizers[name] = build_optimizer(name, twin, lr, m3_frequency=settings.m3_frequency, exclude=exclude)
            for _ in range(WARMUP_STEPS):
                optimizers[name].step()
        samples = {name: [] for name in lrs}
        for _ in range(TIMING_ROUNDS):
            for name, optimizer in optimizers.items():
                for _ in range(TIMING_STEPS):
                    start = time.perf_counter()
                    optimizer.step()
                    samples[name].append((time.perf_counter() - start) * 1e3)
    finally:
        torch.set_num_threads(threads)
    return {name: statistics.median(v) for name, v in samples.items()}


def _map(jobs: list[tuple], settings, log) -> list[dict]:
    """`_one_run` over the jobs, `settings.workers` at a time (spawned processes, one torch thread each)."""
    def done(job, run):
        log(f"(c) {job[0]} {job[1]} lr={job[2]:g} seed={job[3]}: final loss {run['final_loss']:.4f}")
        return run

    if settings.workers <= 1 or len(jobs) <= 1:
        return [done(job, _one_run(*job, settings)) for job in jobs]
    with worker_pool(settings.workers) as pool:
        futures = [pool.submit(_one_run, *job, settings) for job in jobs]
        return [done(job, future.result()) for job, future in zip(jobs, futures, strict=True)]


def summarize_real(runs: list[dict], settings, names=None) -> list[dict]:
    """One row per (task, optimiser in `names`, default all): the best lr by mean final loss over seeds."""
    rows = []
    names = settings.real_optimizers if names is None else tuple(names)
    for task in settings.real_tasks:
        for name in names:
            mine = [r for r in runs if r["task"] == task and r["optimizer"] == name]
            lrs = sorted({r["lr"] for r in mine})
            grid = {lr: statistics.fmean(r["final_loss"] for r in mine if r["lr"] == lr) for lr in lrs}
            best = min(lrs, key=lambda lr: grid[lr])
            at_best = [r for r in mine if r["lr"] == best]
            finals = [r["final_loss"] for r in at_best]
            timed = min(at_best, key=lambda r: r["seed"])
            row = {"task": task, "optimizer": name, "lr": best, "grid": {f"{lr:g}": grid[lr] for lr in lrs},
                   "edge": len(lrs) > 1 and best in (lrs[0], lrs[-1]), "final_loss": statistics.fmean(finals),
                   "final_min": min(finals), "final_max": max(finals), "run_step_ms": timed["step_ms"],
                   "total_ms": timed["total_ms"], "runs": at_best}
            if task == "digits":
                row["accuracy"] = statistics.fmean(r["final"]["accuracy"] for r in at_best)
            rows.append(row)
    return rows


def real_claims(rows: list[dict]) -> list[dict]:
    """Fig. 11 (M3 lowest loss, per task) and Fig. 12 (M3 slower per step than Muon, per task)."""
    out = []
    for task in dict.fromkeys(r["task"] for r in rows):
        by = {r["optimizer"]: r for r in rows if r["task"] == task}
        if "m3" not in by:
            continue
        best = min(by.values(), key=lambda r: r["final_loss"])
        out.append({"claim": f"(c) {task}: M3 reaches the lowest validation loss (Fig. 11), each optimiser at its "
                             "best lr",
                    "measured": f"lowest: {best['optimizer']} {best['final_loss']:.4f}; M3 "
                                f"{by['m3']['final_loss']:.4f}",
                    "holds": best["optimizer"] == "m3"})
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
    lines = [
        f"Paper (c): {PAPER_CLAIM_REAL}",
        f"Ours (c): digits MLP 64-{s['digits_hidden']}-{s['digits_hidden']}-10, {s['digits_steps']} steps x "
        f"{s['digits_batch_size']}; byte LM (attn + SwiGLU, d_model {s['lm_d_model']}, {s['lm_layers']} layers, "
        f"{s['lm_heads']} heads), {s['lm_steps']} steps x {s['lm_batch_size']} windows of {s['lm_seq_len']} bytes; "
        f"no weight decay, constant lr; each optimiser's grid is its centre x "
        f"[{', '.join(f'{m:.3g}' for m in s['lr_multipliers'])}], seeds "
        f"{list(s['seeds'])}; M3 f = {s['m3_frequency']}, accumulate='sum' (Algorithm 1 as printed). Loss: test "
        "cross-entropy (digits, nats) or validation bits per byte (text), mean [min, max] over seeds. \"opt step "
        "ms\": median of optimizer.step() alone in a timing pass (one process, one thread, the optimisers taking "
        "turns on the same model and gradients); \"train step ms\": median forward + backward + step in the "
        "seed-0 run (two runs at a time on two cores, so noisier).",
        "",
        "| task | optimiser | best lr | final val loss | spread | test acc | opt step ms | train step ms |",
        "|---|---|---:|---:|---|---:|---:|---:|",
    ]
    for r in rows:
        acc = f"{r['accuracy']:.3f}" if "accuracy" in r else "-"
        edge = " (edge)" if r["edge"] else ""
        lines.append(f"| {r['task']} | {r['optimizer']} | {r['lr']:g}{edge} | {r['final_loss']:.4f} | "
                     f"[{r['final_min']:.4f}, {r['final_max']:.4f}] | {acc} | {r['step_ms']:.2f} | "
                     f"{r['total_ms']:.2f} |")
    lines += ["", "\"(edge)\": the best lr is at the end of its grid, so a wider grid might do better. torch_muon runs "
              "at muon's best lr (the same update, Newton-Schulz in bfloat16 instead of float32), no grid.",
              "",
              "M3 as Algorithm 1 prints it divides the orthogonalised momentum element-wise by the square root of the "
              "raw gradients' accumulated second moment. Newton-Schulz gives every direction about the same size, "
              "so coordinates whose gradients are small get the largest steps, and the summed second moment "
              "shrinks every step like AdaGrad's. In the default runs that made M3 the worst optimiser at "
              "every lr of its grid (a decade probe found no better lr): the test cross-entropy is high because "
              "the wrong predictions are overconfident. Its step costs about one Muon step: the fast memory's "
              "Newton-Schulz dominates, and the slow one runs every f steps.",
              "torch_muon's step is slow only on this CPU, which has no fast bfloat16 units; compare M3 with muon "
              "for Fig. 12."]
    return lines


def plot_real(axes, rows: list[dict]) -> None:
    """One panel per task (the first len(tasks) axes): the validation loss along training for each optimiser at its
    best lr (mean over seeds); the next axis: each optimiser's step time per task (log scale)."""
    tasks = list(dict.fromkeys(r["task"] for r in rows))
    for ax, task in zip(axes, tasks, strict=False):
        for r in (r for r in rows if r["task"] == task):
            steps = [e["step"] for e in r["runs"][0]["eval_curve"]]
            mean = [statistics.fmean(run["eval_curve"][i]["loss"] for run in r["runs"]) for i in range(len(steps))]
            ax.plot(steps, [v if math.isfinite(v) else float("nan") for v in mean], lw=1,
                    label=f"{r['optimizer']} (lr {r['lr']:g})")
        ax.set_xlabel("step")
        ax.set_ylabel("test cross-entropy (log scale)" if task == "digits" else "validation bits per byte")
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
