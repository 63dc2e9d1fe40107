"""`regmem repro NAME`: reproduce a paper's figure or table; names, help and dispatch come from
`regmem.lab.experiments.repro.REPROS`."""

from __future__ import annotations

import argparse
import textwrap

from regmem.lab.cli.args import assignment, output_dir

# the commands of this module: name -> the line `regmem --help` shows (cli/__init__.py)
COMMANDS = {
    "repro": "reproduce a paper's figure or table: its claim beside our result",
}


def _listing(repros: dict) -> str:
    """One entry per reproduction: its name, then its help line wrapped under it."""
    width = max(len(name) for name in repros) + 2
    lines = []
    for name, repro in repros.items():
        lines += textwrap.wrap(repro.help, width=110, initial_indent=f"  {name:<{width}}",
                               subsequent_indent=" " * (width + 2))
    return "\n".join(lines)


def add_repro(commands) -> None:
    from regmem.lab.experiments.repro import REPROS

    parser = commands.add_parser(
        "repro", help=COMMANDS["repro"],
        description="Runs one reproduction and writes <out-dir>/<name>.md (the paper's claim beside the measured\n"
                    "result), <name>.json and a plot.\n\nreproductions:\n" + _listing(REPROS),
        formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("name", choices=REPROS, metavar="NAME", help="the reproduction (listed above)")
    parser.add_argument("--out-dir", type=output_dir, default="results/repro",
                        help="where the report, JSON and plot go")
    scale = parser.add_mutually_exclusive_group()
    scale.add_argument("--quick", action="store_true", help="a seconds-long smoke run, not a reproduction")
    scale.add_argument("--full", action="store_true",
                       help="the reproduction's larger variant, where it has one (ttr-mqar: the paper's d_model 64, "
                            "P 64/128; others: more steps, lrs and seeds; hours on CPU)")
    parser.add_argument("--set", dest="settings", type=assignment, action="append", default=[], metavar="KEY=VALUE",
                        help="override a setting, repeatable, e.g. --set softmax_bandwidth=0.05 (the bandwidths, "
                             "ridges and forgetting factor the paper leaves open) or --set steps=3000; a tuple "
                             "setting takes a comma-separated list (--set mixers=attn,linear)")
    parser.set_defaults(handler=_repro, parser=parser)


def _repro(args) -> None:
    from regmem.lab.experiments.repro import REPROS, run_repro

    repro = REPROS[args.name]
    variant = "quick" if args.quick else "full" if args.full else "default"
    if variant not in repro.variants:
        args.parser.error(f"argument --full: {args.name} has no full variant (variants: "
                          f"{', '.join(repro.variants)})")
    overrides = dict(args.settings)
    try:
        repro.settings(variant, overrides)
    except ValueError as err:
        args.parser.error(f"argument --set: {args.name}: {err}")
    run_repro(args.name, args.out_dir, variant=variant, overrides=overrides, progress=variant != "quick")
