"""`regmem bench ops | decode | layers | snr | optim | gpu`: timings written to <out-dir>/<date>-<kind>.{json,md}."""

from __future__ import annotations

import datetime
import importlib.util
from pathlib import Path

import torch

from regmem.lab.cli.args import names_among, non_negative_float, output_dir, positive_int, positive_int_list

# the commands of this module: name -> the line `regmem --help` shows (cli/__init__.py)
COMMANDS = {
    "bench": "benchmarks (results under benchmarks/results/)",
}

DTYPES = {"float32": torch.float32, "float64": torch.float64, "bfloat16": torch.bfloat16}
OUT_DIR_HELP = "where the JSON and markdown go"


def add_bench(commands) -> None:
    parser = commands.add_parser("bench", help=COMMANDS["bench"])
    kinds = parser.add_subparsers(dest="kind", required=True, metavar="KIND")
    for add in (_add_ops, _add_decode, _add_layers, _add_snr, _add_optim, _add_gpu):
        add(kinds)


def _add_shape(parser, *, head_dim_help: str) -> None:
    parser.add_argument("--batch", type=positive_int, default=1, help="batch size B")
    parser.add_argument("--heads", type=positive_int, default=4, help="heads H")
    parser.add_argument("--head-dim", type=positive_int, default=64, help=head_dim_help)


def _add_timing(parser, *, threads: int | None, run_time_help: str = "seconds of timed runs per measurement",
                threads_help: str = "torch threads (default: torch's own choice)") -> None:
    parser.add_argument("--min-run-time", type=non_negative_float, default=1.0, help=run_time_help)
    parser.add_argument("--threads", type=positive_int, default=threads, help=threads_help)
    parser.add_argument("--out-dir", type=output_dir, default="benchmarks/results", help=OUT_DIR_HELP)


def _add_ops(kinds) -> None:
    from regmem.lab.bench import ALL_CASES, CASES, DEFAULT_CASES, EXTERNAL_CASES
    from regmem.ops.common import MODES

    parser = kinds.add_parser("ops", help="time forward and forward+backward of ops and forms")
    parser.add_argument("--ops", type=names_among(ALL_CASES), default=list(DEFAULT_CASES),
                        help=f"comma-separated cases: {', '.join(CASES)}; to compare against public code (pip "
                             f"install 'regmem[bench]'): {', '.join(EXTERNAL_CASES)}")
    parser.add_argument("--forms", type=names_among(MODES), default=["chunk", "recurrent"],
                        help=f"comma-separated forms: {', '.join(MODES)} (reference is O(T^2) memory)")
    parser.add_argument("--seq-lens", type=positive_int_list, default=[1024, 4096, 16384],
                        help="comma-separated T values")
    _add_shape(parser, head_dim_help="key and value dim per head (K = V)")
    parser.add_argument("--chunk-size", type=positive_int, default=64, help="chunk size of the chunk form")
    parser.add_argument("--dtype", choices=sorted(DTYPES), default="float32", help="input dtype")
    parser.add_argument("--max-token-loop-len", type=positive_int, default=None,
                        help="time the recurrent and reference forms only up to this T (a token loop's time is "
                             "linear in T; the chunk form still runs at every T)")
    parser.add_argument("--memory", action="store_true",
                        help="also measure each call's peak memory, once, in a fresh process (slower)")
    _add_timing(parser, threads=None)
    parser.set_defaults(handler=_ops, parser=parser)


def _ops(args) -> None:
    from regmem.lab.bench import EXTERNAL_CASES, run, targets_table, write
    from regmem.lab.bench.external import load_fla_file

    if any(c in EXTERNAL_CASES for c in args.ops):
        try:
            load_fla_file("ops/gated_delta_rule/naive.py")
        except ImportError as err:
            args.parser.error(f"argument --ops: {err}")
    if args.threads is not None:  # else torch's own: setting it, even unchanged, changes MKL's threading
        torch.set_num_threads(args.threads)
    result = run(
        args.ops, args.forms, args.seq_lens, batch=args.batch, heads=args.heads, head_dim=args.head_dim,
        chunk_size=args.chunk_size, dtype=DTYPES[args.dtype], min_run_time=args.min_run_time, memory=args.memory,
        max_token_loop_len=args.max_token_loop_len,
    )
    json_path, md_path = write(result, Path(args.out_dir), f"{datetime.date.today().isoformat()}-ops")
    print(f"\n{targets_table(result)}\n\nwrote {json_path} and {md_path}")


def _write(result: dict, table: str, out_dir: str, kind: str) -> None:
    """Writes a bench result as <out_dir>/<date>-<kind>.{json,md} and prints its table."""
    from regmem.lab.bench import write

    json_path, md_path = write(result, Path(out_dir), f"{datetime.date.today().isoformat()}-{kind}", table)
    print(f"\n{table}\n\nwrote {json_path} and {md_path}")


def _add_decode(kinds) -> None:
    from regmem.lab.bench import CASES

    parser = kinds.add_parser(
        "decode", help="time one decoding step (recurrent form, one token) after contexts of growing length")
    parser.add_argument("--ops", type=names_among(CASES), default=["hla2", "ahla", "linear_attn", "softmax_attn"],
                        help="comma-separated cases of `bench ops` (kernel_regression's prefill is O(T^3))")
    parser.add_argument("--context-lens", type=positive_int_list, default=[1024, 4096, 16384],
                        help="comma-separated context lengths T")
    _add_shape(parser, head_dim_help="key and value dim per head (K = V)")
    parser.add_argument("--dtype", choices=sorted(DTYPES), default="float32", help="input dtype")
    _add_timing(parser, threads=None)
    parser.set_defaults(handler=_decode, parser=parser)


def _decode(args) -> None:
    from regmem.lab.bench import decode_table, run_decode

    if args.threads is not None:  # else torch's own: setting it, even unchanged, changes MKL's threading
        torch.set_num_threads(args.threads)
    result = run_decode(args.ops, args.context_lens, batch=args.batch, heads=args.heads, head_dim=args.head_dim,
                        dtype=DTYPES[args.dtype], min_run_time=args.min_run_time)
    _write(result, decode_table(result), args.out_dir, "decode")


def _add_layers(kinds) -> None:
    from regmem.lab.bench import LAYER_CASES, PASSES

    parser = kinds.add_parser("layers", help="time whole mixer layers (forward, forward+backward, one decoding "
                                             "step after T tokens), beside public implementations "
                                             "(titans-pytorch: pip install 'regmem[bench]')")
    parser.add_argument("--layers", type=names_among(LAYER_CASES),
                        default=["titans_mlp", "titans_pytorch", "titans_pytorch_b16"],
                        help=f"comma-separated cases (bench/layers.py describes each): {', '.join(LAYER_CASES)}")
    parser.add_argument("--passes", type=names_among(PASSES), default=["fwd", "fwdbwd", "step"],
                        help="comma-separated passes: fwd, fwdbwd, step (one decoding token after a T-token "
                             "prefill; regmem's layers only)")
    parser.add_argument("--seq-lens", type=positive_int_list, default=[1024, 4096], help="comma-separated T values")
    _add_shape(parser, head_dim_help="dim per head (d_model = heads x head_dim)")
    _add_timing(parser, threads=None)
    parser.set_defaults(handler=_layers, parser=parser)


def _layers(args) -> None:
    from regmem.lab.bench import layers_table, run_layers
    from regmem.lab.bench.layers import EXTERNAL_LAYERS

    external = [name for name in args.layers if name in EXTERNAL_LAYERS]
    if external and importlib.util.find_spec("titans_pytorch") is None:
        args.parser.error(f"argument --layers: {', '.join(external)} need titans-pytorch: pip install "
                          "'regmem[bench]'")
    if args.threads is not None:  # else torch's own: setting it, even unchanged, changes MKL's threading
        torch.set_num_threads(args.threads)
    result = run_layers(args.layers, args.seq_lens, batch=args.batch, heads=args.heads, head_dim=args.head_dim,
                        min_run_time=args.min_run_time, passes=args.passes)
    _write(result, layers_table(result), args.out_dir, "layers")


def _add_snr(kinds) -> None:
    from regmem.analysis import MEMORY_KERNELS

    parser = kinds.add_parser("snr", help="time the retrieval-SNR estimator (target: < 5 s, one thread)")
    parser.add_argument("--kernels", type=names_among(MEMORY_KERNELS), default=["linear", "exp"],
                        help=f"comma-separated kernels: {', '.join(MEMORY_KERNELS)}")
    parser.add_argument("--trials", type=positive_int, default=400, help="Monte-Carlo trials per call")
    _add_timing(parser, threads=1, run_time_help="seconds of timed runs per kernel",
                threads_help="torch threads (the target is for one)")
    parser.set_defaults(handler=_snr, parser=parser)


def _snr(args) -> None:
    from regmem.lab.bench import run_snr_timing, snr_timing_table

    torch.set_num_threads(args.threads)
    result = run_snr_timing(args.kernels, trials=args.trials, min_run_time=args.min_run_time)
    _write(result, snr_timing_table(result), args.out_dir, "snr")


def _add_optim(kinds) -> None:
    from regmem.lab.bench.optim import MODELS, OPTIMIZERS

    parser = kinds.add_parser("optim", help="time one step of regmem.optim optimisers beside torch.optim")
    parser.add_argument("--models", type=names_among(MODELS), default=list(MODELS),
                        help=f"comma-separated models (bench/optim.py): {', '.join(MODELS)}")
    parser.add_argument("--optimizers", type=names_among(OPTIMIZERS), default=list(OPTIMIZERS),
                        help=f"comma-separated optimisers (bench/optim.py): {', '.join(OPTIMIZERS)}")
    _add_timing(parser, threads=1, run_time_help="seconds of timed steps per case", threads_help="torch threads")
    parser.set_defaults(handler=_optim, parser=parser)


def _optim(args) -> None:
    from regmem.lab.bench.optim import optim_timing_table, run_optim_timing

    torch.set_num_threads(args.threads)
    result = run_optim_timing(args.models, args.optimizers, min_run_time=args.min_run_time)
    _write(result, optim_timing_table(result), args.out_dir, "optim")


def _add_gpu(kinds) -> None:
    from regmem.lab.bench.cases import CASES
    from regmem.lab.bench.gpu import COMPILE_MIXERS, GRAPH_MIXERS
    from regmem.layers import MIXERS

    parser = kinds.add_parser(
        "gpu", help="one pass on a GPU (about 4 min with compilation): every op's fwd+bwd at bf16 B 4 T 4096 H 16 "
                    "K=V=128 beside SDPA, regmem's own Triton kernels (DeltaFormer, local-linear attention) and fla's "
                    "kernel (where fla is installed), every mixer's training step at "
                    "B 8 T 512 d_model 256 with a host-sync check, a CUDA-graph column and a torch.compile column; "
                    "bench/gpu.py")
    parser.add_argument("--ops", type=names_among(CASES), default=None,
                        help="comma-separated cases of `bench ops` (default: all, the issues' first)")
    parser.add_argument("--mixers", type=names_among(MIXERS), default=None,
                        help="comma-separated mixers (default: all)")
    parser.add_argument("--compile-mixers", type=names_among(MIXERS), default=list(COMPILE_MIXERS),
                        help="mixers also timed under torch.compile (default: %(default)s)")
    parser.add_argument("--no-compile", action="store_true", help="skip the torch.compile column")
    parser.add_argument("--graph-mixers", type=names_among(MIXERS), default=list(GRAPH_MIXERS),
                        help="mixers also timed with their step replayed from CUDA graphs "
                             "(torch.cuda.make_graphed_callables; default: %(default)s)")
    parser.add_argument("--no-graphs", action="store_true", help="skip the CUDA-graph column")
    parser.add_argument("--no-fla", action="store_true", help="skip fla's kernels (each autotunes for up to minutes "
                                                              "on its first call)")
    parser.add_argument("--tables", type=names_among(("ops", "layers")), default=["ops", "layers"],
                        help="which tables: ops, layers (one alone gets the whole budget)")
    parser.add_argument("--budget", type=positive_int, default=230,
                        help="seconds for the whole pass; each table stops at its share, rows not reached say so")
    parser.add_argument("--reps", type=positive_int, default=3, help="timed calls per row (median)")
    parser.add_argument("--device", default="cuda", help="torch device (cpu: a smoke run at the same shapes)")
    parser.add_argument("--out-dir", type=output_dir, default="benchmarks/results/gpu", help=OUT_DIR_HELP)
    parser.set_defaults(handler=_gpu, parser=parser)


def _gpu(args) -> None:
    from regmem.lab.bench.gpu import gpu_table, run_gpu

    if args.device.startswith("cuda") and not torch.cuda.is_available():
        args.parser.error("argument --device: torch sees no CUDA device here (--device cpu runs the same pass on "
                          "the CPU)")
    compile_mixers = [] if args.no_compile else args.compile_mixers
    result = run_gpu(args.device, cases=args.ops if "ops" in args.tables else [],
                     mixers=args.mixers if "layers" in args.tables else [], compile_mixers=compile_mixers,
                     graph_mixers=[] if args.no_graphs else args.graph_mixers,
                     budget_s=args.budget, reps=args.reps, fla=False if args.no_fla else None)
    _write(result, gpu_table(result), args.out_dir, "gpu")
