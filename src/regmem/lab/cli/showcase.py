"""`regmem showcase`: a short tour of the ops: each op's forms agree, and the chunk form is fast."""

from __future__ import annotations

from regmem.lab.cli.args import positive_int

# the commands of this module: name -> the line `regmem --help` shows (cli/__init__.py)
COMMANDS = {
    "showcase": "a short tour of the ops: forms agree, chunk is fast",
}


def add_showcase(commands) -> None:
    parser = commands.add_parser("showcase", help=COMMANDS["showcase"])
    parser.add_argument("--seq-len", type=positive_int, default=2048, help="sequence length of the timing runs")
    parser.set_defaults(handler=_showcase, parser=parser)


def _showcase(args) -> None:
    from regmem.lab.experiments.showcase import showcase

    showcase(seq_len=args.seq_len)
