"""One training run: `Run` describes it, `train_and_evaluate` trains and scores it.

A run is a task and a mixer trained under a preset's model and budget (experiments/presets.py) with a learning
rate and a seed, optionally with task fields and budget overridden. It is the one description of a run on the
command line: `regmem train` trains one (with checkpoints, resume and DDP under torchrun), `regmem compare`,
`regmem suite` and the reproductions train grids of them through the fair protocol (experiments/protocol.py),
which stores each under its `Run.key`.

A run directory (`train_and_evaluate(..., out_dir=...)`, `regmem train --out-dir`) holds metrics.jsonl,
checkpoint/, model/, run.json: the run as resolved (task fields, model, the training settings that fix its
trajectory, data sizes; `describe_run`), and config.toml: the same as a config file that trains it again
(experiments/run_config.py), both written when the run starts. `check_run_dir` is the rule for reusing one:
a directory that holds a run is never trained into afresh unless `overwrite` (which deletes that run's files first);
`resume` continues it only when every setting of run.json equals the resumed run's, and names each that differs.

A run repeats bit for bit only on the same machine kind: its settings fix the trajectory up to the float path, and
ATen dispatches its CPU kernels by the processor's vector instructions (AVX2, AVX-512, ...), whose different summation
orders round differently. A long training run amplifies the last bit like a different seed would (measured on one
AVX2 machine, MQAR quick, Gated DeltaNet at lr 0.1, seed 0: validation loss 0.099 under AVX2 and 0.144 with
ATEN_CPU_CAPABILITY=default). So every run records its `machine` (machine.json beside run.json; the protocol's stored
results), and a resume on another kind warns that the run no longer repeats.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import platform
import shutil
import time
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import get_args

import torch

from regmem.lab.experiments.presets import Preset
from regmem.lab.experiments.run_config import config_text, resolved_config
from regmem.layers import MIXERS
from regmem.models import LM, LMConfig
from regmem.models.config import FORMAT as MODEL_FORMAT
from regmem.ops import value_checks
from regmem.storage import RunLock, read_json, write_atomic
from regmem.tasks import TASKS
from regmem.tasks.base import split_data
from regmem.tasks.tokenizer import TOKENIZER_FILE
from regmem.train import TrainConfig, Trainer, distributed, latest_checkpoint
from regmem.train.checkpoint import verify_checkpoint
from regmem.train.config import TRAJECTORY_FIELDS, OptimizerName

BUDGET_FIELDS = ("steps", "batch_size", "optimizer")  # a run's fields that override the preset's budget


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


def with_task_fields(preset: Preset, task: str, fields: dict) -> Preset:
    """`preset` whose point for `task` has `fields` over it (for commands whose runs vary other task fields: a
    compare's sweep); ValueError naming unknown fields."""
    if not fields:
        return preset
    build_task(task, preset, fields)  # the fields must be the task's, and their values valid
    names = {f.name for f in dataclasses.fields(TASKS[task].config_class)}
    point = preset.task_points.get(task, {k: v for k, v in preset.task.items() if k in names})
    return dataclasses.replace(preset, task_points={**preset.task_points, task: {**point, **fields}})


def model_config(mixer: str, preset: Preset, vocab_size: int) -> LMConfig:
    return LMConfig(
        vocab_size=vocab_size, d_model=preset.d_model, n_layers=preset.n_layers, n_heads=preset.n_heads,
        mixer=mixer, mixer_kwargs={k: v for k, v in preset.mixer_kwargs.items() if k == mixer}, ffn=preset.ffn,
    )


def build_model(mixer: str, preset: Preset, vocab_size: int, *, seed: int) -> LM:
    torch.manual_seed(seed)  # the model init is part of the run's seed
    return LM(model_config(mixer, preset, vocab_size))


def build_train_config(
    preset: Preset, *, seed: int, progress: bool, steps: int | None = None, lr: float | None = None,
    batch_size: int | None = None, out_dir: str | None = None, checkpoint_every: int | None = None,
    optimizer: OptimizerName = "adamw",
) -> TrainConfig:
    """The preset's budget; steps, lr and batch_size override it where given (warm-up and logging follow steps).
    The preset's `mlp_lr_scale` applies to AdamW; another optimizer takes one lr for the whole model."""
    steps = preset.steps if steps is None else steps
    return TrainConfig(
        steps=steps, batch_size=preset.batch_size if batch_size is None else batch_size,
        lr=preset.lr if lr is None else lr, warmup_steps=steps // 10, eval_every=preset.eval_every, seed=seed,
        progress=progress, target_metric="accuracy", target_value=0.99, log_every=max(steps // 20, 1),
        out_dir=out_dir, checkpoint_every=checkpoint_every, optimizer=optimizer,
        mlp_lr_scale=preset.mlp_lr_scale if optimizer == "adamw" else 1.0,
    )


def has_mlp(mixer: str, preset: Preset) -> bool:
    """Whether a run of `mixer` under `preset` has MLP parameters (an FFN, or a mixer with one inside)."""
    return preset.ffn != "none" or getattr(MIXERS.get(mixer), "has_mlp", False)


@dataclass(frozen=True)
class Run:
    """One training run under a preset (given beside it: `train_and_evaluate(run, preset)`, `run.key(preset)`).

    `setting` is what varies within a (task, mixer) pair besides lr and seed: for `train_and_evaluate`, task-config
    fields over the preset's point for the task (e.g. {"num_kv_pairs": 16}); a reproduction with its own training
    function may read other fields from it (am_toys.py: an arm's mixer options, depth and curriculum).
    """

    task: str  # a name in regmem.tasks.TASKS, e.g. "mqar"
    mixer: str  # a name in regmem.layers.MIXERS, or recipe:<weights>/<regressor>/<solver>
    lr: float | None = None  # peak learning rate; None: the preset's
    seed: int = 0  # seeds the data (train: seed, eval: seed + 1), the model init and the data order
    setting: dict = field(default_factory=dict)  # task-config fields over the preset's, e.g. num_kv_pairs
    steps: int | None = None  # optimiser steps; None: the preset's
    batch_size: int | None = None  # global batch; None: the preset's
    optimizer: OptimizerName = "adamw"  # a name of regmem.train.optimizers.OPTIMIZERS

    def __post_init__(self):
        for name in ("lr", "steps", "batch_size"):
            value = getattr(self, name)
            if value is not None and not value > 0:
                raise ValueError(f"{name} must be positive, got {value!r}")
        if self.optimizer not in get_args(OptimizerName):  # TrainConfig's check, before any run of a grid trains
            raise ValueError(f"optimizer must be one of {get_args(OptimizerName)}, got {self.optimizer!r}")

    def budget_overrides(self) -> dict:
        """steps, batch_size and optimizer where they differ from their defaults (the preset's, AdamW)."""
        defaults = {f.name: f.default for f in dataclasses.fields(self) if f.name in BUDGET_FIELDS}
        return {name: getattr(self, name) for name, default in defaults.items() if getattr(self, name) != default}

    def to_dict(self) -> dict:
        """The run as stored and reported: task, mixer, lr, seed, setting, and the budget overrides given."""
        return {"task": self.task, "mixer": self.mixer, "lr": self.lr, "seed": self.seed, "setting": self.setting,
                **self.budget_overrides()}

    def key(self, preset: Preset) -> str:
        """A stable name for the run's file: a hash of everything that fixes the run, and nothing else (other tasks'
        points and other mixers' options are left out). Budget overrides enter only where given, so the key of a run
        without them is the one stored runs were saved under."""
        budget = {k: v for k, v in preset.to_dict().items() if k != "task_points"}  # other tasks' points do not count
        budget["mixer_kwargs"] = {k: v for k, v in preset.mixer_kwargs.items() if k == self.mixer}  # nor other mixers'
        if preset.mlp_lr_scale == 1 or not has_mlp(self.mixer, preset):  # then it changes nothing in the run
            budget.pop("mlp_lr_scale")
        fixed = {"task": self.task, "mixer": self.mixer, "lr": self.lr, "seed": self.seed, "setting": self.setting,
                 "preset": budget, "task_point": preset.task_points.get(self.task), **self.budget_overrides()}
        if MODEL_FORMAT != KEYED_FORMAT:  # a later format changed some model's defaults: its runs are other runs
            fixed["model_format"] = MODEL_FORMAT
        return hashlib.sha256(json.dumps(fixed, sort_keys=True).encode()).hexdigest()[:20]


# The model format (LMConfig, regmem/models/config.py) every run stored so far was trained under, whose keys therefore
# leave it out; a run under a later format, whose mixers' defaults may differ, gets a key of its own, so a resumable
# command never takes a run trained with the old defaults for one with the new.
KEYED_FORMAT = 7


@dataclass(frozen=True)
class RunResult:
    accuracy: float  # on validation, at the final or early-stop step; 0 when the run diverged
    parameters: int
    state_floats: int  # decoding state per sequence at the task's seq_len (KV cache for attention)
    train_seconds: float  # of this call's training, evaluations included
    tokens_per_second: float  # input tokens of the steps trained in this call, all ranks together
    steps: int  # steps completed, counting those before a resume
    metrics: dict[str, float]  # the last validation evaluation: loss and the task's metrics; {} when it diverged
    stopped_early: bool
    test_metrics: dict[str, float] = field(default_factory=dict)  # the final model on the test split; {} likewise
    model: LM | None = field(default=None, repr=False, compare=False)  # the trained model, for further evals
    diverged_at_step: int | None = None  # the step whose loss became non-finite (the Trainer stopped there)
    divergence: str | None = None  # the Trainer's message naming that step and the checkpoint kept

    def row(self) -> dict:
        """The numbers a leaderboard row shows, by name: accuracy through steps."""
        names = ("accuracy", "parameters", "state_floats", "train_seconds", "tokens_per_second", "steps")
        return {name: getattr(self, name) for name in names}


RUN_FILE = "run.json"  # the resolved run, written when it starts
MACHINE_FILE = "machine.json"  # where it started (`machine`): a resume elsewhere warns
CONFIG_FILE = "config.toml"  # the same run as a config file (experiments/run_config.py): `--config` trains it again
# What a run directory holds (the Trainer's files, the saved model, run.json): what makes a directory hold a run,
# and what `overwrite` deletes, nothing else
RUN_FILES = ("metrics.jsonl", "checkpoint", "checkpoint.old", "checkpoint.tmp", "model", RUN_FILE, CONFIG_FILE,
             MACHINE_FILE)
# The TrainConfig fields besides the trajectory's that decide where a run ends (the early stop)
STOP_FIELDS = ("eval_every", "target_metric", "target_value")


def machine(device: str = "cpu") -> dict:
    """What a run's float path depends on beyond its settings (module docstring): torch's version, the CPU's
    architecture, the vector instruction set ATen's kernels dispatch to, the torch threads (which fix how its
    reductions split: 1 and 2 threads round differently), and on CUDA the GPU's name."""
    record = {"torch": torch.__version__, "arch": platform.machine(),
              "cpu_capability": torch.backends.cpu.get_cpu_capability(), "threads": torch.get_num_threads()}
    if str(device).startswith("cuda") and torch.cuda.is_available():
        record["gpu"] = torch.cuda.get_device_name(torch.device(device))
    return record


def describe_run(run: Run, preset: Preset) -> dict:
    """Everything that fixes a run, resolved and JSON-ready: the task's fields, the model's config, the training
    settings that fix its trajectory and its stop, the data sizes (what run.json holds and resume compares)."""
    task = build_task(run.task, preset, run.setting)
    config = build_train_config(preset, seed=run.seed, progress=False, steps=run.steps, lr=run.lr,
                                batch_size=run.batch_size, optimizer=run.optimizer)
    description = {
        "task": {"name": run.task, **dataclasses.asdict(task.config)},
        "model": model_config(run.mixer, preset, task.vocab_size).to_dict(),
        "train": {name: getattr(config, name) for name in (*TRAJECTORY_FIELDS, *STOP_FIELDS)},
        "data": {"num_train": preset.num_train, "num_eval": preset.num_eval},
    }
    return json.loads(json.dumps(description))  # as stored: tuples are lists


def _flat(value, prefix: str = "") -> dict:
    """{"task": {"seq_len": 64}} -> {"task.seq_len": 64}."""
    if not isinstance(value, dict) or not value:
        return {prefix.rstrip("."): value}
    flat = {}
    for name, item in value.items():
        flat.update(_flat(item, f"{prefix}{name}."))
    return flat


def describe_differences(stored: dict, given: dict) -> list[str]:
    """Each setting on which two `describe_run` results disagree: "task.num_kv_pairs (stored 4, given 2)"."""
    stored, given = _flat(stored), _flat(given)
    names = sorted(set(stored) | set(given))
    # a field missing from a run.json written before it existed equals its default None (TextConfig's data ...)
    return [f"{name} (stored {stored.get(name, 'nothing')!r}, given {given.get(name, 'nothing')!r})"
            for name in names if stored.get(name) != given.get(name)]


def holds_run(out_dir: str | Path) -> list[str]:
    """The run files present in `out_dir` (none: it holds no run)."""
    return [name for name in RUN_FILES if (Path(out_dir) / name).exists()]


def check_run_dir(out_dir: str | Path, description: dict, *, resume: bool, overwrite: bool = False) -> None:
    """Whether a run described by `description` may train in `out_dir`; ValueError naming out_dir (or resume) and
    what is wrong otherwise. Nothing is written.

    - a path that exists and is not a directory: refused;
    - a directory that holds a run (`holds_run`): refused unless `resume` or `overwrite`;
    - `resume`: needs a checkpoint, verified against its manifest, and run.json's settings equal to the
      description's (a run directory written before run.json existed is compared by the Trainer's config only).
    """
    out_dir = Path(out_dir)
    if resume and overwrite:
        raise ValueError("resume and overwrite: give one, not both")
    if out_dir.exists() and not out_dir.is_dir():
        raise ValueError(f"out_dir: {str(out_dir)!r} exists and is not a directory")
    present = holds_run(out_dir) if out_dir.is_dir() else []
    if not resume:
        if present and not overwrite:
            raise ValueError(f"out_dir: {str(out_dir)!r} already holds a run ({', '.join(present)}); continue it "
                             "with --resume (resume=True), replace it with --overwrite (overwrite=True: its files are "
                             "deleted first), or give another directory")
        return
    checkpoint = latest_checkpoint(out_dir)
    if checkpoint is None:
        raise ValueError(f"resume: no checkpoint in out_dir {str(out_dir)!r}")
    verify_checkpoint(checkpoint)
    if (out_dir / RUN_FILE).exists():
        differences = describe_differences(read_json(out_dir / RUN_FILE), description)
        if differences:
            raise ValueError(f"resume: the run in {str(out_dir)!r} differs in {'; '.join(differences)}; resume "
                             "with the stored settings, or train into another directory")


def start_run_dir(out_dir: str | Path, description: dict, *, overwrite: bool = False, config: str = "",
                  device: str = "cpu") -> None:
    """A fresh run's directory: with `overwrite`, the files of the run it held are deleted first; run.json,
    machine.json (`machine` on `device`) and, given its text, config.toml are written (atomically)."""
    out_dir = Path(out_dir)
    if overwrite:
        for name in holds_run(out_dir):
            path = out_dir / name
            shutil.rmtree(path) if path.is_dir() else path.unlink()
    out_dir.mkdir(parents=True, exist_ok=True)
    write_atomic(out_dir / RUN_FILE, json.dumps(description, indent=1))
    write_atomic(out_dir / MACHINE_FILE, json.dumps(machine(device), indent=1))
    if config:
        write_atomic(out_dir / CONFIG_FILE, config)


def warn_other_machine(out_dir: str | Path, device: str = "cpu") -> None:
    """A RuntimeWarning when the run in `out_dir` started on another kind of machine (machine.json; a directory
    without one, from before it was written, is not checked): the resumed run stays valid but no longer repeats bit
    for bit (module docstring)."""
    path = Path(out_dir) / MACHINE_FILE
    if not path.exists():
        return
    started, here = read_json(path), machine(device)
    differences = [f"{name} {started.get(name)!r} -> {value!r}" for name, value in here.items()
                   if started.get(name) != value]
    if differences:
        warnings.warn(f"resume: the run in {str(out_dir)!r} started on another machine ({'; '.join(differences)}); "
                      "it continues, but no longer repeats bit for bit", RuntimeWarning, stacklevel=3)


RUN_LOCK = ".lock"  # held by the process training in a run directory (`claimed_run_dir`)


class RunDirBusy(ValueError):
    """Another process is training in the run directory."""


@contextlib.contextmanager
def claimed_run_dir(out_dir: str | Path | None) -> Iterator[None]:
    """Holds `out_dir/.lock` (created with the directory) while a run trains there: a second process that tries to
    train into the same directory at the same time is refused (ValueError naming out_dir). None: nothing to hold."""
    if out_dir is None:
        yield
        return
    Path(out_dir).mkdir(parents=True, exist_ok=True)
    lock = RunLock(Path(out_dir) / RUN_LOCK)
    if not lock.acquire(block=False):
        raise RunDirBusy(f"out_dir: another process is training in {str(out_dir)!r}")
    try:
        yield
    finally:
        lock.release(remove=True)  # a later claimer re-checks the directory (check_run_dir) under the lock


def train_and_evaluate(
    run: Run, preset: Preset, *, out_dir: str | None = None, checkpoint_every: int | None = None,
    resume: bool = False, overwrite: bool = False, progress: bool = True, log: Callable[[str], None] | None = None,
    device: str = "cpu", cuda_graphs: bool = False,
) -> RunResult:
    """Trains and evaluates one run; also under torchrun, where every rank calls it and trains its share.

    out_dir receives run.json, metrics.jsonl, checkpoint/ (every `checkpoint_every` steps and at the end) and, once
    the run ends, model/ (LM.save_pretrained; not for a run that diverged, whose last finite state is its
    checkpoint). A directory that already holds a run is refused (ValueError) unless `resume` continues it (every
    setting equal to run.json's) or `overwrite` replaces it (`check_run_dir`), and so is one another process trains
    in (`claimed_run_dir`); nothing is written or deleted before the model and trainer are built. The ops' value
    checks are off while it trains (`regmem.ops.value_checks`): a NaN gate inside a diverging model is the
    Trainer's to skip, not bad input to refuse (they run on CPU tensors by default). `log`, if given, receives the
    resolved task, model and train configs as JSON before training; it, the checks of out_dir and the writing happen
    on rank 0 only. The run trains on the task's training split, evaluates (and stops early) on its validation split
    and, once training ends, scores the final model on its test split (`test_metrics`; tasks/base.py, `split_data`),
    all three from the run's seed. device: where the model trains ("cuda": cuda:LOCAL_RANK under torchrun); cuda_graphs:
    TrainConfig's option.
    """
    writes = out_dir is not None and distributed.is_main()
    if writes:
        description = describe_run(run, preset)
        check_run_dir(out_dir, description, resume=resume, overwrite=overwrite)  # nothing written yet
    task = build_task(run.task, preset, run.setting)
    model = build_model(run.mixer, preset, task.vocab_size, seed=run.seed).to(device)
    config = dataclasses.replace(build_train_config(
        preset, seed=run.seed, progress=progress, steps=run.steps, lr=run.lr, batch_size=run.batch_size,
        out_dir=out_dir, checkpoint_every=checkpoint_every, optimizer=run.optimizer,
    ), cuda_graphs=cuda_graphs)
    if log is not None and distributed.is_main():
        resolved = {"task": dataclasses.asdict(task.config), "model": model.config.to_dict(),
                    "train": config.to_dict()}
        log(json.dumps(resolved, indent=1))
    trainer = Trainer(model, config, train_data=split_data(task, "train", preset.num_train, seed=run.seed),
                      eval_data=split_data(task, "valid", preset.num_eval, seed=run.seed), metric=task.metric)
    start = time.perf_counter()
    with claimed_run_dir(out_dir if writes else None), value_checks(False):
        if writes:  # under the lock, the directory is checked again: another process may have run in it meanwhile
            check_run_dir(out_dir, description, resume=resume, overwrite=overwrite)
            if not resume:
                start_run_dir(out_dir, description, overwrite=overwrite, device=device,
                              config=config_text(resolved_config(run, preset, dataclasses.asdict(task.config))))
            else:
                warn_other_machine(out_dir, device)
        summary = trainer.fit(resume=resume)
        diverged = summary["diverged_at_step"] is not None
        # the test split is read once, by the model training ended with; nothing before this line sees it
        test_metrics = {} if diverged else trainer.evaluate(split_data(task, "test", preset.num_eval, seed=run.seed))
        if writes and not diverged:
            model.save_pretrained(Path(out_dir) / "model")
            tokenizer = getattr(task.config, "tokenizer_file", lambda: None)()
            if tokenizer is not None:  # `regmem generate` reads and writes text with it
                shutil.copyfile(tokenizer, Path(out_dir) / "model" / TOKENIZER_FILE)
    seconds = time.perf_counter() - start
    trained = summary["step"] - summary["start_step"]
    return RunResult(
        accuracy=0.0 if diverged else summary["metrics"]["accuracy"], parameters=model.num_parameters(),
        state_floats=model.state_floats(task.seq_len), train_seconds=seconds,
        tokens_per_second=trained * config.batch_size * task.seq_len / seconds, steps=summary["step"],
        metrics=summary["metrics"], test_metrics=test_metrics, stopped_early=summary["stopped_early"], model=model,
        diverged_at_step=summary["diverged_at_step"], divergence=summary["divergence"],
    )
