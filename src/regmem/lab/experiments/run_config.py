"""A run described by one TOML file: `regmem train --config run.toml`, `regmem compare --config run.toml`.

    task = "mqar"            # `regmem train`: the task, unless given on the command line
    mixer = "moba"           # `regmem train`: the mixer, unless --mixer
    preset = "quick"         # every field not set here takes the preset's (experiments/presets.py)
    seed = 0

    [task_config]            # fields of the task's config, e.g. num_kv_pairs = 16 (`--set` on the command line)
    [model]                  # d_model, n_layers, n_heads, ffn (`--model d_model=128`)
    [mixer_options]          # the mixer's constructor options (`--mixer-opt block_size=16`; `regmem mixers
                             # --describe moba` lists them): every mixer of the command must take each; a table
                             # [mixer_options.moba] holds options for that mixer only (`--mixer-opt moba.top_k=2`)
    [train]                  # lr, steps, batch_size, optimizer, num_train, num_eval, eval_every, mlp_lr_scale

The command line overrides the file, which overrides the preset. Everything but the seed, the optimiser, the
task's fields (a `regmem train` run's `setting`) and the budget `regmem train` takes as flags resolves into a
`Preset`, so the protocol's run keys (`Run.key`) include the model and the mixer options. Every run directory of
`regmem train` holds its run resolved (`resolved_config`, written as config.toml beside run.json): the task's every
field, the model, the mixer options given, the whole budget; `regmem train --config <run>/config.toml` trains the
same run again, bit for bit on the same kind of machine (tests/experiments/test_run_config.py; another CPU kind
rounds differently, experiments/runs.py).
"""

from __future__ import annotations

import dataclasses
import math
import tomllib
from pathlib import Path

import tomli_w

from regmem.lab.experiments.presets import PRESETS, Preset
from regmem.layers import MIXERS, is_mixer_name
from regmem.layers.options import check_mixer_options

TOP_KEYS = ("task", "mixer", "preset", "seed")
SECTIONS = ("task_config", "model", "mixer_options", "train")
MODEL_FIELDS = {"d_model": int, "n_layers": int, "n_heads": int, "ffn": str}  # the preset's model fields
# [train]: the preset's budget fields, and the run's optimiser
TRAIN_FIELDS = {"lr": float, "steps": int, "batch_size": int, "optimizer": str, "num_train": int, "num_eval": int,
                "eval_every": int, "mlp_lr_scale": float}


@dataclasses.dataclass(frozen=True)
class RunConfig:
    """A run as a config file gives it (module docstring); unset fields are the preset's."""

    task: str | None = None
    mixer: str | None = None
    preset: str = "quick"
    seed: int = 0
    task_config: dict = dataclasses.field(default_factory=dict)
    model: dict = dataclasses.field(default_factory=dict)
    mixer_options: dict = dataclasses.field(default_factory=dict)  # {option: value} or {mixer: {option: value}}
    train: dict = dataclasses.field(default_factory=dict)

    @classmethod
    def from_dict(cls, data: dict, source: str = "config") -> RunConfig:
        """The config a parsed TOML document describes; ValueError naming `source` and the key at fault (unknown
        keys are refused with the known ones)."""
        unknown = sorted(set(data) - set(TOP_KEYS) - set(SECTIONS))
        if unknown:
            raise ValueError(f"{source}: unknown key {', '.join(unknown)}; known: {', '.join(TOP_KEYS + SECTIONS)}")
        for name in SECTIONS:
            if not isinstance(data.get(name, {}), dict):
                raise ValueError(f"{source}: [{name}] must be a table, got {data[name]!r}")
        config = cls(**{k: v for k, v in data.items() if k in TOP_KEYS + SECTIONS})
        config.check(source)
        return config

    def check(self, source: str = "config") -> None:
        """Types and names, before anything is built (the task's fields and the mixers' options are checked when
        the run resolves, against the task and mixers the command trains)."""
        if self.task is not None and not isinstance(self.task, str):
            raise ValueError(f"{source}: task must be a task name, got {self.task!r}")
        if self.mixer is not None and not (isinstance(self.mixer, str) and is_mixer_name(self.mixer)):
            raise ValueError(f"{source}: mixer must be one of {', '.join(MIXERS)} or recipe:<...>, got {self.mixer!r}")
        if not isinstance(self.preset, str) or self.preset not in PRESETS:
            raise ValueError(f"{source}: preset must be one of {', '.join(PRESETS)}, got {self.preset!r}")
        if isinstance(self.seed, bool) or not isinstance(self.seed, int) or not 0 <= self.seed < 2**63:
            raise ValueError(f"{source}: seed must be an int in [0, 2**63), got {self.seed!r}")
        for section, fields in (("model", MODEL_FIELDS), ("train", TRAIN_FIELDS)):
            unknown = sorted(set(getattr(self, section)) - set(fields))
            if unknown:
                raise ValueError(f"{source}: [{section}] has no field {', '.join(map(repr, unknown))}; known: "
                                 f"{', '.join(fields)}")
            checked = {name: _checked(fields[name], value, f"{source}: {section}.{name}")
                       for name, value in getattr(self, section).items()}
            object.__setattr__(self, section, checked)  # ints given for floats become floats (a frozen dataclass)

    def override(self, **given) -> RunConfig:
        """This config with the command line's values over it: top-level fields where not None, the sections'
        entries merged key by key (a mixer's table of options merged likewise)."""
        updates = {k: v for k, v in given.items() if k in TOP_KEYS and v is not None}
        for name in SECTIONS:
            if given.get(name):
                updates[name] = _merge(getattr(self, name), given[name])
        flat = {k: v for k, v in (given.get("mixer_options") or {}).items() if not isinstance(v, dict)}
        if flat:  # a plain option on the command line beats the file's, its per-mixer tables included
            updates["mixer_options"] = {k: {**v, **flat} if isinstance(v, dict) else v
                                        for k, v in updates["mixer_options"].items()}
        config = dataclasses.replace(self, **updates)
        config.check("command line")
        return config


def _checked(kind: type, value, name: str):
    if kind is int and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
        raise ValueError(f"{name} must be a positive int, got {value!r}")
    if kind is float and (isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value)
                          or value <= 0):
        raise ValueError(f"{name} must be a positive number, got {value!r}")
    if kind is str and not isinstance(value, str):
        raise ValueError(f"{name} must be a string, got {value!r}")
    return float(value) if kind is float else value


def _merge(base: dict, over: dict) -> dict:
    merged = dict(base)
    for key, value in over.items():
        merged[key] = _merge(merged[key], value) if isinstance(value, dict) and isinstance(merged.get(key), dict) \
            else value
    return merged


def load_config(path: str | Path) -> RunConfig:
    """The RunConfig a TOML file holds; ValueError naming the file and what is wrong (missing, not TOML, keys)."""
    path = Path(path)
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ValueError(f"config: no file {str(path)!r}") from None
    except (OSError, UnicodeDecodeError) as err:
        raise ValueError(f"config: cannot read {str(path)!r} ({err})") from None
    except tomllib.TOMLDecodeError as err:
        raise ValueError(f"config: {str(path)!r} is not valid TOML ({err})") from None
    return RunConfig.from_dict(data, source=f"config {str(path)!r}")


def options_for(config: RunConfig, mixer: str) -> dict:
    """The mixer options `config` gives `mixer`, read as its option types: the flat ones (every mixer of a command
    must take them) under the mixer's own table. ValueError naming the mixer and option otherwise."""
    flat = {k: v for k, v in config.mixer_options.items() if not isinstance(v, dict)}
    tables = {k: v for k, v in config.mixer_options.items() if isinstance(v, dict)}
    unknown = sorted(name for name in tables if not is_mixer_name(name))
    if unknown:
        raise ValueError(f"mixer_options: a table must be named after a mixer, got {', '.join(unknown)}")
    return check_mixer_options(mixer, {**flat, **tables.get(mixer, {})})


def resolve_preset(config: RunConfig, mixers: list[str]) -> Preset:
    """The preset `config` names with its model, mixer options and budget fields over it (steps, batch size and lr
    as the preset's defaults; a command's own flags override them per run). ValueError naming what is wrong."""
    preset = PRESETS[config.preset]
    fields = {k: v for k, v in {**config.model, **config.train}.items() if k != "optimizer"}
    if "ffn" in fields:
        from regmem.models.ffn import FFNKind

        kinds = FFNKind.__args__
        if fields["ffn"] not in kinds:
            raise ValueError(f"model.ffn must be one of {', '.join(kinds)}, got {fields['ffn']!r}")
    mixer_kwargs = dict(preset.mixer_kwargs)
    for mixer in mixers:
        options = options_for(config, mixer)
        if options:
            mixer_kwargs[mixer] = {**mixer_kwargs.get(mixer, {}), **options}
    return dataclasses.replace(preset, **fields, mixer_kwargs=mixer_kwargs)


def resolved_config(run, preset: Preset, task_config: dict) -> dict:
    """Everything that fixes `run` (experiments/runs.py) under `preset`, as a config file holds it (module
    docstring), with the task's every field `task_config`: loading it gives the same run. None values (which TOML
    cannot hold) are left out of the task's fields, where the task's default gives them back, and written "none"
    among the mixer options, which read it as None."""
    return {
        "task": run.task, "mixer": run.mixer, "preset": preset.name, "seed": run.seed,
        "task_config": {k: _toml(v) for k, v in task_config.items() if v is not None},
        "model": {name: getattr(preset, name) for name in MODEL_FIELDS},
        "mixer_options": {k: _toml(v) for k, v in preset.mixer_kwargs.get(run.mixer, {}).items()},
        "train": {"lr": run.lr or preset.lr, "steps": run.steps or preset.steps,
                  "batch_size": run.batch_size or preset.batch_size, "optimizer": run.optimizer,
                  "num_train": preset.num_train, "num_eval": preset.num_eval, "eval_every": preset.eval_every,
                  "mlp_lr_scale": preset.mlp_lr_scale},
    }


def _toml(value):
    if value is None:
        return "none"
    if isinstance(value, tuple | list | set | frozenset):
        return [_toml(v) for v in (sorted(value) if isinstance(value, set | frozenset) else value)]
    return value


def config_text(data: dict) -> str:
    """A config (`resolved_config`) as TOML, with a first line saying how to train it again."""
    return "# the run as resolved: `regmem train --config <this file>` trains it again\n" + tomli_w.dumps(data)
