"""`regmem train`: train one mixer on one task (`Run`, experiments/runs.py); under torchrun, with DDP.

The run directory follows `check_run_dir`'s rules (experiments/runs.py): a directory that holds a run is refused
unless --resume (every setting equal to its run.json) or --overwrite; without --out-dir a fresh directory
results/train-<task>-<mixer>-<time> is made and printed.
"""

from __future__ import annotations

import dataclasses
import datetime
import re
from pathlib import Path

from regmem.lab.cli.args import (
    ArgumentTypeError,
    add_config_options,
    add_device_options,
    assignment,
    check_builds_with,
    check_device_options,
    check_option_mixers,
    mixer_name,
    mixers_help,
    output_dir,
    positive_float,
    positive_int,
    preset_help,
    preset_name,
    run_config,
    seed,
    task_help,
    task_name,
)

# the commands of this module: name -> the line `regmem --help` shows (cli/__init__.py)
COMMANDS = {
    "train": "train one mixer on a task (runs under torchrun as well)",
}

RESULTS = Path("results")  # where a run without --out-dir goes, as compare's do


def add_train(commands) -> None:
    from regmem.train.optimizers import OPTIMIZERS

    parser = commands.add_parser("train", help=COMMANDS["train"])
    parser.add_argument("task", type=task_name, nargs="?", default=None,
                        help=task_help() + " (or `task = ...` in --config)")
    parser.add_argument("--mixer", type=mixer_name, default=None,
                        help=mixers_help("mixer name") + " (or `mixer = ...` in --config)")
    parser.add_argument("--preset", type=preset_name, default=None, help=preset_help() + " (default: quick)")
    add_config_options(parser)
    parser.add_argument("--set", dest="task_field", type=assignment, action="append", default=[], metavar="FIELD=VALUE",
                        help="task field override, repeatable, e.g. --set num_kv_pairs=16")
    parser.add_argument("--steps", type=positive_int, default=None, help="optimiser steps (default: the preset's)")
    parser.add_argument("--lr", type=positive_float, default=None, help="peak learning rate (default: the preset's)")
    parser.add_argument("--optimizer", choices=tuple(OPTIMIZERS), default=None,
                        help="adamw, or an optimiser of regmem.optim (Muon-family ones on 2-D hidden weights, AdamW "
                             "for the rest; tune --lr for it; default adamw)")
    parser.add_argument("--batch-size", type=positive_int, default=None,
                        help="global batch (default: the preset's)")
    parser.add_argument("--mlp-lr-scale", type=positive_float, default=None,
                        help="AdamW's lr of the model's MLPs (FFN, Hope's CMS) is --lr times this (default: the "
                             "preset's: 0.1 at tiny, quick, small; 1 at quick-mlp)")
    parser.add_argument("--seed", type=seed, default=None,
                        help="seed of data, init and data order, in [0, 2**63) (default 0)")
    parser.add_argument("--out-dir", type=output_dir, default=None,
                        help="run.json, metrics.jsonl, checkpoint/ and model/ go here; a directory that already holds "
                             "a run is refused unless --resume or --overwrite (default: a new "
                             "results/train-<task>-<mixer>-<time>, printed at the start)")
    parser.add_argument("--checkpoint-every", type=positive_int, default=None, help="steps between checkpoints")
    again = parser.add_mutually_exclusive_group()
    again.add_argument("--resume", action="store_true",
                       help="continue the run in --out-dir from its checkpoint (verified against its checksums); "
                            "every setting (task fields, preset, mixer, lr, steps, batch size, optimiser, seed) must "
                            "equal the stored run's, and a difference is refused by name: a finished run is not "
                            "extended by a longer --steps, since the warm-up and cosine schedule depend on it")
    again.add_argument("--overwrite", action="store_true",
                       help="train afresh into an --out-dir that holds a run, deleting that run's files first")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")
    add_device_options(parser)
    parser.set_defaults(handler=_train, parser=parser)


def _check(args, run, preset) -> None:
    """What the parser cannot check alone, before anything runs: the task fields of --set, the devices, and the run
    directory (`check_run_dir`: on rank 0, the one that writes)."""
    from regmem.lab.experiments.runs import build_task, check_run_dir, describe_run
    from regmem.train import distributed

    try:
        build_task(run.task, preset, run.setting)
    except (ValueError, TypeError) as err:
        args.parser.error(f"argument --set: {err}")
    check_device_options(args)
    ranks = distributed.world_size()
    batch = run.batch_size or preset.batch_size
    if batch % ranks:
        args.parser.error(f"argument --batch-size: the global batch {batch} does not divide over {ranks} ranks")
    if args.cuda_graphs and ranks > 1:
        args.parser.error(f"argument --cuda-graphs: needs one process, got {ranks} ranks")
    if args.out_dir is None:
        if args.resume:
            args.parser.error("argument --resume: needs --out-dir, the directory of the run to continue")
        if args.overwrite:
            args.parser.error("argument --overwrite: needs --out-dir, the directory of the run to replace")
        if ranks > 1:
            args.parser.error("argument --out-dir: needed under torchrun (every rank must name the same directory)")
        try:
            output_dir(str(RESULTS))
        except ArgumentTypeError as err:
            args.parser.error(f"argument --out-dir: not given, and the default's parent {RESULTS}: {err}")
        return
    if not distributed.is_main():
        return
    try:
        check_run_dir(args.out_dir, describe_run(run, preset), resume=args.resume, overwrite=args.overwrite)
    except ValueError as err:  # check_run_dir's messages start with the argument at fault
        text = str(err)
        flag = "--out-dir" if text.startswith("out_dir: ") else "--resume"
        args.parser.error(f"argument {flag}: {text.removeprefix('out_dir: ').removeprefix('resume: ')}")


def fresh_run_dir(task: str, mixer: str, parent: Path = RESULTS) -> Path:
    """A new directory results/train-<task>-<mixer>-<YYYYmmdd-HHMMSS>, or -2, -3, ... after it where that exists
    (a recipe mixer's name made safe for a path); made here, so that two commands started in the same second never
    share one."""
    stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
    base = parent / f"train-{task}-{re.sub(r'[^A-Za-z0-9_.-]+', '_', mixer)}-{stamp}"
    path, n = base, 1
    while True:
        try:
            path.mkdir(parents=True)
            return path
        except FileExistsError:
            n += 1
            path = base.with_name(f"{base.name}-{n}")


def resolve_run(args):
    """(Run, Preset) of `regmem train`: its --config under the command line's values (experiments/run_config.py);
    a config that does not resolve ends the command naming what is wrong."""
    from regmem.lab.experiments.run_config import resolve_preset
    from regmem.lab.experiments.runs import Run

    config = run_config(args, task=args.task, mixer=args.mixer, preset=args.preset, seed=args.seed,
                        task_config=dict(args.task_field))
    if config.task is None:
        args.parser.error("argument task: give a task, or `task = ...` in --config")
    if config.mixer is None:
        args.parser.error("argument --mixer: give a mixer, or `mixer = ...` in --config")
    try:
        task_name(config.task)
    except ArgumentTypeError as err:
        args.parser.error(f"argument --config: task: {err}")
    check_option_mixers(args, [config.mixer])
    try:
        preset = resolve_preset(config, [config.mixer])
    except ValueError as err:
        args.parser.error(f"argument {'--model' if str(err).startswith('model.') else '--mixer-opt'}: {err}")
    check_builds_with(args, preset, [config.mixer])
    train = config.train
    try:
        run = Run(config.task, config.mixer, lr=args.lr, seed=config.seed, setting=config.task_config,
                  steps=args.steps, batch_size=args.batch_size,
                  optimizer=args.optimizer or train.get("optimizer", "adamw"))
    except ValueError as err:
        args.parser.error(f"argument --config: {err}")
    return run, preset


def _train(args) -> None:
    from regmem.lab.experiments.runs import RunDirBusy, train_and_evaluate
    from regmem.train import distributed

    run, preset = resolve_run(args)
    if args.mlp_lr_scale is not None:
        preset = dataclasses.replace(preset, mlp_lr_scale=args.mlp_lr_scale)
    _check(args, run, preset)
    out_dir = args.out_dir
    if out_dir is None:
        out_dir = str(fresh_run_dir(run.task, run.mixer))
        print(f"run directory: {out_dir}")
    try:
        result = train_and_evaluate(run, preset, out_dir=out_dir, checkpoint_every=args.checkpoint_every,
                                    resume=args.resume, overwrite=args.overwrite, progress=not args.no_progress,
                                    log=print, device=args.device, cuda_graphs=args.cuda_graphs)
    except RunDirBusy as err:  # a race the checks before cannot see: another command started in the same directory
        args.parser.error(f"argument --out-dir: {str(err).removeprefix('out_dir: ')}")
    if distributed.is_main():
        done = f"step {result.steps}: validation {result.metrics}; test {result.test_metrics}"
        print(done if result.divergence is None else f"diverged: {result.divergence}")
        print(f"wrote {out_dir}")
