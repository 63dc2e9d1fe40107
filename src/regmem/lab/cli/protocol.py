"""`regmem compare` and `regmem suite`: mixers trained under the fair protocol (experiments/protocol.py: an lr grid
or tuned lr per mixer, several seeds, resumable runs) on one task or on many."""

from __future__ import annotations

import argparse
from pathlib import Path

from regmem.lab.cli.args import (
    ArgumentTypeError,
    add_config_options,
    add_device_options,
    check_builds_with,
    check_device_options,
    check_option_mixers,
    mixer_list,
    mixers_help,
    name_list,
    names_among,
    non_negative_int,
    output_dir,
    output_json,
    positive_float_list,
    positive_int,
    positive_int_list,
    preset_help,
    preset_name,
    run_config,
    seed_list,
    task_help,
    task_name,
)

# the commands of this module: name -> the line `regmem --help` shows (cli/__init__.py)
COMMANDS = {
    "compare": "train several mixers on one task, fairly; write a leaderboard",
    "suite": "many tasks, one table: every mixer on every task, fairly",
}

COMPARE_MIXERS = ["attn", "linear", "retnet", "mamba2", "gla"]  # what compare and suite train without --mixers
SUITE_MIXERS = ["attn", "linear", "gla", "gated_deltanet"]


def task_or_group_list(text: str) -> list[str]:
    """Comma-separated task names and groups (regmem.tasks.TASK_GROUPS), kept as given."""
    from regmem.tasks import TASK_GROUPS, TASKS

    return names_among([*TASKS, *TASK_GROUPS])(text)


def run_directory_list(text: str) -> list[str]:
    """Comma-separated run directories, each holding the runs/ of an earlier sweep (checked as RunStore does)."""
    from regmem.lab.experiments.protocol import missing_run_dirs

    dirs = name_list(text)
    missing = missing_run_dirs(dirs)
    if missing:
        raise ArgumentTypeError(f"no runs/ directory in {', '.join(missing)}")
    return dirs


def _add_protocol_options(parser: argparse.ArgumentParser) -> None:
    from regmem.lab.experiments.protocol import LR_GRID, SEEDS

    parser.add_argument("--preset", type=preset_name, default=None, help=preset_help() + " (default: quick)")
    add_config_options(parser)
    parser.add_argument("--seeds", type=seed_list, default=list(SEEDS),
                        help="comma-separated seeds of data, init and data order; the leaderboard shows their mean "
                             f"and min-max (default: {','.join(map(str, SEEDS))})")
    lrs = parser.add_mutually_exclusive_group()
    lrs.add_argument("--lrs", type=positive_float_list, default=None,
                     help="learning-rate grid, e.g. 1e-3,3e-3,1e-2: each mixer is reported at its best "
                          "(default: its tuned lr for the preset, else the preset's)")
    lrs.add_argument("--sweep-lr", action="store_true",
                     help=f"re-run the lr sweep over the grid {','.join(map(str, LR_GRID))} (--lrs with that grid)")
    parser.add_argument("--extend-grid", type=non_negative_int, default=0, metavar="N",
                        help="where a mixer's best lr is an edge of the grid (of >= 2 lrs), train up to N more points "
                             "past it at the grid's own spacing, one at a time, until the grid brackets the best "
                             "(default 0: the grid as given)")
    parser.add_argument("--no-progress", action="store_true", help="no progress bars")
    parser.add_argument("--workers", type=positive_int, default=1,
                        help="runs trained at once, each in its own process with one torch thread (e.g. 2 on a "
                             "2-core CPU)")
    add_device_options(parser)


def _protocol_inputs(args, default_mixers: list[str], task: str | None = None) -> tuple:
    """(preset, lr grid or None) of compare and suite, and their mixers: the preset under --config, --model and
    --mixer-opt (experiments/run_config.py). From the file they take its preset, model, mixer options, budget and
    (compare) task fields; --mixers, --seeds and the lr grid are their own flags, with the file's mixer and lr where
    --mixers and --lrs are not given. Sets args.mixers."""
    from regmem.lab.experiments.protocol import LR_GRID
    from regmem.lab.experiments.run_config import resolve_preset
    from regmem.lab.experiments.runs import with_task_fields

    config = run_config(args, preset=args.preset)
    if config.train.get("optimizer", "adamw") != "adamw":
        args.parser.error("argument --config: train.optimizer: compare and suite train with adamw (another "
                          "optimiser is `regmem train --optimizer`)")
    if config.task_config and task is None:
        args.parser.error("argument --config: [task_config]: suite trains several tasks; give task fields to "
                          "`regmem compare`")
    args.mixers = args.mixers or ([config.mixer] if config.mixer else default_mixers)
    check_option_mixers(args, args.mixers)
    try:
        preset = resolve_preset(config, args.mixers)
    except ValueError as err:
        args.parser.error(f"argument {'--model' if str(err).startswith('model.') else '--mixer-opt'}: {err}")
    try:
        preset = with_task_fields(preset, task, config.task_config) if task else preset
    except (ValueError, TypeError) as err:
        args.parser.error(f"argument --config: [task_config]: {err}")
    check_builds_with(args, preset, args.mixers)
    lrs = list(LR_GRID) if args.sweep_lr else args.lrs or ([config.train["lr"]] if "lr" in config.train else None)
    return preset, lrs


def add_compare(commands) -> None:
    parser = commands.add_parser("compare", help=COMMANDS["compare"])
    parser.add_argument("task", type=task_name, help=task_help())
    parser.add_argument("--mixers", type=mixer_list, default=None,
                        help=mixers_help("comma-separated mixer names") + f" (default: {','.join(COMPARE_MIXERS)})")
    parser.add_argument("--sweep", default=None, help="a task field and values, e.g. num_kv_pairs=4,8,16")
    _add_protocol_options(parser)
    parser.add_argument("--out-dir", type=output_dir, default="results",
                        help="parent of the <task>-<timestamp> directory")
    parser.add_argument("--run-dir", type=output_dir, default=None,
                        help="write here instead; an existing run directory resumes (finished runs are skipped; "
                             "more mixers, seeds, lrs or swept values may be added), but one of another task, preset "
                             "or swept field is refused; two commands on one directory share its runs (each run is "
                             "trained once, under a lock)")
    parser.add_argument("--save-tuned", type=output_json, default=None, metavar="PATH",
                        help="write each mixer's best lr at each swept setting into this tuned-lr table (the "
                             "committed one is src/regmem/lab/experiments/tuned_lr.json; read back for that setting)")
    parser.add_argument("--eval-lengths", type=positive_int_list, default=(), metavar="T1,T2",
                        help="also score every run at these sequence lengths (the length-generalisation split of "
                             "a task with a seq_len, e.g. 32,64 for s5 trained at 16); the leaderboard adds them")
    parser.add_argument("--by-position", action="store_true",
                        help="also score every run on the test split by position in the context (by needle depth "
                             "for a needle task, else by eighths of the sequence); the leaderboard adds each "
                             "mixer's curve and positions.png draws it; a mixer with a CMS (hope, hope_attention) "
                             "is also scored with its CMS frozen at test")
    parser.set_defaults(handler=_compare, parser=parser)


def _check_run_dir(args, settings: dict, run_dir: str | Path) -> None:
    """An existing run directory must hold a sweep of the same settings (protocol.check_sweep_dir)."""
    from regmem.lab.experiments.protocol import check_sweep_dir

    try:
        check_sweep_dir(run_dir, settings)
    except ValueError as err:
        args.parser.error(f"argument --run-dir: {err}")


def _compare(args) -> None:
    """Checks everything once (`plan_compare`: a bad argument is an error under its flag before anything runs),
    then runs the plan."""
    from regmem.lab.experiments.compare import PlanError, plan_compare, run_compare

    preset, lrs = _protocol_inputs(args, COMPARE_MIXERS, task=args.task)
    check_device_options(args)
    try:
        plan = plan_compare(args.task, args.mixers, preset, sweep=args.sweep, seeds=args.seeds, lrs=lrs,
                            out_dir=args.out_dir, run_dir=args.run_dir, eval_lengths=tuple(args.eval_lengths))
    except PlanError as err:
        flag = "task" if err.argument == "task" else "--" + err.argument.replace("_", "-")
        args.parser.error(f"argument {flag}: {str(err).removeprefix(err.argument + ': ')}")
    run_compare(plan, progress=not args.no_progress, workers=args.workers, save_tuned_to=args.save_tuned,
                device=args.device, cuda_graphs=args.cuda_graphs, extend_grid=args.extend_grid,
                by_position=args.by_position)


def add_suite(commands) -> None:
    from regmem.tasks import TASK_GROUPS

    groups = ", ".join(f"{g} ({'/'.join(names)})" for g, names in TASK_GROUPS.items()) or "none"
    parser = commands.add_parser("suite", help=COMMANDS["suite"])
    parser.add_argument("--tasks", type=task_or_group_list, default=["mqar", "s5"],
                        help=f"comma-separated tasks or groups: {task_help().removeprefix('task name: ')}; groups: "
                             f"{groups}")
    parser.add_argument("--mixers", type=mixer_list, default=None,
                        help=mixers_help("comma-separated mixer names") + f" (default: {','.join(SUITE_MIXERS)})")
    _add_protocol_options(parser)
    parser.add_argument("--run-dir", type=output_dir, default=None,
                        help="where runs and tables go (default results/suite-<preset>); repeating the command "
                             "with the same directory skips the finished runs (more tasks, mixers, seeds or lrs may "
                             "be added; a directory of another preset is refused; two commands on one directory "
                             "share its runs, each trained once)")
    parser.add_argument("--reuse-runs", type=run_directory_list, default=[], metavar="DIR,...",
                        help="run directories of earlier sweeps, read only: their finished runs (same preset, task, "
                             "mixer, lr, seed) are not trained again, e.g. one committed sweep per task")
    parser.add_argument("--save-tuned", type=output_json, default=None, metavar="PATH",
                        help="write each mixer's best lr per task into this tuned-lr table (the committed one is "
                             "src/regmem/lab/experiments/tuned_lr.json)")
    parser.set_defaults(handler=_suite, parser=parser)


def _suite(args) -> None:
    from regmem.lab.experiments.suite import default_run_dir, suite, suite_settings

    preset, lrs = _protocol_inputs(args, SUITE_MIXERS)
    check_device_options(args)
    if args.run_dir is None:
        try:
            output_dir(str(default_run_dir(preset)))
        except ArgumentTypeError as err:
            args.parser.error(f"argument --run-dir: default {default_run_dir(preset)}: {err}")
    _check_run_dir(args, suite_settings(preset), args.run_dir or default_run_dir(preset))
    suite(args.tasks, args.mixers, preset, seeds=args.seeds, lrs=lrs, run_dir=args.run_dir,
          save_tuned_to=args.save_tuned, reuse=args.reuse_runs, progress=not args.no_progress, workers=args.workers,
          device=args.device, cuda_graphs=args.cuda_graphs, extend_grid=args.extend_grid)
