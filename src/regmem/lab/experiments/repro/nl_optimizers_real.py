"""Part (c) of `regmem repro nl-optimizers`: Nested Learning's optimisers on two small real tasks (Behrouz et al.,
*Nested Learning: The Illusion of Deep Learning Architectures*, arXiv:2512.24695, Sec. 7.2 and Sec. 9.7, Figs.
11-12, scaled down to a CPU).

* digits: an MLP 64 -> hidden -> hidden -> 10 on scikit-learn's handwritten digits (1,797 8x8 images shipped inside
  the scikit-learn wheel, no download), a fixed 60/20/20 split into training, validation and test, cross-entropy.
* text: a regmem LM (softmax attention + SwiGLU, bytes) on the byte-level text task (CPython's documentation,
  `regmem.tasks.text`, its training, validation and test byte ranges), in bits per byte.
Each run is evaluated on validation along training and, once trained, on test; its training loss is the mean of
the last tenth of its batch losses. The learning rate is chosen on validation; the report gives test and training
loss (Fig. 11's claim is about both).

Optimisers (`OPTIMIZERS`), every one over the whole model:
* "adamw"; "sgd_momentum" (`torch.optim.SGD`, the baseline delta momentum changes); "dmgd"
  (`regmem.optim.DeepMomentum`);
* delta momentum (eqs. 48-49) in two forms: "delta_momentum" (`DeltaMomentum(form="elementwise")`, key g / max|g|,
  delta 0.5) and "delta_momentum_eq49" (eq. 49 as printed: the matrix form, raw gradient as key, delta 1);
* the Muon family (`MUON_FAMILY`): "torch_muon" (`torch.optim.Muon`, bfloat16 Newton-Schulz), "muon"
  (`regmem.optim.MuonMemory` with float32 Newton-Schulz, otherwise the same update; its update scaled to AdamW's
  RMS, "match_rms_adamw"), "m3" (`regmem.optim.M3`, accumulate="sum", Algorithm 1 as printed) and "m3_ema"
  (accumulate="ema", the betas as decays). Each steps the hidden 2-D weights; AdamW steps the rest
  (`regmem.optim.param_groups`: embeddings, head, norms, biases; the digits MLP's first and last layers count as
  embedding and head). The two halves take their own learning rates, as in Muon practice: a pair (lr, adamw_lr).

Learning rates. Each optimiser gets the same steps and batches and two seeds. A single-lr optimiser takes a grid
`BASE_LRS[task][name]` x `lr_multipliers`. The Muon family takes the Muon half's grid the same way and the AdamW
half's grid `BASE_LRS[task]["adamw"]` x `adamw_half_multipliers`; with pair_search="coordinate" (default) the Muon
half's grid runs with the AdamW half at its grid's middle, then the AdamW half's grid at the best Muon-half lr;
"product" runs every pair. The best lr (pair) has the lowest mean final validation loss over seeds. Where it lies at
an edge of either half's grid, the grid grows past that edge by its own spacing (`protocol.next_lr`, the other half
at its best), up to `extend_grid` points, so that every reported choice is bracketed. "torch_muon"
alone takes "muon"'s best pair (their updates differ only in the precision of Newton-Schulz, and torch's bfloat16
one is 10-20x slower on a CPU); it is there for its curve beside "muon"'s and for Fig. 12's timing. No weight decay
and no schedule, so the comparison is of the optimisers alone.

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

from regmem.lab.experiments.protocol import bracket, next_lr, worker_pool
from regmem.models import LM, LMConfig
from regmem.optim import M3, Combined, DeepMomentum, DeltaMomentum, MuonMemory, param_groups
from regmem.tasks.text import sample_windows, split_corpus

OPTIMIZERS = ("adamw", "torch_muon", "muon", "m3", "m3_ema", "sgd_momentum", "delta_momentum",
              "delta_momentum_eq49", "dmgd")
MUON_FAMILY = ("torch_muon", "muon", "m3", "m3_ema")  # hidden matrices at lr, the rest under AdamW at adamw_lr
TASKS = ("digits", "text")
# Grid centres, per task and optimiser (a probe over decades picked them, one seed, the Muon family's AdamW half at
# AdamW's centre; the grid is centre x lr_multipliers). For the Muon family the centre is its Muon half's; the
# AdamW half's centre is "adamw"'s. delta_momentum_eq49 diverged on text at every lr from 1e-3 to 0.3.
BASE_LRS = {
    "digits": {"adamw": 1e-2, "torch_muon": 1e-2, "muon": 1e-2, "m3": 1e-5, "m3_ema": 1e-5, "sgd_momentum": 0.1,
               "delta_momentum": 0.3, "delta_momentum_eq49": 0.1, "dmgd": 0.3},
    "text": {"adamw": 3e-3, "torch_muon": 3e-2, "muon": 3e-2, "m3": 1e-5, "m3_ema": 3e-6, "sgd_momentum": 3e-2,
             "delta_momentum": 0.1, "delta_momentum_eq49": 1e-2, "dmgd": 0.1},
}
# Optimisers that run at another's best lr instead of a grid of their own: the same update, other precision.
FOLLOWS = {"torch_muon": "muon"}
DIGITS_EXCLUDE = ("0", "4")  # the digits MLP's first and last layers: its "embedding" and "head", under AdamW
WARMUP_STEPS = 5  # steps left out of the step-time medians (lazy state, allocator warm-up)
TIMING_ROUNDS, TIMING_STEPS = 4, 5  # the timing pass: rounds in which each optimiser takes this many steps
PAPER_CLAIM_REAL = ("Sec. 9.7, Figs. 11-12 (ViT on ImageNet-21K; 140M and 1.3B Transformer LMs): M3 reaches the "
                    "lowest train and test loss against AdamW and Muon, each tuned; M3 is slower per step than Muon "
                    "(its extra momenta), on par with AdaMuon. No numbers are given.")


def load_digits(split_seed: int = 0) -> tuple[torch.Tensor, ...]:
    """scikit-learn's digits as (x_train [1079, 64] float32 in [0, 1], y_train [1079] int64, x_valid [359, 64],
    y_valid, x_test [359, 64], y_test): one random 60/20/20 split fixed by `split_seed`."""
    try:
        from sklearn.datasets import load_digits as sklearn_digits
    except ImportError as error:
        raise RuntimeError("the digits task needs scikit-learn (a regmem dependency): pip install scikit-learn") \
            from error
    data = sklearn_digits()
    x = torch.tensor(data.data, dtype=torch.float32) / 16.0  # pixel values 0..16
    y = torch.tensor(data.target, dtype=torch.long)
    order = torch.randperm(x.shape[0], generator=torch.Generator().manual_seed(split_seed))
    n_held = x.shape[0] // 5
    test, valid, train = order[:n_held], order[n_held:2 * n_held], order[2 * n_held:]
    return x[train], y[train], x[valid], y[valid], x[test], y[test]


def digits_model(hidden: int) -> nn.Sequential:
    return nn.Sequential(nn.Linear(64, hidden), nn.ReLU(), nn.Linear(hidden, hidden), nn.ReLU(),
                         nn.Linear(hidden, 10))


def text_model(settings) -> LM:
    s = settings
    return LM(LMConfig(vocab_size=256, d_model=s.lm_d_model, n_layers=s.lm_layers, n_heads=s.lm_heads,
                       mixer="attn", ffn="swiglu"))


def build_optimizer(name: str, model: nn.Module, lr: float, *, adamw_lr: float | None = None, m3_frequency: int,
                    exclude: tuple[str, ...] = ()) -> torch.optim.Optimizer:
    """The optimiser `name` (module docstring) over every parameter of `model`. The Muon family (`MUON_FAMILY`)
    steps the hidden matrices at `lr` and the rest with AdamW at `adamw_lr` (required for it, refused for the
    others); `exclude` names parameters kept out of its Muon group (beside param_groups' embeddings, head, norms and
    biases)."""
    if name not in OPTIMIZERS:
        raise ValueError(f"unknown optimiser {name!r}; known: {OPTIMIZERS}")
    if (adamw_lr is None) == (name in MUON_FAMILY):
        raise ValueError(f"adamw_lr: the AdamW half's lr is {'needed' if adamw_lr is None else 'not taken'} by "
                         f"{name!r} (only the Muon family {MUON_FAMILY} has two halves)")
    if name == "adamw":
        return torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.0)
    if name == "sgd_momentum":
        return torch.optim.SGD(model.parameters(), lr=lr, momentum=0.9)
    if name == "delta_momentum":
        return DeltaMomentum(model.parameters(), lr=lr, momentum=0.9, delta=0.5, form="elementwise")
    if name == "delta_momentum_eq49":  # m <- m (alpha I - g^T g) - eta g: the printed eq. 49, P = I
        return DeltaMomentum(model.parameters(), lr=lr, momentum=0.9, delta=1.0, form="matrix", normalize=False)
    if name == "dmgd":
        return DeepMomentum(model.parameters(), lr=lr, momentum=0.9)
    hidden, rest = param_groups(model, muon_lr=lr, adamw_lr=adamw_lr, exclude=exclude)
    if name == "torch_muon":
        first = torch.optim.Muon(hidden["params"], lr=lr, weight_decay=0.0, adjust_lr_fn="match_rms_adamw")
    elif name == "muon":
        first = MuonMemory(hidden["params"], lr=lr, adjust_lr_fn="match_rms_adamw", ns_dtype=None)
    else:
        first = M3(hidden["params"], lr=lr, frequency=m3_frequency, accumulate="ema" if name == "m3_ema" else "sum",
                   ns_dtype=None)  # float32 Newton-Schulz, as "muon" here: the like-for-like pair of Fig. 12
    return Combined([first, torch.optim.AdamW(rest["params"], lr=adamw_lr, weight_decay=0.0)])


def _train(model: nn.Module, optimizer, steps: int, batch, loss_of, evaluate, eval_every: int, test) -> dict:
    """The shared loop: `batch(step)` -> inputs, targets; `loss_of(model, inputs, targets)`; `evaluate(model)` ->
    {"loss", ...} on validation every `eval_every` steps and at the end; `test(model)` -> {"loss", ...} on test
    once, at the end. Records the train loss, the evaluations and the times."""
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
    final, tested = eval_curve[-1], test(model)
    tail = train_curve[-max(steps // 10, 1):]
    return {"train_curve": [_sig(v) for v in train_curve], "eval_curve": eval_curve,
            "final_loss": _finite(final["loss"]), "final": final, "test_loss": _finite(tested["loss"]), "test": tested,
            "train_loss": _finite(statistics.fmean(tail)),
            "step_ms": statistics.median(step_ms[WARMUP_STEPS:] or step_ms),
            "total_ms": statistics.median(total_ms[WARMUP_STEPS:] or total_ms)}


def _finite(v: float) -> float:
    return v if math.isfinite(v) else math.inf


def _sig(v: float) -> float:
    return float(f"{v:.5g}") if math.isfinite(v) else math.inf


def train_digits(name: str, lr: float, adamw_lr: float | None, seed: int, settings) -> dict:
    s = settings
    x_train, y_train, x_valid, y_valid, x_test, y_test = load_digits()
    torch.manual_seed(seed)
    model = digits_model(s.digits_hidden)
    optimizer = build_optimizer(name, model, lr, adamw_lr=adamw_lr, m3_frequency=s.m3_frequency,
                                exclude=DIGITS_EXCLUDE)
    g = torch.Generator().manual_seed(seed)
    order = [torch.randint(0, x_train.shape[0], (s.digits_batch_size,), generator=g) for _ in range(s.digits_steps)]

    def scored(x, y):
        def evaluate(m):
            with torch.no_grad():
                logits = m(x)
                return {"loss": float(F.cross_entropy(logits, y)),
                        "accuracy": float((logits.argmax(-1) == y).float().mean())}
        return evaluate

    return _train(model, optimizer, s.digits_steps, lambda i: (x_train[order[i]], y_train[order[i]]),
                  lambda m, x, y: F.cross_entropy(m(x), y), scored(x_valid, y_valid), s.digits_eval_every,
                  scored(x_test, y_test))


def train_text(name: str, lr: float, adamw_lr: float | None, seed: int, settings) -> dict:
    s = settings
    train_bytes, val_bytes, test_bytes = split_corpus()
    held_out = {name: sample_windows(data, s.lm_eval_windows, s.lm_seq_len, seed=12345)
                for name, data in (("valid", val_bytes), ("test", test_bytes))}
    torch.manual_seed(seed)
    model = text_model(s)
    optimizer = build_optimizer(name, model, lr, adamw_lr=adamw_lr, m3_frequency=s.m3_frequency)
    g = torch.Generator().manual_seed(seed)

    def loss_of(m, x, y):
        return F.cross_entropy(m(x).flatten(0, 1), y.flatten())

    def scored(split):
        def evaluate(m):
            with torch.no_grad():
                return {"loss": float(loss_of(m, *held_out[split])) / math.log(2.0)}  # bits per byte
        return evaluate

    return _train(model, optimizer, s.lm_steps,
                  lambda i: sample_windows(train_bytes, s.lm_batch_size, s.lm_seq_len, generator=g),
                  loss_of, scored("valid"), s.lm_eval_every, scored("test"))


def _one_run(task: str, name: str, lr: float, adamw_lr: float | None, seed: int, settings) -> dict:
    train = train_digits if task == "digits" else train_text
    return {"task": task, "optimizer": name, "lr": lr, "adamw_lr": adamw_lr, "seed": seed,
            **train(name, lr, adamw_lr, seed, settings)}


def lr_grid(task: str, name: str, settings) -> list[float]:
    """The grid of `name`'s lr (the Muon half's for the Muon family): its centre x lr_multipliers."""
    return [BASE_LRS[task][name] * m for m in settings.lr_multipliers]


def adamw_half_grid(task: str, settings) -> list[float]:
    """The grid of the Muon family's AdamW-half lr: AdamW's centre x adamw_half_multipliers."""
    return [BASE_LRS[task]["adamw"] * m for m in settings.adamw_half_multipliers]


def check_real_settings(settings) -> None:
    """ValueError naming the setting: unknown optimisers or tasks, non-positive lr multipliers, an unknown search."""
    s = settings
    unknown = sorted(set(s.real_optimizers) - set(OPTIMIZERS)) + sorted(set(s.real_tasks) - set(TASKS))
    if unknown:
        raise ValueError(f"real_optimizers / real_tasks: unknown {unknown}; known: {OPTIMIZERS}, {TASKS}")
    for key in ("lr_multipliers", "adamw_half_multipliers"):
        values = getattr(s, key)
        if not values or not all(math.isfinite(m) and m > 0 for m in values):
            raise ValueError(f"{key}: every multiplier must be finite and > 0, got {list(values)}")
    if s.pair_search not in ("coordinate", "product"):
        raise ValueError(f"pair_search must be 'coordinate' or 'product', got {s.pair_search!r}")


def _first_jobs(task: str, name: str, settings) -> list[tuple]:
    """A single-lr optimiser's grid; the Muon family's Muon-half grid with the AdamW half at its grid's middle
    ("coordinate") or at every point of its grid ("product")."""
    if name not in MUON_FAMILY:
        return [(task, name, lr, None, seed) for lr in lr_grid(task, name, settings) for seed in settings.seeds]
    halves = adamw_half_grid(task, settings)
    halves = halves if settings.pair_search == "product" else [halves[len(halves) // 2]]
    return [(task, name, lr, a, seed) for lr in lr_grid(task, name, settings) for a in halves
            for seed in settings.seeds]


def run_real(settings, log=print) -> list[dict]:
    """Every (task, optimiser, lr pair, seed) of part (c) (module docstring); returns one row per (task, optimiser)
    at its best lr (pair), with that pair's runs, the grid's mean final losses and the step times. "torch_muon"
    takes no grid of its own: it runs at "muon"'s best pair (`FOLLOWS`), after it."""
    s = settings
    check_real_settings(s)
    follows = {f: leader for f, leader in FOLLOWS.items() if f in s.real_optimizers and leader in s.real_optimizers}
    leaders = [name for name in s.real_optimizers if name not in follows]
    runs = _map([job for task in s.real_tasks for name in leaders for job in _first_jobs(task, name, s)], s, log)
    if s.pair_search == "coordinate":  # the AdamW half's grid at the best Muon-half lr
        family = [name for name in leaders if name in MUON_FAMILY]
        best = _best_pairs(runs, s, family)
        runs += _map([(task, name, lr, a, seed) for (task, name), (lr, first) in best.items()
                      for a in adamw_half_grid(task, s) if a != first for seed in s.seeds], s, log)
    for _ in range(s.extend_grid):  # grow each half's grid past an edge its best lies at
        jobs = _extension_jobs(runs, s, leaders)
        if not jobs:
            break
        runs += _map(jobs, s, log)
    best = _best_pairs(runs, s, follows.values())
    runs += _map([(task, name, *best[task, leader], seed) for task in s.real_tasks
                  for name, leader in follows.items() for seed in s.seeds], s, log)
    rows = summarize_real(runs, s)
    for row in rows:  # a follower trains at its leader's best pair: the leader's grid brackets the choice
        if row["optimizer"] in follows:
            row["brackets"] = dict.fromkeys(row["brackets"], f"follows {follows[row['optimizer']]}")
    for task in s.real_tasks:
        mine = [r for r in rows if r["task"] == task]
        times = time_steps(task, {r["optimizer"]: (r["lr"], r["adamw_lr"]) for r in mine}, s)
        for r in mine:
            r["step_ms"] = times[r["optimizer"]]
        log(f"(c) {task} optimizer.step() ms: " + ", ".join(f"{n} {t:.2f}" for n, t in times.items()))
    return rows


def _extension_jobs(runs: list[dict], settings, names) -> list[tuple]:
    """For each (task, optimiser in `names`) whose best pair is at an edge of a half's grid (`_edges`): that half's
    next point past the edge, the other half at its best, with every seed."""
    jobs = []
    for row in summarize_real(runs, settings, names=names):
        best = (row["lr"], row["adamw_lr"])
        pairs = {(r["lr"], r["adamw_lr"]) for r in runs
                 if (r["task"], r["optimizer"]) == (row["task"], row["optimizer"])}
        if "none finite" in row["brackets"].values():
            continue  # every lr diverged: no best to bracket
        for axis, where in _edges(best, sorted(pairs, key=lambda p: (p[0], p[1] or 0.0))).items():
            point = next_lr(_axis_values(pairs, axis), where)
            pair = (point, best[1]) if axis == 0 else (best[0], point)
            jobs += [(row["task"], row["optimizer"], *pair, seed) for seed in settings.seeds]
    return jobs


def _axis_values(pairs, axis: int) -> list[float]:
    return sorted({p[axis] for p in pairs if p[axis] is not None})


def _edges(best: tuple[float, float | None], pairs) -> dict[int, str]:
    """{axis: "low edge" or "high edge"} for each half (0: lr, 1: AdamW-half lr) whose grid of >= 2 points has the
    best at an end (`protocol.bracket`)."""
    out = {}
    for axis in (0, 1):
        where = bracket(_axis_values(pairs, axis), best[axis]) if best[axis] is not None else "single"
        if where in ("low edge", "high edge"):
            out[axis] = where
    return out


def _best_pairs(runs: list[dict], settings, names) -> dict[tuple[str, str], tuple[float, float | None]]:
    return {(row["task"], row["optimizer"]): (row["lr"], row["adamw_lr"])
            for row in summarize_real(runs, settings, names=names)}


def time_steps(task: str, lrs: dict[str, tuple[float, float | None]], settings) -> dict[str, float]:
    """Median ms of `optimizer.step()` alone per optimiser (at its (lr, adamw_lr)), on one model and one batch's
    gradients, in
    this process with one torch thread; the optimisers take turns (TIMING_ROUNDS rounds of TIMING_STEPS steps after
    WARMUP_STEPS), so a slow spell of the machine hits them alike. The runs' own times are two processes at once."""
    torch.manual_seed(0)
    if task == "digits":
        model, exclude = digits_model(settings.digits_hidden), DIGITS_EXCLUDE
        x, y, *_ = load_digits()
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
        for name, (lr, adamw_lr) in lrs.items():
            twin = copy.deepcopy(model)  # its own weights to step
            for mine, theirs in zip(twin.parameters(), model.parameters(), strict=True):
                mine.grad = theirs.grad.clone()
            optimizers[name] = build_optimizer(name, twin, lr, adamw_lr=adamw_lr, m3_frequency=settings.m3_frequency,
                                               exclude=exclude)
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
        log(f"(c) {job[0]} {job[1]} lr={pair_text(job[2], job[3])} seed={job[4]}: final loss "
            f"{run['final_loss']:.4f}")
        return run

    if settings.workers <= 1 or len(jobs) <= 1:
        return [done(job, _one_run(*job, settings)) for job in jobs]
    with worker_pool(settings.workers) as pool:
        futures = [pool.submit(_one_run, *job, settings) for job in jobs]
        return [done(job, future.result()) for job, future in zip(jobs, futures, strict=True)]


def pair_text(lr: float, adamw_lr: float | None) -> str:
    """"lr" for a single-lr optimiser, "lr/adamw_lr" for the Muon family (its grid's keys)."""
    return f"{lr:g}" if adamw_lr is None else f"{lr:g}/{adamw_lr:g}"


def summarize_real(runs: list[dict], settings, names=None) -> list[dict]:
    """One row per (task, optimiser in `names`, default all): the best lr (pair) by mean final validation loss over
    seeds, and there the test and training losses. "brackets": where the best lies in each half's grid
    (`protocol.bracket`); "edge": at an end of a grid of more than one point (either half's, for the Muon family)."""
    rows = []
    names = settings.real_optimizers if names is None else tuple(names)
    for task in settings.real_tasks:
        for name in names:
            mine = [r for r in runs if r["task"] == task and r["optimizer"] == name]
            pairs = sorted({(r["lr"], r["adamw_lr"]) for r in mine}, key=lambda p: (p[0], p[1] or 0.0))
            grid = {p: statistics.fmean(r["final_loss"] for r in mine if (r["lr"], r["adamw_lr"]) == p)
                    for p in pairs}
            best = min(pairs, key=lambda p: grid[p])
            at_best = [r for r in mine if (r["lr"], r["adamw_lr"]) == best]
            finals = [r["final_loss"] for r in at_best]
            tests = [r.get("test_loss", math.nan) for r in at_best]
            timed = min(at_best, key=lambda r: r["seed"])
            chosen = any(math.isfinite(v) for v in grid.values())  # else diverged at every lr: there is no choice
            edges = _edges(best, pairs) if chosen else {}
            brackets = {half: edges.get(axis, "interior" if len(_axis_values(pairs, axis)) > 1 else "single")
                        if chosen else "none finite" for axis, half in enumerate(("lr", "adamw_lr"))
                        if best[axis] is not None}
            row = {"task": task, "optimizer": name, "lr": best[0], "adamw_lr": best[1],
                   "grid": {pair_text(*p): grid[p] for p in pairs}, "edge": bool(edges), "brackets": brackets,
                   "seeds": len(at_best), "final_loss": statistics.fmean(finals), "final_min": min(finals),
                   "final_max": max(finals), "test_loss": statistics.fmean(tests), "test_min": min(tests),
                   "test_max": max(tests),
                   "train_loss": statistics.fmean(r.get("train_loss", math.nan) for r in at_best),
                   "run_step_ms": timed["step_ms"], "total_ms": timed["total_ms"], "runs": at_best}
            if task == "digits":
                row["accuracy"] = statistics.fmean(r["test"]["accuracy"] for r in at_best)
            rows.append(row)
    return rows
