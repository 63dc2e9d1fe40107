"""How a trained model's accuracy (or, for language modelling, its loss) moves with the position in its context, on
the test split.

For a needle task the curve is the accuracy with the needle at each of `DEPTHS` of the haystack (0: at its start);
for the text task it is the loss in bits per token of each of `POSITION_BUCKETS` equal spans of the sequence (how
much the context helps: a model that uses it predicts later tokens better); for any other task it is the accuracy
of the scored tokens in each span. `regmem compare --by-position` records it per run (`by_position`) and tables it
at each cell's best lr; `regmem repro nl-ablations` records it per Table-6 row.

A model with a Continuum Memory System (Hope, Hope-Attention; Nested Learning, arXiv:2512.24695, Sec. 7) is also
scored with the CMS frozen (`cms_frozen`: every level's in-context lr 0, so its levels keep their trained initial
weights through the sequence): the difference is what the levels' updates within a sequence add.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import statistics

import torch
import torch.nn.functional as F

from regmem.lab.experiments.presets import Preset
from regmem.lab.experiments.runs import Run, RunResult, build_task
from regmem.tasks.base import IGNORE_INDEX, split_data
from regmem.tasks.text import METRIC_CHUNK_ROWS
from regmem.train.trainer import token_loss

POSITION_BUCKETS = 8
DEPTHS = (0.0, 0.25, 0.5, 0.75, 1.0)  # a needle task's curve: the needle's relative position in the haystack
EVAL_ROWS = 16  # sequences per forward pass


def is_needle(task: str) -> bool:
    return task.startswith("niah")


def is_loss_curve(task: str) -> bool:
    """Whether the task's curve is a loss (bits per token; lower is better) rather than an accuracy."""
    return task == "text"


def curve_metric(task: str) -> str:
    return "bits per token" if is_loss_curve(task) else "accuracy"


def curve_points(task: str) -> list[float]:
    """The curve's x values: needle depths, or the end of each span of the sequence."""
    return list(DEPTHS) if is_needle(task) else [(i + 1) / POSITION_BUCKETS for i in range(POSITION_BUCKETS)]


def curve_label(task: str) -> str:
    return ("by the needle's depth in the haystack (0: at its start)" if is_needle(task)
            else f"by the position of the scored tokens, in {POSITION_BUCKETS} equal spans of the sequence")


def position_bits(logits: torch.Tensor, targets: torch.Tensor, buckets: int) -> list[float | None]:
    """Mean cross-entropy in bits of the labelled positions in each of `buckets` equal spans of the sequence; None
    for a span without labels. logits [N, T, V], targets [N, T]; float64, `METRIC_CHUNK_ROWS` sequences at a time
    (as the text task's own metric: a large vocabulary never doubles all logits at once)."""
    T = targets.shape[1]
    spans = [slice(b * T // buckets, (b + 1) * T // buckets) for b in range(buckets)]
    bits, counts = [0.0] * buckets, [0] * buckets
    for rows, labels in zip(logits.split(METRIC_CHUNK_ROWS), targets.split(METRIC_CHUNK_ROWS), strict=True):
        nats = F.cross_entropy(rows.double().flatten(0, 1), labels.flatten(), reduction="none",
                               ignore_index=IGNORE_INDEX).view_as(labels)  # 0 where unlabelled
        labelled = labels != IGNORE_INDEX
        for b, span in enumerate(spans):
            bits[b] += float(nats[:, span].sum()) / math.log(2)
            counts[b] += int(labelled[:, span].sum())
    return [total / count if count else None for total, count in zip(bits, counts, strict=True)]


def position_accuracy(logits: torch.Tensor, targets: torch.Tensor, buckets: int) -> list[float | None]:
    """Accuracy of the labelled positions (targets != IGNORE_INDEX) in each of `buckets` equal spans of the
    sequence; None for a span without labels. logits [N, T, V], targets [N, T]."""
    T = targets.shape[1]
    labelled = targets != IGNORE_INDEX
    right = (logits.argmax(-1) == targets) & labelled
    out = []
    for b in range(buckets):
        span = slice(b * T // buckets, (b + 1) * T // buckets)
        count = int(labelled[:, span].sum())
        out.append(int(right[:, span].sum()) / count if count else None)
    return out


def score_model(model, task, inputs, targets, *, curve: bool = False) -> dict:
    """Loss and the task's metrics of `model` on (inputs, targets); with `curve`, also `position_accuracy`."""
    with torch.no_grad():
        logits = torch.cat([model(inputs[i:i + EVAL_ROWS]) for i in range(0, len(inputs), EVAL_ROWS)])
    total, count = token_loss(logits, targets)
    out = {"loss": float(total) / max(int(count), 1),
           **{name: float(value) for name, value in task.metric(logits, targets).items()}}
    if curve:
        by = position_bits if is_loss_curve(task.name) else position_accuracy
        out["by_position"] = by(logits, targets, POSITION_BUCKETS)
    return out


def curve_on_test(model, run: Run, preset: Preset, num_test: int) -> dict:
    """`model` on `num_test` sequences of the run's test split: loss, metrics and "by_position" (module docstring;
    for a needle task num_test // len(DEPTHS) sequences at each depth)."""
    task = build_task(run.task, preset, run.setting)
    inputs, targets = split_data(task, "test", num_test, seed=run.seed)
    if not is_needle(run.task):
        return score_model(model, task, inputs, targets, curve=True)
    curve = []
    for depth in DEPTHS:
        at = build_task(run.task, preset, {**run.setting, "depth": depth})
        x, y = split_data(at, "test", max(num_test // len(DEPTHS), 1), seed=run.seed)
        curve.append(score_model(model, at, x, y)["accuracy"])
    return {**score_model(model, task, inputs, targets), "by_position": curve}


@contextlib.contextmanager
def cms_frozen(model):
    """`model` with every CMS level's in-context updates off (module docstring), restored on exit; yields whether it
    has a CMS at all."""
    modules = [m for m in model.modules() if getattr(m, "cms", None) is not None]
    configs = [m.cms.config for m in modules]
    for module in modules:
        module.cms.config = dataclasses.replace(module.cms.config, lr=0.0)
    try:
        yield bool(modules)
    finally:
        for module, config in zip(modules, configs, strict=True):
            module.cms.config = config


def by_position(run: Run, trained: RunResult, *, preset: Preset) -> dict:
    """A `train_run` evaluate hook: {"by_position": the test curve} of the trained model ([] if it diverged); for a
    model with a CMS also "test_cms_frozen": its loss, metrics and curve on the same test sequences, CMS frozen."""
    if trained.model is None or trained.diverged_at_step is not None:
        return {"by_position": []}
    model = trained.model.eval()
    out = {"by_position": curve_on_test(model, run, preset, preset.num_eval)["by_position"]}
    with cms_frozen(model) as has_cms:
        if has_cms:
            out["test_cms_frozen"] = curve_on_test(model, run, preset, preset.num_eval)
    return out


def mean_curve(curves: list[list]) -> list[float | None]:
    """The pointwise mean of curves of one length (None where any is None); [] for none."""
    curves = [c for c in curves if c]
    if not curves:
        return []
    return [None if any(c[i] is None for c in curves) else statistics.fmean(c[i] for c in curves)
            for i in range(len(curves[0]))]
