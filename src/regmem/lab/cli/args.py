"""Argument types the commands share: comma-separated lists, positive numbers, seeds, known names, FIELD=VALUE
pairs, output directories and files (writable, checked without leaving anything behind).

Each is an argparse `type=`: a bad value raises `argparse.ArgumentTypeError`, so the command stops while its
arguments are parsed, before anything runs, with `regmem: error: argument --flag: ...` and exit status 2.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import tempfile
from collections.abc import Callable, Iterable
from pathlib import Path

ArgumentTypeError = argparse.ArgumentTypeError


def add_device_options(parser: argparse.ArgumentParser) -> None:
    """--device and --cuda-graphs of the commands that train (`check_device_options` checks them)."""
    parser.add_argument("--device", default="cpu",
                        help="torch device to train on, e.g. cuda (under torchrun: each rank's cuda:LOCAL_RANK)")
    parser.add_argument("--cuda-graphs", action="store_true",
                        help="capture each model's forward and backward as CUDA graphs at its first step and replay "
                             "them (one process per GPU; pays for models of many small kernels: Hope, "
                             "self-modifying Titans, the deep memories)")


def check_device_options(args) -> None:
    """--device names a torch device this machine has; --cuda-graphs comes with a CUDA one."""
    import torch

    try:
        device = torch.device(args.device)
    except RuntimeError as err:
        args.parser.error(f"argument --device: {err}")
    if device.type == "cuda" and not torch.cuda.is_available():
        args.parser.error(f"argument --device: {args.device!r} asked for, but torch sees no CUDA device")
    if args.cuda_graphs and device.type != "cuda":
        args.parser.error("argument --cuda-graphs: needs --device cuda")


def preset_help() -> str:
    from regmem.lab.experiments.presets import PRESETS

    return f"a preset of the model and budget ({', '.join(PRESETS)}; experiments/presets.py)"


def mixers_help(what: str) -> str:
    from regmem.layers import MIXERS

    return f"{what}: {', '.join(MIXERS)}; or recipe:<weights>/<regressor>/<solver> (see `regmem recipes`)"


def task_help() -> str:
    from regmem.tasks import TASKS

    return f"task name: {', '.join(TASKS)}"


def _number(text: str, kind: type, *, minimum: float, strict: bool):
    try:
        value = kind(text)
    except ValueError:
        raise ArgumentTypeError(f"expected {'an integer' if kind is int else 'a number'}, got {text!r}") from None
    if kind is float and not math.isfinite(value):
        raise ArgumentTypeError(f"must be a finite number, got {text}")
    if value < minimum or (strict and value == minimum):
        raise ArgumentTypeError(f"must be {'>' if strict else '>='} {minimum:g}, got {text}")
    return value


def positive_int(text: str) -> int:
    return _number(text, int, minimum=0, strict=True)


def non_negative_int(text: str) -> int:
    return _number(text, int, minimum=0, strict=False)


def positive_float(text: str) -> float:
    return _number(text, float, minimum=0.0, strict=True)


def non_negative_float(text: str) -> float:
    return _number(text, float, minimum=0.0, strict=False)


SEED_LIMIT = 2**63  # seeds are int64 for torch.Generator.manual_seed (and numpy's): [0, 2**63)


def seed(text: str) -> int:
    """A seed in [0, 2**63)."""
    value = _number(text, int, minimum=0, strict=False)
    if value >= SEED_LIMIT:
        raise ArgumentTypeError(f"must be < 2**63, got {text}")
    return value


def _items(text: str) -> list[str]:
    """The items of a comma-separated list; an empty item (",,", a leading or trailing comma) is refused, not
    dropped."""
    items = text.split(",")
    if not text or any(not item.strip() for item in items):
        raise ArgumentTypeError(f"expected a comma-separated list without empty items, got {text!r}")
    return [item.strip() for item in items]


def seed_list(text: str) -> list[int]:
    return [seed(x) for x in _items(text)]


def _creatable(path: Path) -> str | None:
    """Why a file or directory cannot be created at `path` (None: it can): its nearest existing ancestor must be a
    directory in which a scratch directory can be made (and is removed again: nothing is left behind)."""
    parent = path.parent
    while not parent.exists() and parent != parent.parent:
        parent = parent.parent
    if not parent.is_dir():
        return f"{str(parent)!r} is not a directory"
    try:
        os.rmdir(tempfile.mkdtemp(dir=parent, prefix=".regmem-probe-"))
    except OSError as err:
        return f"cannot write in {str(parent)!r} ({err.strerror or err})"
    return None


def output_dir(text: str) -> str:
    """A directory to write into: an existing writable directory, or a path where one can be created."""
    if not text:
        raise ArgumentTypeError("must not be empty (give a directory)")
    path = Path(text)
    if path.exists():
        if not path.is_dir():
            raise ArgumentTypeError(f"{text!r} exists and is not a directory")
        if _creatable(path / "probe") is not None:  # a scratch directory made and removed in it
            raise ArgumentTypeError(f"{text!r} is not writable")
        return text
    reason = _creatable(path)
    if reason is not None:
        raise ArgumentTypeError(f"cannot create {text!r}: {reason}")
    return text


def output_json(text: str) -> str:
    """A JSON file to write (or to merge into, when it exists: then it must hold a JSON object)."""
    if not text:
        raise ArgumentTypeError("must not be empty (give a file)")
    path = Path(text)
    if path.exists():
        if not path.is_file():
            raise ArgumentTypeError(f"{text!r} exists and is not a file")
        try:
            value = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
            raise ArgumentTypeError(f"{text!r} exists and is not a readable JSON file ({err})") from None
        if not isinstance(value, dict):
            raise ArgumentTypeError(f"{text!r} exists and does not hold a JSON object")
        if not os.access(path, os.W_OK):
            raise ArgumentTypeError(f"{text!r} is not writable")
    reason = _creatable(path)
    if reason is not None:
        raise ArgumentTypeError(f"cannot write {text!r}: {reason}")
    return text


def positive_int_list(text: str) -> list[int]:
    return [positive_int(x) for x in _items(text)]


def positive_float_list(text: str) -> list[float]:
    return [positive_float(x) for x in _items(text)]


def name_list(text: str) -> list[str]:
    return _items(text)


def names_among(known: Iterable[str]) -> Callable[[str], list[str]]:
    """A type for a comma-separated list whose items must be in `known`."""
    known = list(known)

    def names(text: str) -> list[str]:
        items = _items(text)
        unknown = [item for item in items if item not in known]
        if unknown:
            raise ArgumentTypeError(f"unknown {', '.join(map(repr, unknown))}; known: {', '.join(known)}")
        return items
    return names


def mixer_name(text: str) -> str:
    """A mixer of regmem.layers.MIXERS or a recipe:<weights>/<regressor>/<solver> point that builds (checked
    without building it)."""
    from regmem.layers import MIXERS, check_builds, is_mixer_name
    from regmem.layers.engine import parse_recipe_name

    if text in MIXERS:
        return text
    if not is_mixer_name(text):
        raise ArgumentTypeError(f"unknown mixer {text!r}; known: {', '.join(MIXERS)}, or "
                                "recipe:<weights>/<regressor>/<solver> (see `regmem recipes`)")
    try:
        check_builds(parse_recipe_name(text))
    except ValueError as err:
        raise ArgumentTypeError(f"mixer {text!r}: {err}") from None
    return text


def mixer_list(text: str) -> list[str]:
    return [mixer_name(name) for name in _items(text)]


def task_name(text: str) -> str:
    from regmem.tasks import TASKS

    if text not in TASKS:
        raise ArgumentTypeError(f"unknown task {text!r}; known: {', '.join(TASKS)}")
    return text


def preset_name(text: str) -> str:
    from regmem.lab.experiments.presets import PRESETS

    if text not in PRESETS:
        raise ArgumentTypeError(f"unknown preset {text!r}; known: {', '.join(PRESETS)}")
    return text


def assignment(text: str) -> tuple[str, int | float | bool | str]:
    """"FIELD=VALUE" -> (field with - read as _, the value as int, float, bool (true/false) or str)."""
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise ArgumentTypeError(f"expected FIELD=VALUE, got {text!r}")
    key = key.replace("-", "_")
    for kind in (int, float):
        try:
            return key, kind(value)
        except ValueError:
            pass
    return key, {"true": True, "false": False}.get(value.lower(), value)


def mixer_option(text: str) -> tuple[str | None, str, str]:
    """"[MIXER.]OPTION=VALUE" -> (the mixer or None for every mixer, the option with - read as _, the value as
    text); the option's type reads the value once the mixers are known (regmem/layers/options.py)."""
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise ArgumentTypeError(f"expected OPTION=VALUE or MIXER.OPTION=VALUE, got {text!r}")
    mixer, dot, option = key.rpartition(".")
    if dot and not mixer:
        raise ArgumentTypeError(f"expected MIXER.OPTION=VALUE, got {text!r}")
    return (mixer or None), option.replace("-", "_"), value


def config_file(text: str) -> str:
    """A run config (TOML) that exists; its contents are checked once read (experiments/run_config.py)."""
    if not Path(text).is_file():
        raise ArgumentTypeError(f"no file {text!r}")
    return text


def add_config_options(parser: argparse.ArgumentParser) -> None:
    """--config, --model and --mixer-opt: a run's model and mixer from a file and the command line
    (`resolve_config`)."""
    parser.add_argument("--config", type=config_file, default=None, metavar="FILE",
                        help="a TOML file of the run: task, mixer, preset, seed and the tables [task_config], [model], "
                             "[mixer_options], [train] (docs/command-line.md); the command line overrides it; a run "
                             "directory's config.toml trains that run again")
    parser.add_argument("--model", type=assignment, action="append", default=[], metavar="FIELD=VALUE",
                        help="model field over the preset's, repeatable: d_model, n_layers, n_heads, ffn (e.g. "
                             "--model d_model=128 --model ffn=swiglu)")
    parser.add_argument("--mixer-opt", type=mixer_option, action="append", default=[], metavar="[MIXER.]OPT=VALUE",
                        help="a mixer's constructor option, repeatable, read as its type (e.g. --mixer-opt "
                             "block_size=16, --mixer-opt moba.top_k=2, --mixer-opt cms_chunk_sizes=8,32); `regmem "
                             "mixers --describe NAME` lists a mixer's options; an unknown one is refused")


def check_option_mixers(args, mixers: list[str]) -> None:
    """A `--mixer-opt MIXER.OPTION=VALUE` must name a mixer the command trains (else it would do nothing)."""
    unused = sorted({mixer for mixer, _, _ in args.mixer_opt if mixer is not None and mixer not in mixers})
    if unused:
        args.parser.error(f"argument --mixer-opt: options for {', '.join(unused)}, which this command does not train "
                          f"({', '.join(mixers)})")


def check_builds_with(args, preset, mixers: list[str]) -> None:
    """Each mixer builds with the preset's model and its options (on the meta device: nothing is allocated), so a
    value of the right type but out of range (block_size=0, n_heads that do not divide d_model) is a usage error
    before anything runs, naming the flag."""
    import torch

    from regmem.layers import build_mixer

    for mixer in mixers:
        try:
            with torch.device("meta"):
                build_mixer(mixer, preset.d_model, preset.n_heads, **preset.mixer_kwargs.get(mixer, {}))
        except (ValueError, TypeError) as err:
            flag = "--model" if any(n in str(err) for n in ("d_model", "n_heads")) else "--mixer-opt"
            args.parser.error(f"argument {flag}: mixer {mixer!r} with d_model {preset.d_model}, n_heads "
                              f"{preset.n_heads} and options {preset.mixer_kwargs.get(mixer, {})}: {err}")


def run_config(args, **top):
    """The run config of --config (or an empty one) with the command line over it: `top` fields (task, mixer,
    preset, seed, task_config) and --model / --mixer-opt; a file or field that does not read ends the command naming
    its flag (experiments/run_config.py)."""
    from regmem.lab.experiments.run_config import RunConfig, load_config

    try:
        config = load_config(args.config) if args.config else RunConfig()
    except ValueError as err:
        args.parser.error(f"argument --config: {err}")
    try:  # the fields argparse cannot check: --model's
        return config.override(**top, **config_overrides(args))
    except ValueError as err:
        args.parser.error(f"argument --model: {str(err).removeprefix('command line: ')}")


def config_overrides(args) -> dict:
    """The command line's part of a run config (`RunConfig.override`): model fields and mixer options."""
    options: dict = {}
    for mixer, option, value in args.mixer_opt:
        if mixer is None:
            options[option] = value
        else:
            options.setdefault(mixer, {})[option] = value
    return {"model": dict(args.model), "mixer_options": options}
