"""`regmem analyze snr`: retrieval signal-to-noise per kernel and capacity curves of the ops; `regmem analyze
context-growth`: Vignette 3, what a memory does as the context grows (both arXiv:2505.19488); `regmem analyze
reach`: how far back a layer's gradient reaches at initialisation."""

from __future__ import annotations

from regmem.lab.cli.args import mixer_list, output_dir, positive_int, seed, seed_list

# the commands of this module: name -> the line `regmem --help` shows (cli/__init__.py)
COMMANDS = {
    "analyze": "analyses of associative memory (arXiv:2505.19488) and of a layer's backward",
}


def add_analyze(commands) -> None:
    parser = commands.add_parser("analyze", help=COMMANDS["analyze"])
    kinds = parser.add_subparsers(dest="kind", required=True, metavar="KIND")
    snr = kinds.add_parser("snr", help="retrieval SNR per kernel and capacity curves of the ops")
    _add_out_dir(snr, "results/analyze-snr")
    snr.add_argument("--trials", type=positive_int, default=None,
                     help="Monte-Carlo trials per table row (default: 400, or 50 with --quick)")
    snr.add_argument("--seed", type=seed, default=0, help="seed of the random keys and values")
    snr.add_argument("--quick", action="store_true", help="a seconds-long smoke run with few trials and points")
    snr.set_defaults(handler=_snr, parser=snr)
    growth = kinds.add_parser("context-growth", help="Vignette 3 (eqs. 44-49): DeltaNet's fixed point, softmax "
                              "attention's 1/t updates, adapting to a new map after t0 tokens (about 10 s)")
    _add_out_dir(growth, "results/analyze-context-growth")
    growth.add_argument("--seed", type=seed, default=0, help="seed of the projections and the streams")
    growth.add_argument("--quick", action="store_true", help="a sub-second smoke run with short streams")
    growth.set_defaults(handler=_context_growth, parser=growth)
    reach = kinds.add_parser("reach", help="how far back each layer's gradient reaches at initialisation: "
                             "||d ||y_T|| / d x_s|| against the distance, a table and a log plot (seconds a layer)")
    reach.add_argument("--mixers", type=mixer_list, default=["gated_deltanet", "hope"],
                       help="comma-separated mixer names, each at its defaults (default: gated_deltanet,hope)")
    reach.add_argument("--variant", action="append", default=[], metavar="MIXER:OPT=VALUE[:OPT=VALUE...]",
                       help="a mixer with options, repeatable, a line of its own (e.g. --variant hope:eta_max=0.03)")
    reach.add_argument("--seq-len", type=positive_int, default=256, help="T (default 256)")
    reach.add_argument("--d-model", type=positive_int, default=64, help="d_model (default 64)")
    reach.add_argument("--n-heads", type=positive_int, default=4, help="heads (default 4)")
    reach.add_argument("--seeds", type=seed_list, default=[0, 1], help="comma-separated seeds (default 0,1)")
    _add_out_dir(reach, "results/analyze-reach")
    reach.set_defaults(handler=_reach, parser=reach)


def _add_out_dir(parser, default: str) -> None:
    parser.add_argument("--out-dir", type=output_dir, default=default, help="where the report, JSON and plot go")


def _snr(args) -> None:
    from regmem.lab.experiments.analyze import analyze_snr

    analyze_snr(args.out_dir, trials=args.trials, seed=args.seed, quick=args.quick)


def _context_growth(args) -> None:
    from regmem.lab.experiments.analyze_context_growth import analyze_context_growth

    analyze_context_growth(args.out_dir, seed=args.seed, quick=args.quick)


def _reach(args) -> None:
    from regmem.lab.experiments.reach import ReachSettings, analyze_reach, parse_layers

    try:
        layers = parse_layers(args.mixers, args.variant)
    except ValueError as err:
        args.parser.error(f"argument --variant: {err}")
    distances = tuple(d for d in (1, 32, 128, (3 * args.seq_len) // 4, args.seq_len - 1) if d < args.seq_len)
    settings = ReachSettings(layers=layers, seq_len=args.seq_len, d_model=args.d_model, n_heads=args.n_heads,
                             seeds=tuple(args.seeds), distances=tuple(dict.fromkeys(distances)))
    _check_reach_builds(args, settings)
    analyze_reach(args.out_dir, settings)


def _check_reach_builds(args, settings) -> None:
    """Each layer builds at the sizes (on the meta device: nothing allocated), or a usage error names the flag."""
    import torch

    from regmem.layers import build_mixer

    for label, name, options in settings.layers:
        try:
            with torch.device("meta"):
                build_mixer(name, settings.d_model, settings.n_heads, **options)
        except (ValueError, TypeError) as err:
            flag = "--n-heads" if any(n in str(err) for n in ("d_model", "n_heads", "head")) else "--variant"
            args.parser.error(f"argument {flag}: {label} at d_model {settings.d_model}, n_heads "
                              f"{settings.n_heads}: {err}")
