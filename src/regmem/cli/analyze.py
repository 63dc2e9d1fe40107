"""`regmem analyze snr`: retrieval signal-to-noise per kernel and capacity curves of the ops (arXiv:2505.19488)."""

from __future__ import annotations

from regmem.cli.args import positive_int


def add_analyze(commands) -> None:
    parser = commands.add_parser("analyze", help="analyses of associative memory (arXiv:2505.19488)")
    kinds = parser.add_subparsers(dest="kind", required=True, metavar="KIND")
    snr = kinds.add_parser("snr", help="retrieval SNR per kernel and capacity curves of the ops")
    snr.add_argument("--out-dir", default="results/analyze-snr", help="where the report, JSON and plot go")
    snr.add_argument("--trials", type=positive_int, default=None,
                     help="Monte-Carlo trials per table row (default: 400, or 50 with --quick)")
    snr.add_argument("--seed", type=int, default=0, help="seed of the random keys and values")
    snr.add_argument("--quick", action="store_true", help="a seconds-long smoke run with few trials and points")
    snr.set_defaults(handler=_snr, parser=snr)


def _snr(args) -> None:
    from regmem.experiments.analyze import analyze_snr

    analyze_snr(args.out_dir, trials=args.trials, seed=args.seed, quick=args.quick)
