"""The `regmem` command line: one argparse parser, one subcommand per job.

    regmem recipes              the design space: each op / model with its test-time-regression recipe
    regmem bench ops            time ops and forms; write benchmarks/results/<date>-ops.{json,md}
    regmem showcase             a short tour: every op, its three forms agreeing, and their speed
"""

from __future__ import annotations

import argparse
import datetime
from pathlib import Path

import torch

DTYPES = {"float32": torch.float32, "float64": torch.float64, "bfloat16": torch.bfloat16}


def _int_list(text: str) -> list[int]:
    return [int(x) for x in text.split(",") if x]


def _name_list(text: str) -> list[str]:
    return [x for x in text.split(",") if x]


def _cmd_recipes(args) -> None:
    from regmem.recipe import format_table

    print(format_table())


def _cmd_bench_ops(args) -> None:
    from regmem.bench import CASES, run, targets_table, write

    unknown = [c for c in args.ops if c not in CASES]
    if unknown:
        raise SystemExit(f"--ops: unknown {unknown}; known: {sorted(CASES)}")
    torch.set_num_threads(args.threads or torch.get_num_threads())
    result = run(
        args.ops, args.forms, args.seq_lens, batch=args.batch, heads=args.heads, head_dim=args.head_dim,
        chunk_size=args.chunk_size, dtype=DTYPES[args.dtype], min_run_time=args.min_run_time,
    )
    stem = f"{datetime.date.today().isoformat()}-ops"
    json_path, md_path = write(result, Path(args.out_dir), stem)
    print(f"\n{targets_table(result)}\n\nwrote {json_path} and {md_path}")


def _cmd_showcase(args) -> None:
    from regmem.experiments.showcase import showcase

    showcase(seq_len=args.seq_len)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="regmem",
        description="regmem: sequence models built on associative memory (test-time regression).",
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    recipes = commands.add_parser("recipes", help="print the design space: ops and models with their recipes")
    recipes.set_defaults(func=_cmd_recipes)

    bench = commands.add_parser("bench", help="benchmarks (results under benchmarks/results/)")
    bench_kinds = bench.add_subparsers(dest="kind", required=True, metavar="KIND")
    ops = bench_kinds.add_parser("ops", help="time forward and forward+backward of ops and forms")
    ops.add_argument("--ops", type=_name_list, default=["linear_attn", "gla_scalar", "gla_diagonal"],
                     help="comma-separated cases: linear_attn, linear_attn_normalized, gla_scalar, gla_diagonal")
    ops.add_argument("--forms", type=_name_list, default=["chunk", "recurrent"],
                     help="comma-separated forms: chunk, recurrent, reference (reference is O(T^2) memory)")
    ops.add_argument("--seq-lens", type=_int_list, default=[1024, 4096, 16384], help="comma-separated T values")
    ops.add_argument("--batch", type=int, default=1, help="batch size B")
    ops.add_argument("--heads", type=int, default=4, help="heads H")
    ops.add_argument("--head-dim", type=int, default=64, help="key and value dim per head (K = V)")
    ops.add_argument("--chunk-size", type=int, default=64, help="chunk size of the chunk form")
    ops.add_argument("--dtype", choices=sorted(DTYPES), default="float32", help="input dtype")
    ops.add_argument("--min-run-time", type=float, default=1.0, help="seconds of timed runs per measurement")
    ops.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's own choice)")
    ops.add_argument("--out-dir", default="benchmarks/results", help="where the JSON and markdown go")
    ops.set_defaults(func=_cmd_bench_ops)

    show = commands.add_parser("showcase", help="a short tour of the ops: forms agree, chunk is fast")
    show.add_argument("--seq-len", type=int, default=2048, help="sequence length of the timing runs")
    show.set_defaults(func=_cmd_showcase)
    return parser


def main(argv: list[str] | None = None) -> None:
    args = build_parser().parse_args(argv)
    args.func(args)


if __name__ == "__main__":
    main()
