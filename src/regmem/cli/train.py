"""`regmem train`: train one mixer on one task (`Run`, experiments/runs.py); under torchrun, with DDP."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from regmem.cli.args import (
    add_device_options,
    assignment,
    check_device_options,
    mixer_name,
    mixers_help,
    positive_float,
    positive_int,
    preset_help,
    preset_name,
    task_help,
    task_name,
)


def add_train(commands) -> None:
    from regmem.train.optimizers import OPTIMIZERS

    parser = commands.add_parser("train", help="train one mixer on a task (runs under torchrun as well)")
    parser.add_argument("task", type=task_name, help=task_help())
    parser.add_argument("--mixer", required=True, type=mixer_name, help=mixers_help("mixer name"))
    parser.add_argument("--preset", type=preset_name, default="quick", help=preset_help())
    parser.add_argument("--set", dest="task_field", type=assignment, action="append", default=[], metavar="FIELD=VALUE",
                        help="task field override, repeatable, e.g. --set num_kv_pairs=16")
    parser.add_argument("--steps", type=positive_int, default=None, help="optimiser steps (default: the preset's)")
    parser.add_argument("--lr", type=positive_float, default=None, help="peak learning rate (default: the preset's)")
    parser.add_argument("--optimizer", choices=tuple(OPTIMIZERS), default="adamw",
                        help="adamw, or an optimiser of regmem.optim (Muon-family ones on 2-D hidden weights, AdamW "
                             "for the rest; tune --lr for it)")
    parser.add_argument("--batch-size", type=positive_int, default=None,
                        help="global batch (default: the preset's)")
    parser.add_argument("--mlp-lr-scale", type=positive_float, default=None,
                        help="AdamW's lr of the model's MLPs (FFN, Hope's CMS) is --lr times this (default: the "
                             "preset's: 0.1 at tiny, quick, small; 1 at quick-mlp)")
    parser.add_argument("--seed", type=int, default=0, help="seed of data, init and data order")
    parser.add_argument("--out-dir", default=None, help="metrics.jsonl, checkpoint/ and model/ go here")
    parser.add_argument("--checkpoint-every", type=positive_int, default=None, help="steps between checkpoints")
    parser.add_argument("--resume", action="store_true", help="continue from the checkpoint in --out-dir")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")
    add_device_options(parser)
    parser.set_defaults(handler=_train, parser=parser)


def _check(args, run, preset) -> None:
    """What the parser cannot check alone: the task fields of --set, and a checkpoint to resume from."""
    from regmem.experiments.runs import build_task
    from regmem.train import latest_checkpoint

    try:
        build_task(run.task, preset, run.setting)
    except (ValueError, TypeError) as err:
        args.parser.error(f"argument --set: {err}")
    if args.resume and args.out_dir is None:
        args.parser.error("argument --resume: needs --out-dir, the directory of the run to continue")
    check_device_options(args)
    if args.resume and latest_checkpoint(Path(args.out_dir)) is None:
        args.parser.error(f"argument --resume: no checkpoint in --out-dir {args.out_dir!r}")


def _train(args) -> None:
    from regmem.experiments.presets import PRESETS
    from regmem.experiments.runs import Run, train_and_evaluate
    from regmem.train import distributed

    run = Run(args.task, args.mixer, lr=args.lr, seed=args.seed, setting=dict(args.task_field), steps=args.steps,
              batch_size=args.batch_size, optimizer=args.optimizer)
    preset = PRESETS[args.preset]
    if args.mlp_lr_scale is not None:
        preset = dataclasses.replace(preset, mlp_lr_scale=args.mlp_lr_scale)
    _check(args, run, preset)
    result = train_and_evaluate(run, preset, out_dir=args.out_dir, checkpoint_every=args.checkpoint_every,
                                resume=args.resume, progress=not args.no_progress, log=print, device=args.device,
                                cuda_graphs=args.cuda_graphs)
    if distributed.is_main():
        done = f"step {result.steps}: {result.metrics}"
        print(done if result.divergence is None else f"diverged: {result.divergence}")
