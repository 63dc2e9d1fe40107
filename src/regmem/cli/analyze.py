"""`regmem analyze snr`: retrieval signal-to-noise per kernel and capacity curves of the ops; `regmem analyze
context-growth`: Vignette 3, what a memory does as the context grows (both arXiv:2505.19488)."""

from __future__ import annotations

from regmem.cli.args import output_dir, positive_int, seed

# the commands of this module: name -> the line `regmem --help` shows (cli/__init__.py)
COMMANDS = {
    "analyze": "analyses of associative memory (arXiv:2505.19488)",
}


def add_analyze(commands) -> None:
    parser = commands.add_parser("analyze", help=COMMANDS["analyze"])
    kinds = parser.add_subparsers(dest="kind", required=True, metavar="KIND")
    snr = kinds.add_parser("snr", help="retrieval SNR per kernel and capacity curves of the ops")
    snr.add_argument("--out-dir", type=output_dir, default="results/analyze-snr",
                     help="where the report, JSON and plot go")
    snr.add_argument("--trials", type=positive_int, default=None,
                     help="Monte-Carlo trials per table row (default: 400, or 50 with --quick)")
    snr.add_argument("--seed", type=seed, default=0, help="seed of the random keys and values")
    snr.add_argument("--quick", action="store_true", help="a seconds-long smoke run with few trials and points")
    snr.set_defaults(handler=_snr, parser=snr)
    growth = kinds.add_parser("context-growth", help="Vignette 3 (eqs. 44-49): DeltaNet's fixed point, softmax "
                              "attention's 1/t updates, adapting to a new map after t0 tokens (about 10 s)")
    growth.add_argument("--out-dir", type=output_dir, default="results/analyze-context-growth",
                        help="where the report, JSON and plot go")
    growth.add_argument("--seed", type=seed, default=0, help="seed of the projections and the streams")
    growth.add_argument("--quick", action="store_true", help="a sub-second smoke run with short streams")
    growth.set_defaults(handler=_context_growth, parser=growth)


def _snr(args) -> None:
    from regmem.experiments.analyze import analyze_snr

    analyze_snr(args.out_dir, trials=args.trials, seed=args.seed, quick=args.quick)


def _context_growth(args) -> None:
    from regmem.experiments.analyze_context_growth import analyze_context_growth

    analyze_context_growth(args.out_dir, seed=args.seed, quick=args.quick)
