"""`regmem recipes`: the design space (weights x regressor x solver), each known point and what builds there."""

from __future__ import annotations

# the commands of this module: name -> the line `regmem --help` shows (cli/__init__.py)
COMMANDS = {
    "recipes": "the design space and what build_mixer builds at each point",
}


def add_recipes(commands) -> None:
    parser = commands.add_parser("recipes", help=COMMANDS["recipes"])
    parser.set_defaults(handler=_recipes, parser=parser)


def _recipes(args) -> None:
    from regmem.layers import how_it_builds
    from regmem.recipe import entries, format_table

    lines = format_table().splitlines()
    lines[0] += " builds |"
    lines[1] += "---|"
    lines[2:] = [f"{line} {how_it_builds(e.recipe)} |" for line, e in zip(lines[2:], entries(), strict=True)]
    print("\n".join(lines))
    print("\n'builds': the mixer `build_mixer(recipe, ...)` returns at that point ('engine': the test-time-training "
          "engine, regmem.ops.ttt). Any point (uniform, linear | mlp, gd_step | sgd | sgd_weight_decay | "
          "sgd_momentum | dgd) builds, e.g. `regmem compare mqar --mixers recipe:uniform/linear/dgd`.")
