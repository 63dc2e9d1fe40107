"""The `regmem` command line: one argparse parser assembled from one module per command (or group of commands).

Each module exposes `add_<command>(commands)`, which defines the command's arguments and sets its handler; the
handler receives the parsed arguments. Arguments are checked while they are parsed (cli/args.py) or by the
handler before anything runs; a bad one ends the command with `regmem: error: ...` and exit status 2.
"""

from __future__ import annotations

import argparse
import importlib
import sys

# (module, adder) per command, in the order `regmem --help` lists them. Each module names its commands' help lines
# in COMMANDS; its adder builds the full parser. Only the command being run is built in full, so `regmem --help`
# and `regmem COMMAND --help` import what they list and nothing else (no reproduction or plotting module).
ADDERS = (("mixers", "add_mixers"), ("recipes", "add_recipes"), ("levels", "add_levels"), ("analyze", "add_analyze"),
          ("bench", "add_bench"), ("protocol", "add_compare"), ("protocol", "add_suite"), ("corpus", "add_tokenizer"),
          ("corpus", "add_prepare"), ("train", "add_train"), ("generate", "add_generate"), ("repro", "add_repro"),
          ("showcase", "add_showcase"))

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


def _commands() -> list[tuple[str, str, object]]:
    """(command, help line, adder) for every command, in `regmem --help`'s order."""
    out = []
    for module_name, adder_name in ADDERS:
        module = importlib.import_module(f"regmem.lab.cli.{module_name}")
        name = adder_name.removeprefix("add_")
        out.append((name, module.COMMANDS[name], getattr(module, adder_name)))
    return out


def build_parser(only: str | None = None) -> Parser:
    """The whole parser; with `only`, that command's in full and every other one as its name and help line (what
    `regmem --help` shows), so building it imports only what the command lists. `only=""`: no command in full."""
    parser = Parser(prog="regmem")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name, help_line, add in _commands():
        if only is None or name == only:
            add(commands)
        else:
            commands.add_parser(name, help=help_line)
    parser.description = (f"{INTRO} Commands: {', '.join(commands.choices)}; `regmem COMMAND --help` describes "
                          "each.")
    return parser


def _command_of(argv: list[str]) -> str:
    """The command `argv` runs: its first argument that is not an option ("" when there is none)."""
    return next((arg for arg in argv if not arg.startswith("-")), "")


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    args = build_parser(only=_command_of(argv)).parse_args(argv)
    args.handler(args)


__all__ = ["build_parser", "main"]
