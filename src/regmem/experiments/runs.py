"""One cell of an experiment: a (task, mixer, preset, seed) point trained and evaluated by `train_cell`.

`train_cell` is the one training path of the command line: `regmem train` runs one cell (with checkpoints,
resume and DDP under torchrun), `regmem compare` runs one per mixer and sweep value, `regmem repro ttr-mqar`
one per mixer and grid point.
"""

from __future__ import annotations

import dataclasses
import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import torch

from regmem.experiments.presets import Preset
from regmem.models import LM, LMConfig
from regmem.tasks import TASKS
from regmem.train import TrainConfig, Trainer, distributed


def build_task(task_name: str, preset: Preset, overrides: dict):
    if task_name not in TASKS:
        raise ValueError(f"task must be one of {sorted(TASKS)}, got {task_name!r}")
    task_class = TASKS[task_name]
    config_fields = {f.name for f in dataclasses.fields(task_class.config_class)}
    unknown = set(overrides) - config_fields
    if unknown:
        raise ValueError(f"unknown {task_name} fields {sorted(unknown)}; known: {sorted(config_fields)}")
    # A task's own point in the preset, else the fields it has of the preset's MQAR point (vocab_size, seq_len...).
    if task_name in preset.task_points:
        shared = dict(preset.task_points[task_name])
    else:
        shared = {k: v for k, v in preset.task.items() if k in config_fields}
    return task_class(task_class.config_class(**{**shared, **overrides}))


def training_data(task, num_examples: int, *, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The training set: the task's optional `generate_train` where its training data differs from what it is
    scored on (MAD's recall tasks train on every next token; text trains on the training split), else
    `generate`. Evaluation data always comes from `generate`."""
    generate = getattr(task, "generate_train", task.generate)
    return generate(num_examples, seed=seed)


def build_model(mixer: str, preset: Preset, vocab_size: int, *, seed: int) -> LM:
    torch.manual_seed(seed)  # the model init is part of the run's seed
    return LM(LMConfig(
        vocab_size=vocab_size, d_model=preset.d_model, n_layers=preset.n_layers, n_heads=preset.n_heads,
        mixer=mixer, mixer_kwargs={k: v for k, v in preset.mixer_kwargs.items() if k == mixer}, ffn=preset.ffn,
    ))


def build_train_config(
    preset: Preset, *, seed: int, progress: bool, steps: int | None = None, lr: float | None = None,
    batch_size: int | None = None, out_dir: str | None = None, checkpoint_every: int | None = None,
    optimizer: str = "adamw",
) -> TrainConfig:
    """The preset's budget; steps, lr and batch_size override it where given (warm-up and logging follow steps)."""
    steps = preset.steps if steps is None else steps
    return TrainConfig(
        steps=steps, batch_size=preset.batch_size if batch_size is None else batch_size,
        lr=preset.lr if lr is None else lr, warmup_steps=steps // 10, eval_every=preset.eval_every, seed=seed,
        progress=progress, target_metric="accuracy", target_value=0.99, log_every=max(steps // 20, 1),
        out_dir=out_dir, checkpoint_every=checkpoint_every, optimizer=optimizer,
    )


@dataclass(frozen=True)
class Cell:
    """What a cell trains: the preset's model, task and budget, with the task fields and budget overridden."""

    task: str  # a name in regmem.tasks.TASKS, e.g. "mqar"
    mixer: str  # a name in regmem.layers.MIXERS
    preset: Preset
    seed: int = 0  # seeds the data (train: seed, eval: seed + 1), the model init and the data order
    task_overrides: dict = field(default_factory=dict)  # task-config fields over the preset's, e.g. num_kv_pairs
    steps: int | None = None  # None: the preset's
    lr: float | None = None  # None: the preset's
    batch_size: int | None = None  # global batch; None: the preset's
    optimizer: str = "adamw"  # a name of regmem.train.optimizers.OPTIMIZERS


@dataclass(frozen=True)
class CellResult:
    accuracy: float  # of the last evaluation, at the final or early-stop step
    parameters: int
    state_floats: int  # decoding state per sequence at the task's seq_len (KV cache for attention)
    train_seconds: float  # of this call's training, evaluations included
    tokens_per_second: float  # input tokens of the steps trained in this call, all ranks together
    steps: int  # steps completed, counting those before a resume
    metrics: dict[str, float]  # the last evaluation: loss and the task's metric
    stopped_early: bool
    model: LM | None = field(default=None, repr=False, compare=False)  # the trained model, for further evals

    def row(self) -> dict:
        """The numbers a leaderboard row shows, by name: accuracy through steps."""
        names = ("accuracy", "parameters", "state_floats", "train_seconds", "tokens_per_second", "steps")
        return {name: getattr(self, name) for name in names}


def train_cell(
    cell: Cell, *, out_dir: str | None = None, checkpoint_every: int | None = None, resume: bool = False,
    progress: bool = True, log: Callable[[str], None] | None = None,
) -> CellResult:
    """Trains and evaluates one cell; also under torchrun, where every rank calls it and trains its share.

    out_dir receives metrics.jsonl, checkpoint/ (every `checkpoint_every` steps and at the end) and, once the
    run ends, model/ (LM.save_pretrained); resume continues from its checkpoint. `log`, if given, receives the
    resolved task, model and train configs as JSON before training; it and the saving happen on rank 0 only.
    """
    preset = cell.preset
    task = build_task(cell.task, preset, cell.task_overrides)
    model = build_model(cell.mixer, preset, task.vocab_size, seed=cell.seed)
    config = build_train_config(
        preset, seed=cell.seed, progress=progress, steps=cell.steps, lr=cell.lr, batch_size=cell.batch_size,
        out_dir=out_dir, checkpoint_every=checkpoint_every, optimizer=cell.optimizer,
    )
    if log is not None and distributed.is_main():
        resolved = {"task": dataclasses.asdict(task.config), "model": model.config.to_dict(),
                    "train": config.to_dict()}
        log(json.dumps(resolved, indent=1))
    trainer = Trainer(model, config, train_data=training_data(task, preset.num_train, seed=cell.seed),
                      eval_data=task.generate(preset.num_eval, seed=cell.seed + 1), metric=task.metric)
    start = time.perf_counter()
    summary = trainer.fit(resume=resume)
    seconds = time.perf_counter() - start
    if out_dir is not None and distributed.is_main():
        model.save_pretrained(Path(out_dir) / "model")
    trained = summary["step"] - summary["start_step"]
    return CellResult(
        accuracy=summary["metrics"]["accuracy"], parameters=model.num_parameters(),
        state_floats=model.state_size(task.seq_len), train_seconds=seconds,
        tokens_per_second=trained * config.batch_size * task.seq_len / seconds, steps=summary["step"],
        metrics=summary["metrics"], stopped_early=summary["stopped_early"], model=model,
    )
