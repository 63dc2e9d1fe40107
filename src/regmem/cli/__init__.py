"""The `regmem` command line: one argparse parser assembled from one module per command (or group of commands).

Each module exposes `add_<command>(commands)`, which defines the command's arguments and sets its handler; the
handler receives the parsed arguments. Arguments are checked while they are parsed (cli/args.py) or by the
handler before anything runs; a bad one ends the command with `regmem: error: ...` and exit status 2.
"""

from __future__ import annotations

import argparse
import sys

from regmem.cli.analyze import add_analyze
from regmem.cli.bench import add_bench
from regmem.cli.corpus import add_prepare, add_tokenizer
from regmem.cli.generate import add_generate
from regmem.cli.levels import add_levels
from regmem.cli.mixers import add_mixers
from regmem.cli.protocol import add_compare, add_suite
from regmem.cli.recipes import add_recipes
from regmem.cli.repro import add_repro
from regmem.cli.showcase import add_showcase
from regmem.cli.train import add_train

ADDERS = (add_mixers, add_recipes, add_levels, add_analyze, add_bench, add_compare, add_suite, add_tokenizer,
          add_prepare, add_train, add_generate, add_repro, add_showcase)  # in the order `regmem --help` lists them

INTRO = ("regmem: sequence models built on associative memory (test-time regression). Mixers include linear and "
         "gated memories, delta rules, exact regression, HLA, Mamba-1 (mamba) and Mamba-2, and deep memories fitted "
         "by test-time training (ttt_linear, ttt_mlp, titans_mlp, self_modifying_titans), Nested Learning's Hope and "
         "the Continuum Memory System (ffn=cms), and an LSTM; any point of the design space builds as "
         "recipe:<weights>/<regressor>/<solver>. A run's model and mixer options come from --config FILE (TOML), "
         "--model FIELD=VALUE and --mixer-opt OPTION=VALUE; `regmem mixers --describe NAME` lists a mixer's options.")


class Parser(argparse.ArgumentParser):
    """argparse's parser whose errors, a subcommand's included, read `regmem: error: <message>` (after the usage of
    the command that failed) and exit with status 2."""

    def error(self, message: str):
        self.print_usage(sys.stderr)
        self.exit(2, f"regmem: error: {message}\n")


def build_parser() -> Parser:
    parser = Parser(prog="regmem")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for add in ADDERS:
        add(commands)
    parser.description = (f"{INTRO} Commands: {', '.join(commands.choices)}; `regmem COMMAND --help` describes "
                          "each.")
    return parser


def main(argv: list[str] | None = None) -> None:
    args = build_parser().parse_args(argv)
    args.handler(args)


__all__ = ["build_parser", "main"]
