"""`regmem mixers`: every mixer name with its class and point of the design space; `--describe NAME`: a mixer's
options (regmem/layers/options.py), with their types, defaults and the class that declares each."""

from __future__ import annotations

import inspect

from regmem.lab.cli.args import mixer_name

# the commands of this module: name -> the line `regmem --help` shows (cli/__init__.py)
COMMANDS = {
    "mixers": "the mixers, and each one's options (--describe NAME)",
}


def add_mixers(commands) -> None:
    parser = commands.add_parser("mixers", help=COMMANDS["mixers"])
    parser.add_argument("--describe", type=mixer_name, default=None, metavar="NAME",
                        help="list this mixer's options (the keyword arguments of build_mixer, `--mixer-opt` and "
                             "a config's [mixer_options]) with types and defaults")
    parser.set_defaults(handler=_mixers, parser=parser)


def _first_line(text: str | None) -> str:
    return " ".join((text or "").strip().split("\n\n")[0].split())


def _mixers(args) -> None:
    from regmem.layers import MIXERS
    from regmem.layers.options import mixer_class, mixer_options

    if args.describe is None:
        print("| mixer | class | design-space point | options |")
        print("|---|---|---|---:|")
        for name, cls in MIXERS.items():
            point = cls.default_recipe()
            where = f"{point.weights.kind}/{point.regressor.kind}/{point.solver.kind}" if point else "-"
            print(f"| {name} | {cls.__module__}.{cls.__name__} | {where} | {len(mixer_options(name))} |")
        print("\n`regmem mixers --describe NAME` lists a mixer's options; give them with `--mixer-opt OPTION=VALUE` "
              "(train, compare, suite) or in a config file's [mixer_options].")
        return
    cls = mixer_class(args.describe)
    print(f"{args.describe}: {cls.__module__}.{cls.__name__}(d_model, n_heads, **options)")
    print(_first_line(cls.__doc__))
    print("\n| option | type | default | declared by |")
    print("|---|---|---|---|")
    for option in mixer_options(args.describe).values():
        default = "required" if option.default is inspect.Parameter.empty else repr(option.default)
        note = "" if option.settable() else " (from Python only)"
        print(f"| {option.name} | {option.type_text().replace(' | ', ' or ')}{note} | {default} | {option.owner} |")
