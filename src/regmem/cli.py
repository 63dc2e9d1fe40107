"""The `regmem` command line: one argparse parser, one subcommand per job.

    regmem compare mqar|s5 ...  train several mixers fairly (lr grid or tuned lr, seeds); leaderboard and plot
    regmem suite --tasks ...    every mixer on many tasks: a mixers x tasks leaderboard and heat map, resumable
    regmem train mqar|text ...  train one mixer (also under torchrun: DDP)
    regmem generate MODEL_DIR   continue a prompt with a model trained on text
    regmem recipes              the design space: each op / model with its recipe, and what Recipe.build() builds
    regmem levels --model hope  a model's levels (Nested Learning): which tensors update how often, in which order
    regmem analyze snr          retrieval SNR per kernel (measured, exact, paper) and capacity curves of the ops
    regmem bench ops            time ops and forms; write benchmarks/results/<date>-ops.{json,md}
    regmem bench decode         one decoding step's latency against the context length
    regmem bench layers         whole layers (deep memories) beside public code (titans-pytorch)
    regmem bench snr            the time of the retrieval-SNR Monte-Carlo estimator (target: < 5 s, one thread)
    regmem bench optim          one optimiser step: M3 vs Muon, delta / deep momentum vs SGD momentum
    regmem repro NAME           reproduce a paper's figure or table (ttr-mqar, nl-mad, ...): claim beside result
    regmem showcase             a short tour: every op, its three forms agreeing, and their speed
"""

from __future__ import annotations

import argparse
import datetime
from pathlib import Path

import torch

_PRESET_HELP = "tiny | quick | small (derived from d_model) | quick-mlp (quick with two blocks of mixer + SwiGLU)"
DTYPES = {"float32": torch.float32, "float64": torch.float64, "bfloat16": torch.bfloat16}


def _mixer_names() -> list[str]:
    from regmem.layers import MIXERS

    return list(MIXERS)


def _task_help() -> str:
    from regmem.tasks import TASKS

    return f"task name: {', '.join(TASKS)}"


def _group_help() -> str:
    from regmem.tasks import TASK_GROUPS

    return ", ".join(f"{g} ({'/'.join(names)})" for g, names in TASK_GROUPS.items()) or "none"


def _int_list(text: str) -> list[int]:
    return [int(x) for x in text.split(",") if x]


def _float_list(text: str) -> list[float]:
    return [float(x) for x in text.split(",") if x]


def _name_list(text: str) -> list[str]:
    return [x for x in text.split(",") if x]


def _require_known(flag: str, given, known: list) -> None:
    """Exits naming `flag` and the choices when an item of `given` is not in `known`."""
    unknown = [item for item in given if item not in known]
    if unknown:
        raise SystemExit(f"{flag}: unknown {unknown}; known: {known}")


def _cmd_recipes(args) -> None:
    from regmem.layers import how_it_builds
    from regmem.recipe import entries, format_table

    lines = format_table().splitlines()
    lines[0] += " builds |"
    lines[1] += "---|"
    lines[2:] = [f"{line} {how_it_builds(e.recipe)} |" for line, e in zip(lines[2:], entries(), strict=True)]
    print("\n".join(lines))
    print("\n'builds': the mixer `Recipe.build()` returns at that point ('engine': the test-time-training engine, "
          "regmem.ops.ttt). Any point (uniform, linear | mlp, gd_step | sgd | sgd_weight_decay | sgd_momentum | dgd) "
          "builds, e.g. `regmem compare mqar --mixers recipe:uniform/linear/dgd`.")


OPTIMIZERS = {"adamw": lambda params: torch.optim.AdamW(params),
              "sgd": lambda params: torch.optim.SGD(params, lr=0.1, momentum=0.9), "none": lambda params: None}


def _cmd_levels(args) -> None:
    from regmem.models import LM, LMConfig
    from regmem.nested import describe_levels, format_levels

    if Path(args.model).is_dir():
        model = LM.from_pretrained(args.model)
    else:
        ffn = args.ffn or ("none" if args.model in ("hope", "hope_attention") else "swiglu")
        try:
            model = LM(LMConfig(vocab_size=256, d_model=args.d_model, n_layers=args.n_layers,
                                n_heads=max(args.d_model // 16, 1), mixer=args.model, ffn=ffn))
        except ValueError as err:
            raise SystemExit(str(err)) from None
    config = model.config
    print(f"levels of an LM: mixer {config.mixer}, ffn {config.ffn}, {config.n_layers} layer(s), d_model "
          f"{config.d_model}; optimiser {args.optimizer} (Nested Learning, arXiv:2512.24695, Definition 2)\n")
    print(format_levels(describe_levels(model, OPTIMIZERS[args.optimizer](model.parameters()))))


def _cmd_bench_ops(args) -> None:
    from regmem.bench import ALL_CASES, EXTERNAL_CASES, run, targets_table, write
    from regmem.bench.external import load_fla_file

    _require_known("--ops", args.ops, sorted(ALL_CASES))
    if any(c in EXTERNAL_CASES for c in args.ops):
        try:
            load_fla_file("ops/gated_delta_rule/naive.py")
        except ImportError as err:
            raise SystemExit(f"--ops: {err}") from None
    torch.set_num_threads(args.threads or torch.get_num_threads())
    result = run(
        args.ops, args.forms, args.seq_lens, batch=args.batch, heads=args.heads, head_dim=args.head_dim,
        chunk_size=args.chunk_size, dtype=DTYPES[args.dtype], min_run_time=args.min_run_time, memory=args.memory,
        max_token_loop_len=args.max_token_loop_len,
    )
    stem = f"{datetime.date.today().isoformat()}-ops"
    json_path, md_path = write(result, Path(args.out_dir), stem)
    print(f"\n{targets_table(result)}\n\nwrote {json_path} and {md_path}")


def _write_bench(result: dict, table: str, out_dir: str, kind: str) -> None:
    """Writes a bench result as <out_dir>/<date>-<kind>.{json,md} and prints its table."""
    from regmem.bench import write

    json_path, md_path = write(result, Path(out_dir), f"{datetime.date.today().isoformat()}-{kind}", table)
    print(f"\n{table}\n\nwrote {json_path} and {md_path}")


def _cmd_bench_decode(args) -> None:
    from regmem.bench import CASES, decode_table, run_decode

    _require_known("--ops", args.ops, sorted(CASES))
    torch.set_num_threads(args.threads or torch.get_num_threads())
    result = run_decode(args.ops, args.context_lens, batch=args.batch, heads=args.heads, head_dim=args.head_dim,
                        dtype=DTYPES[args.dtype], min_run_time=args.min_run_time)
    table = decode_table(result)
    _write_bench(result, table, args.out_dir, "decode")


def _cmd_bench_layers(args) -> None:
    from regmem.bench import LAYER_CASES, PASSES, layers_table, run_layers

    _require_known("--layers", args.layers, sorted(LAYER_CASES))
    _require_known("--passes", args.passes, list(PASSES))
    torch.set_num_threads(args.threads or torch.get_num_threads())
    try:
        result = run_layers(args.layers, args.seq_lens, batch=args.batch, heads=args.heads, head_dim=args.head_dim,
                            min_run_time=args.min_run_time, passes=args.passes)
    except ImportError as err:
        raise SystemExit(f"--layers: {err}") from None
    table = layers_table(result)
    _write_bench(result, table, args.out_dir, "layers")


def _cmd_bench_snr(args) -> None:
    from regmem.analysis import KERNELS
    from regmem.bench import run_snr_timing, snr_timing_table

    _require_known("--kernels", args.kernels, list(KERNELS))
    torch.set_num_threads(args.threads)
    result = run_snr_timing(args.kernels, trials=args.trials, min_run_time=args.min_run_time)
    table = snr_timing_table(result)
    _write_bench(result, table, args.out_dir, "snr")


def _cmd_bench_optim(args) -> None:
    from regmem.bench.optim import MODELS, optim_timing_table, run_optim_timing

    _require_known("--models", args.models, list(MODELS))
    torch.set_num_threads(args.threads)
    result = run_optim_timing(args.models, args.optimizers, min_run_time=args.min_run_time)
    table = optim_timing_table(result)
    _write_bench(result, table, args.out_dir, "optim")


def _cmd_analyze_snr(args) -> None:
    from regmem.experiments.analyze import analyze_snr

    if args.trials is not None and args.trials < 1:
        raise SystemExit(f"--trials must be >= 1, got {args.trials}")
    analyze_snr(args.out_dir, trials=args.trials, seed=args.seed, quick=args.quick)


def _preset(name: str):
    from regmem.experiments.presets import PRESETS

    if name not in PRESETS:
        raise SystemExit(f"--preset: unknown {name!r}; known: {sorted(PRESETS)}")
    return PRESETS[name]


def _lrs(args) -> list[float] | None:
    from regmem.experiments.protocol import LR_GRID

    if args.lrs and args.sweep_lr:
        raise SystemExit("--lrs and --sweep-lr: give one (--sweep-lr is --lrs " + ",".join(map(str, LR_GRID)) + ")")
    return list(LR_GRID) if args.sweep_lr else args.lrs


def _cmd_compare(args) -> None:
    from regmem.experiments.compare import compare

    compare(args.task, args.mixers, _preset(args.preset), sweep=args.sweep, seeds=args.seeds, lrs=_lrs(args),
            out_dir=args.out_dir, run_dir=args.run_dir, progress=not args.no_progress, workers=args.workers)


def _cmd_suite(args) -> None:
    from regmem.experiments.suite import suite

    try:
        suite(args.tasks, args.mixers, _preset(args.preset), seeds=args.seeds, lrs=_lrs(args), run_dir=args.run_dir,
              save_tuned_to=args.save_tuned, reuse=args.reuse_runs, progress=not args.no_progress,
              workers=args.workers)
    except ValueError as err:
        raise SystemExit(str(err)) from None


def _add_protocol_options(parser: argparse.ArgumentParser) -> None:
    from regmem.experiments.protocol import LR_GRID, SEEDS

    grid = ",".join(map(str, LR_GRID))
    parser.add_argument("--seeds", type=_int_list, default=list(SEEDS),
                        help="comma-separated seeds of data, init and data order; the leaderboard shows their mean "
                             f"and min-max (default: {','.join(map(str, SEEDS))})")
    parser.add_argument("--lrs", type=_float_list, default=None,
                        help="learning-rate grid, e.g. 1e-3,3e-3,1e-2: each mixer is reported at its best "
                             "(default: its tuned lr for the preset, else the preset's)")
    parser.add_argument("--sweep-lr", action="store_true", help=f"re-run the lr sweep over the grid {grid}")
    parser.add_argument("--no-progress", action="store_true", help="no progress bars")
    parser.add_argument("--workers", type=int, default=1,
                        help="runs trained at once, each in its own process with one torch thread (e.g. 2 on a "
                             "2-core CPU)")


def _cmd_train(args) -> None:
    from regmem.experiments.runs import Run, train_and_evaluate
    from regmem.train import distributed

    overrides = dict(_parse_assignment(a) for a in args.task_field)
    run = Run(args.task, args.mixer, lr=args.lr, seed=args.seed, setting=overrides, steps=args.steps,
              batch_size=args.batch_size, optimizer=args.optimizer)
    result = train_and_evaluate(run, _preset(args.preset), out_dir=args.out_dir,
                                checkpoint_every=args.checkpoint_every, resume=args.resume,
                                progress=not args.no_progress, log=print)
    if distributed.is_main():
        print(f"step {result.steps}: {result.metrics}")


def _parse_assignment(text: str) -> tuple[str, int | float | str]:
    if "=" not in text:
        raise SystemExit(f"--set expects FIELD=VALUE, got {text!r}")
    key, value = text.split("=", 1)
    for kind in (int, float):
        try:
            return key.replace("-", "_"), kind(value)
        except ValueError:
            pass
    return key.replace("-", "_"), {"true": True, "false": False}.get(value.lower(), value)


def _cmd_generate(args) -> None:
    from regmem.experiments.text import generate_text

    try:
        text = generate_text(args.model_dir, args.prompt, max_new_bytes=args.max_new_bytes,
                             temperature=args.temperature, top_k=args.top_k, seed=args.seed)
    except ValueError as err:
        raise SystemExit(str(err)) from None
    print(args.prompt + text)


def _cmd_showcase(args) -> None:
    from regmem.experiments.showcase import showcase

    showcase(seq_len=args.seq_len)


def _cmd_repro(args) -> None:
    from regmem.experiments.repro import run_repro

    overrides = dict(_parse_assignment(text) for text in args.settings)
    variant = "quick" if args.quick else "full" if args.full else "default"
    run_repro(args.name, args.out_dir, variant=variant, overrides=overrides, progress=variant != "quick")


def build_parser() -> argparse.ArgumentParser:
    from regmem.bench import CASES, EXTERNAL_CASES
    from regmem.experiments.repro import REPROS
    from regmem.train.optimizers import OPTIMIZERS as TRAIN_OPTIMIZERS

    parser = argparse.ArgumentParser(
        prog="regmem",
        description="regmem: sequence models built on associative memory (test-time regression). Mixers include "
                    "linear and gated memories, delta rules, exact regression, HLA, Mamba-1 (mamba) and Mamba-2, and "
                    "deep memories fitted by test-time training (ttt_linear, ttt_mlp, titans_mlp, "
                    "self_modifying_titans), Nested Learning's Hope and the Continuum Memory System (ffn=cms), and "
                    "an LSTM; any point of the design space builds as recipe:<weights>/<regressor>/<solver>.",
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    recipes = commands.add_parser("recipes", help="the design space and what Recipe.build() builds at each point")
    recipes.set_defaults(func=_cmd_recipes)

    levels = commands.add_parser("levels", help="each tensor's update frequency (Nested Learning's levels)")
    levels.add_argument("--model", required=True, help="a mixer name (hope, hope_attention, attn, ...) or a "
                        "checkpoint directory (save_pretrained)")
    levels.add_argument("--ffn", choices=("swiglu", "cms", "none"), default=None,
                        help="the FFN of a named model (default: none for hope/hope_attention, else swiglu)")
    levels.add_argument("--d-model", type=int, default=64, help="width of a named model")
    levels.add_argument("--n-layers", type=int, default=2, help="layers of a named model")
    levels.add_argument("--optimizer", choices=tuple(OPTIMIZERS), default="adamw",
                        help="the outer optimiser whose state is listed as a level")
    levels.set_defaults(func=_cmd_levels)

    analyze = commands.add_parser("analyze", help="analyses of associative memory (arXiv:2505.19488)")
    analyze_kinds = analyze.add_subparsers(dest="kind", required=True, metavar="KIND")
    snr = analyze_kinds.add_parser("snr", help="retrieval SNR per kernel and capacity curves of the ops")
    snr.add_argument("--out-dir", default="results/analyze-snr", help="where the report, JSON and plot go")
    snr.add_argument("--trials", type=int, default=None,
                     help="Monte-Carlo trials per table row (default: 400, or 50 with --quick)")
    snr.add_argument("--seed", type=int, default=0, help="seed of the random keys and values")
    snr.add_argument("--quick", action="store_true", help="a seconds-long smoke run with few trials and points")
    snr.set_defaults(func=_cmd_analyze_snr)

    bench = commands.add_parser("bench", help="benchmarks (results under benchmarks/results/)")
    bench_kinds = bench.add_subparsers(dest="kind", required=True, metavar="KIND")
    ops = bench_kinds.add_parser("ops", help="time forward and forward+backward of ops and forms")
    ops.add_argument("--ops", type=_name_list, default=["linear_attn", "gla_scalar", "gla_diagonal"],
                     help=f"comma-separated cases: {', '.join(CASES)}; to compare against public code (pip install "
                          f"'regmem[bench]'): {', '.join(EXTERNAL_CASES)}")
    ops.add_argument("--forms", type=_name_list, default=["chunk", "recurrent"],
                     help="comma-separated forms: chunk, recurrent, reference (reference is O(T^2) memory)")
    ops.add_argument("--seq-lens", type=_int_list, default=[1024, 4096, 16384], help="comma-separated T values")
    ops.add_argument("--batch", type=int, default=1, help="batch size B")
    ops.add_argument("--heads", type=int, default=4, help="heads H")
    ops.add_argument("--head-dim", type=int, default=64, help="key and value dim per head (K = V)")
    ops.add_argument("--chunk-size", type=int, default=64, help="chunk size of the chunk form")
    ops.add_argument("--dtype", choices=sorted(DTYPES), default="float32", help="input dtype")
    ops.add_argument("--min-run-time", type=float, default=1.0, help="seconds of timed runs per measurement")
    ops.add_argument("--max-token-loop-len", type=int, default=None,
                     help="time the recurrent and reference forms only up to this T (a token loop's time is linear "
                          "in T; the chunk form still runs at every T)")
    ops.add_argument("--memory", action="store_true",
                     help="also measure each call's peak memory, once, in a fresh process (slower)")
    ops.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's own choice)")
    ops.add_argument("--out-dir", default="benchmarks/results", help="where the JSON and markdown go")
    ops.set_defaults(func=_cmd_bench_ops)
    decode = bench_kinds.add_parser(
        "decode", help="time one decoding step (recurrent form, one token) after contexts of growing length")
    decode.add_argument("--ops", type=_name_list, default=["hla2", "ahla", "linear_attn", "softmax_attn"],
                        help="comma-separated cases of `bench ops` (kernel_regression's prefill is O(T^3))")
    decode.add_argument("--context-lens", type=_int_list, default=[1024, 4096, 16384],
                        help="comma-separated context lengths T")
    decode.add_argument("--batch", type=int, default=1, help="batch size B")
    decode.add_argument("--heads", type=int, default=4, help="heads H")
    decode.add_argument("--head-dim", type=int, default=64, help="key and value dim per head (K = V)")
    decode.add_argument("--dtype", choices=sorted(DTYPES), default="float32", help="input dtype")
    decode.add_argument("--min-run-time", type=float, default=1.0, help="seconds of timed runs per measurement")
    decode.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's own choice)")
    decode.add_argument("--out-dir", default="benchmarks/results", help="where the JSON and markdown go")
    decode.set_defaults(func=_cmd_bench_decode)
    layers = bench_kinds.add_parser("layers", help="time whole mixer layers (forward, forward+backward, one decoding "
                                                   "step after T tokens), beside public implementations "
                                                   "(titans-pytorch: pip install 'regmem[bench]')")
    layers.add_argument("--layers", type=_name_list, default=["titans_mlp", "titans_pytorch", "titans_pytorch_b16"],
                        help="comma-separated cases: titans_mlp, ttt_mlp, ttt_linear, self_modifying_titans, mamba, "
                             "hope, gated_deltanet, cms (3 levels, chunks 16/64/256), swiglu (the LM's FFN) "
                             "(regmem), titans_pytorch, titans_pytorch_b16 (lucidrains' NeuralMemory, batch_size None "
                             "or 16)")
    layers.add_argument("--passes", type=_name_list, default=["fwd", "fwdbwd", "step"],
                        help="comma-separated passes: fwd, fwdbwd, step (one decoding token after a T-token prefill; "
                             "regmem's layers only)")
    layers.add_argument("--seq-lens", type=_int_list, default=[1024, 4096], help="comma-separated T values")
    layers.add_argument("--batch", type=int, default=1, help="batch size B")
    layers.add_argument("--heads", type=int, default=4, help="heads H")
    layers.add_argument("--head-dim", type=int, default=64, help="dim per head (d_model = heads x head_dim)")
    layers.add_argument("--min-run-time", type=float, default=1.0, help="seconds of timed runs per measurement")
    layers.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's own choice)")
    layers.add_argument("--out-dir", default="benchmarks/results", help="where the JSON and markdown go")
    layers.set_defaults(func=_cmd_bench_layers)
    snr_timing = bench_kinds.add_parser("snr", help="time the retrieval-SNR estimator (target: < 5 s, one thread)")
    snr_timing.add_argument("--kernels", type=_name_list, default=["linear", "exp"],
                            help="comma-separated kernels: linear, relu, exp, solu, round")
    snr_timing.add_argument("--trials", type=int, default=400, help="Monte-Carlo trials per call")
    snr_timing.add_argument("--min-run-time", type=float, default=1.0, help="seconds of timed runs per kernel")
    snr_timing.add_argument("--threads", type=int, default=1, help="torch threads (the target is for one)")
    snr_timing.add_argument("--out-dir", default="benchmarks/results", help="where the JSON and markdown go")
    snr_timing.set_defaults(func=_cmd_bench_snr)
    optim_timing = bench_kinds.add_parser("optim", help="time one step of regmem.optim optimisers beside torch.optim")
    optim_timing.add_argument("--models", type=_name_list, default=["lm-4x256", "mlp-1M"],
                              help="comma-separated: lm-4x256 (4-layer d_model 256 LM), mlp-1M")
    optim_timing.add_argument("--optimizers", type=_name_list,
                              default=["sgd_momentum", "delta_momentum", "deep_momentum", "adamw", "muon",
                                       "muon_memory", "muon_memory_fp32", "m3"],
                              help="comma-separated optimisers (bench/optim.py)")
    optim_timing.add_argument("--min-run-time", type=float, default=1.0, help="seconds of timed steps per case")
    optim_timing.add_argument("--threads", type=int, default=1, help="torch threads")
    optim_timing.add_argument("--out-dir", default="benchmarks/results", help="where the JSON and markdown go")
    optim_timing.set_defaults(func=_cmd_bench_optim)

    compare = commands.add_parser("compare", help="train several mixers on one task, fairly; write a leaderboard")
    compare.add_argument("task", help=_task_help())
    compare.add_argument("--mixers", type=_name_list, default=["attn", "linear", "retnet", "mamba2", "gla"],
                         help=f"comma-separated mixer names: {', '.join(_mixer_names())}; or "
                              "recipe:<weights>/<regressor>/<solver> (see `regmem recipes`)")
    compare.add_argument("--preset", default="quick", help=_PRESET_HELP)
    compare.add_argument("--sweep", default=None, help="a task field and values, e.g. num_kv_pairs=4,8,16")
    _add_protocol_options(compare)
    compare.add_argument("--out-dir", default="results", help="parent of the <task>-<timestamp> directory")
    compare.add_argument("--run-dir", default=None,
                         help="write here instead; an existing run directory resumes (finished runs are skipped)")
    compare.set_defaults(func=_cmd_compare)

    suite = commands.add_parser("suite", help="many tasks, one table: every mixer on every task, fairly")
    suite.add_argument("--tasks", type=_name_list, default=["mqar", "s5"],
                       help="comma-separated tasks or groups: " + _task_help().removeprefix("task name: ")
                            + "; groups: " + _group_help())
    suite.add_argument("--mixers", type=_name_list, default=["attn", "linear", "gla", "gated_deltanet"],
                       help=f"comma-separated mixer names: {', '.join(_mixer_names())}; or "
                              "recipe:<weights>/<regressor>/<solver> (see `regmem recipes`)")
    suite.add_argument("--preset", default="quick", help=_PRESET_HELP)
    _add_protocol_options(suite)
    suite.add_argument("--run-dir", default=None,
                       help="where runs and tables go (default results/suite-<preset>); repeating the command "
                            "with the same directory skips the finished runs")
    suite.add_argument("--reuse-runs", type=_name_list, default=[], metavar="DIR,...",
                       help="run directories of earlier sweeps, read only: their finished runs (same preset, task, "
                            "mixer, lr, seed) are not trained again, e.g. one committed sweep per task")
    suite.add_argument("--save-tuned", default=None, metavar="PATH",
                       help="write each mixer's best lr per task into this tuned-lr table (the committed one is "
                            "src/regmem/experiments/tuned_lr.json)")
    suite.set_defaults(func=_cmd_suite)

    train = commands.add_parser("train", help="train one mixer on a task (runs under torchrun as well)")
    train.add_argument("task", help=_task_help())
    train.add_argument("--mixer", required=True, help=f"mixer name: {', '.join(_mixer_names())}")
    train.add_argument("--preset", default="quick", help=_PRESET_HELP)
    train.add_argument("--set", dest="task_field", action="append", default=[],
                       help="task field override, repeatable, e.g. --set num_kv_pairs=16")
    train.add_argument("--steps", type=int, default=None, help="optimiser steps (default: the preset's)")
    train.add_argument("--lr", type=float, default=None, help="peak learning rate (default: the preset's)")
    train.add_argument("--optimizer", choices=tuple(TRAIN_OPTIMIZERS), default="adamw",
                       help="adamw, or an optimiser of regmem.optim (Muon-family ones on 2-D hidden weights, AdamW "
                            "for the rest; tune --lr for it)")
    train.add_argument("--batch-size", type=int, default=None, help="global batch (default: the preset's)")
    train.add_argument("--seed", type=int, default=0, help="seed of data, init and data order")
    train.add_argument("--out-dir", default=None, help="metrics.jsonl, checkpoint/ and model/ go here")
    train.add_argument("--checkpoint-every", type=int, default=None, help="steps between checkpoints")
    train.add_argument("--resume", action="store_true", help="continue from the checkpoint in --out-dir")
    train.add_argument("--no-progress", action="store_true", help="no progress bar")
    train.set_defaults(func=_cmd_train)

    generate = commands.add_parser("generate", help="continue a prompt with a byte-level model (`regmem train text`)")
    generate.add_argument("model_dir", help="a saved model: <train --out-dir>/model")
    generate.add_argument("--prompt", required=True, help="text to continue (UTF-8)")
    generate.add_argument("--max-new-bytes", type=int, default=200, help="bytes to sample")
    generate.add_argument("--temperature", type=float, default=0.8, help="softmax temperature; 0 is greedy")
    generate.add_argument("--top-k", type=int, default=None, help="sample among the k most likely bytes")
    generate.add_argument("--seed", type=int, default=0, help="seed of the sampling")
    generate.set_defaults(func=_cmd_generate)

    repro = commands.add_parser("repro", help="reproduce a paper's figure or table: its claim beside our result")
    repro.add_argument("name", choices=REPROS, metavar="NAME",
                       help="; ".join(f"{name}: {r.help}" for name, r in REPROS.items()))
    repro.add_argument("--out-dir", default="results/repro", help="where the report, JSON and plot go")
    repro.add_argument("--quick", action="store_true", help="a seconds-long smoke run, not a reproduction")
    repro.add_argument("--set", dest="settings", action="append", default=[],
                       help="override a setting, repeatable, e.g. --set softmax_bandwidth=0.05 (the bandwidths, "
                            "ridges and forgetting factor the paper leaves open) or --set steps=3000")
    repro.add_argument("--full", action="store_true",
                       help="the larger variant where a reproduction has one (more steps, lrs, seeds; hours on CPU)")
    repro.set_defaults(func=_cmd_repro)

    show = commands.add_parser("showcase", help="a short tour of the ops: forms agree, chunk is fast")
    show.add_argument("--seq-len", type=int, default=2048, help="sequence length of the timing runs")
    show.set_defaults(func=_cmd_showcase)
    return parser


def main(argv: list[str] | None = None) -> None:
    args = build_parser().parse_args(argv)
    args.func(args)


if __name__ == "__main__":
    main()
