"""Building one training run from a task name, a mixer and a preset (shared by `compare` and `train`)."""

from __future__ import annotations

import dataclasses

import torch

from regmem.experiments.presets import Preset
from regmem.models import LM, LMConfig
from regmem.tasks import TASKS
from regmem.train import TrainConfig


def build_task(task_name: str, preset: Preset, overrides: dict):
    if task_name not in TASKS:
        raise ValueError(f"task must be one of {sorted(TASKS)}, got {task_name!r}")
    task_class = TASKS[task_name]
    config_fields = {f.name for f in dataclasses.fields(task_class.config_class)}
    unknown = set(overrides) - config_fields
    if unknown:
        raise ValueError(f"unknown {task_name} fields {sorted(unknown)}; known: {sorted(config_fields)}")
    return task_class(task_class.config_class(**{**preset.task, **overrides}))


def build_model(mixer: str, preset: Preset, vocab_size: int, *, seed: int) -> LM:
    torch.manual_seed(seed)  # the model init is part of the run's seed
    return LM(LMConfig(
        vocab_size=vocab_size, d_model=preset.d_model, n_layers=preset.n_layers, n_heads=preset.n_heads,
        mixer=mixer, mixer_kwargs={k: v for k, v in preset.mixer_kwargs.items() if k == mixer}, ffn=preset.ffn,
    ))


def build_train_config(preset: Preset, *, seed: int, progress: bool, **overrides) -> TrainConfig:
    steps = overrides.pop("steps", None) or preset.steps
    return TrainConfig(**{
        "steps": steps, "batch_size": preset.batch_size, "lr": preset.lr, "warmup_steps": steps // 10,
        "eval_every": preset.eval_every, "seed": seed, "progress": progress, "target_metric": "accuracy",
        "target_value": 0.99, "log_every": max(steps // 20, 1), **overrides,
    })
