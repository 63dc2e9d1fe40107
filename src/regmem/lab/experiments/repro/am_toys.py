"""The training harness of arXiv:2505.19488's toy experiments (Sec. 3.2-3.3, Listing 2), shared by `am-swap` and
`am-dag`.

Listing 2 trains a one-layer model on fresh batches: AdamW (lr 0.01, weight decay 0.01), a linear schedule with 128
warm-up steps decaying to 0, cross-entropy at every labelled position, and a curriculum that doubles the sequence
length whenever the last batch's accuracy passes a threshold. Here the model is regmem's LM with no FFN
(embedding -> pre-norm mixer block -> norm -> head; the listing has no norms), in float32 (the listing trains in
bf16). Each arm of an experiment is a `Run` (experiments/runs.py) whose `setting` holds the mixer's options, the
depth and the curriculum, so the fair protocol (experiments/protocol.py: each arm at its best lr of a grid over
seeds, with the spread; runs stored and resumed) ranks the arms. After training, every run is scored on fresh
sequences of the evaluation length (seeded apart from training).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass

import torch

from regmem.lab.experiments.presets import Preset
from regmem.lab.experiments.runs import Run
from regmem.models import LM, LMConfig
from regmem.tasks import TASKS
from regmem.tasks.base import split_seed
from regmem.tasks.swap import DoublingCurriculum


@dataclass(frozen=True)
class ToyBudget:
    """What every arm of a toy experiment gets (Listing 2's values unless noted)."""

    steps: int
    batch_size: int = 128
    warmup: int = 128
    weight_decay: float = 0.01
    num_eval: int = 512  # fresh evaluation sequences
    d_model: int = 12
    n_heads: int = 4


def toy_preset(name: str, budget: ToyBudget, task_fields: dict, eval_fields: dict,
               eval_lengths: tuple[int, ...] = ()) -> Preset:
    """The Preset of an experiment: it names the whole budget, both task points and the extra evaluation lengths
    (`eval_lengths`, for tasks with `with_seq_len`; entered only when given, so earlier runs keep their keys), so
    the run store keys every run by them (the harness itself reads `budget`)."""
    task = {"train": task_fields, "eval": eval_fields, "warmup": budget.warmup, "weight_decay": budget.weight_decay}
    if eval_lengths:
        task["eval_lengths"] = list(eval_lengths)
    return Preset(name=name, d_model=budget.d_model, n_layers=1, n_heads=budget.n_heads, ffn="none", task=task,
                  steps=budget.steps, batch_size=budget.batch_size, lr=0.01, num_train=budget.steps * budget.batch_size,
                  num_eval=budget.num_eval, eval_every=budget.steps)


def arm(label: str, *, n_layers: int = 1, curriculum: tuple | None = None, **mixer_kwargs) -> dict:
    """One arm's `setting`: a label naming it in the run store, the mixer's options, its depth, and (start,
    threshold, max_len) of a length curriculum or None."""
    return {"label": label, "mixer_kwargs": mixer_kwargs, "n_layers": n_layers, "curriculum": curriculum}


def build_model(run: Run, budget: ToyBudget, vocab_size: int) -> LM:
    setting = run.setting
    config = LMConfig(vocab_size=vocab_size, d_model=budget.d_model, n_layers=setting["n_layers"],
                      n_heads=budget.n_heads, mixer=run.mixer, mixer_kwargs={run.mixer: setting["mixer_kwargs"]},
                      ffn="none")
    return LM(config)


def linear_schedule(warmup: int, steps: int):
    """Listing 2's schedule: linear warm-up over `warmup` steps, then linear decay to 0 at `steps`."""
    def factor(step: int) -> float:
        if step < warmup:
            return (step + 1) / warmup
        return max(0.0, (steps - step) / max(steps - warmup, 1))
    return factor


def train_toy(run: Run, preset: Preset, *, budget: ToyBudget) -> dict:
    """Trains one arm on fresh batches (Listing 2's loop) with the task fields `preset.task["train"]`, and scores it
    on fresh sequences of `preset.task["eval"]` of the validation split (which chooses the lr: "score") and of the
    test split (what is reported: "test_score", "test_metrics"), and on the test split at each length in
    `preset.task["eval_lengths"]` (if any); tasks/base.py, `split_seed`.

    Returns the validation metrics, the test metrics, the test accuracy at each extra length ({str(length): accuracy},
    empty without `eval_lengths`), the final training length, the first step whose batch accuracy reached 0.999 (None if
    never) and the last batch's loss and accuracy."""
    torch.manual_seed(run.seed)
    task_cls = TASKS[run.task]
    task = task_cls(task_cls.config_class(**preset.task["train"]))
    model = build_model(run, budget, task.config.vocab_size)
    optimizer = torch.optim.AdamW(model.parameters(), lr=run.lr, weight_decay=budget.weight_decay)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, linear_schedule(budget.warmup, budget.steps))
    curriculum = DoublingCurriculum(*run.setting["curriculum"]) if run.setting["curriculum"] else None
    if curriculum is not None:
        task = task.with_seq_len(curriculum.seq_len)
    generator = torch.Generator().manual_seed(run.seed)
    solved_at, loss, acc = None, math.nan, 0.0
    start = time.perf_counter()
    model.train()
    for step in range(budget.steps):
        inputs, targets = task.generate(budget.batch_size, generator=generator)
        logits = model(inputs)
        loss_t = torch.nn.functional.cross_entropy(logits.flatten(0, 1), targets.flatten(), ignore_index=-100)
        optimizer.zero_grad(set_to_none=True)
        loss_t.backward()
        optimizer.step()
        scheduler.step()
        loss, acc = float(loss_t.detach()), task.metric(logits.detach(), targets)["accuracy"]
        if solved_at is None and acc >= 0.999:
            solved_at = step + 1
        if curriculum is not None and (new_len := curriculum.update(acc)) is not None:
            task = task.with_seq_len(new_len)
    seconds = time.perf_counter() - start
    model.eval()
    eval_task = task_cls(task_cls.config_class(**preset.task["eval"]))
    metrics = _evaluate(model, eval_task, budget.num_eval, split_seed(run.seed, "valid"))
    test = _evaluate(model, eval_task, budget.num_eval, split_seed(run.seed, "test"))
    at_length = {str(n): _evaluate(model, eval_task.with_seq_len(n), budget.num_eval,
                                   split_seed(run.seed, "test"))["accuracy"]
                 for n in preset.task.get("eval_lengths", ())}
    final_len = task.config.seq_len if hasattr(task.config, "seq_len") else None
    return {"score": metrics["accuracy"], **metrics, "test_score": test["accuracy"], "test_metrics": test,
            "accuracy_at_length": at_length, "train_len": final_len,
            "solved_at": solved_at,
            "final_loss": loss, "final_batch_accuracy": acc, "parameters": sum(p.numel() for p in model.parameters()),
            "state_floats": model.state_floats(eval_task.config.seq_len), "train_seconds": seconds,
            "tokens_per_second": budget.steps * budget.batch_size * eval_task.config.seq_len / seconds}


def _evaluate(model: LM, task, num_eval: int, seed: int) -> dict:
    """The task's metrics of `model` on `num_eval` fresh sequences of generator seed `seed` (a split's seed; the
    training batches come from a generator of the run's seed, another stream)."""
    inputs, targets = task.generate(num_eval, seed=seed)
    with torch.no_grad():
        return task.metric(model(inputs), targets)


def arm_bars(ax, rows: list[dict], *, metric: str, chance: float, chance_label: str, fontsize: int = 8) -> None:
    """One horizontal bar per arm: its mean accuracy (%) at its best lr, the bar's whiskers the range over seeds,
    and a dotted line at chance. rows: {"arm", "mean", "low", "high"} each."""
    y = list(range(len(rows)))
    ax.barh(y, [100 * r["mean"] for r in rows],
            xerr=[[100 * (r["mean"] - r["low"]) for r in rows], [100 * (r["high"] - r["mean"]) for r in rows]])
    ax.set_yticks(y, [r["arm"] for r in rows], fontsize=fontsize)
    ax.invert_yaxis()
    ax.axvline(100 * chance, color="grey", linestyle=":", label=chance_label)
    ax.set_xlim(0, 100)
    ax.set_xlabel(f"{metric} % (best lr, mean and range over seeds)")
