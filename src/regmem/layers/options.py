"""Each mixer's options: the keyword arguments its constructor takes beyond `d_model` and `n_heads`, with their
types and defaults, and how a value from the command line or a config file becomes one of them.

A mixer's constructor often takes a few options of its own and hands the rest (`**kwargs`) to the class it
extends (GatedDeltaNet -> DeltaNet -> MemoryMixer), so no single signature lists them. `mixer_options` follows the
constructors along the method resolution order, as `super().__init__` does:
- each constructor's named parameters are options, unless a constructor before it already named them;
- a keyword that a constructor passes to `super().__init__` itself (DeltaProduct's `qk_norm=True`, TTT's
  `inner_model=...`) is fixed there: the classes after it do not offer it (read from the constructor's source);
- a constructor without `**kwargs` ends the walk, and so does one whose class names `options_config`, a dataclass
  whose fields are the options its `**kwargs` take (SelfModifyingTitans: SelfModifyingConfig);
- a class's `option_defaults` replaces the defaults it fixes by merging (the stand-in mixers' `STAND_IN`).

`Mixer`'s metaclass gives every mixer class the resulting signature (`mixer_signature`), so `help(GatedDeltaNet)`
and `inspect.signature(GatedDeltaNet)` list every option with its default; `regmem mixers --describe NAME` prints
them. `coerce` reads a value as an option's type: text from `--mixer-opt key=value` ("16", "true", "0.1,0.2",
"none"), or a typed value from a TOML file; tests/layers/test_mixer_options.py builds every mixer with every option
given at its default and checks the model is the default one.
"""

from __future__ import annotations

import ast
import dataclasses
import functools
import inspect
import math
import textwrap
import types
import typing
from dataclasses import dataclass
from typing import Literal, Union

SIZES = ("self", "d_model", "n_heads")  # every mixer's positional sizes, not options
_EMPTY = inspect.Parameter.empty


@dataclass(frozen=True)
class MixerOption:
    name: str
    kind: object  # the evaluated annotation (int, float | None, Literal[...], tuple[int, ...]); _EMPTY if none
    default: object  # _EMPTY for an option without a default
    owner: str  # the class (or options dataclass) that declares it

    def type_text(self) -> str:
        return type_text(self.kind)

    def settable(self) -> bool:
        """Whether a value can be given as text or a TOML value (a number, bool, string, tuple or None)."""
        return _settable(self.kind)


def type_text(kind) -> str:
    if kind is _EMPTY:
        return "any"
    if isinstance(kind, str):
        return kind
    origin, args = typing.get_origin(kind), typing.get_args(kind)
    if origin is Literal:
        return " | ".join(repr(a) for a in args)
    if origin in (Union, types.UnionType):
        return " | ".join(type_text(a) for a in args)
    if origin is tuple:
        if len(args) == 2 and args[1] is Ellipsis:
            return f"tuple[{type_text(args[0])}, ...]"
        return f"tuple[{', '.join(type_text(a) for a in args)}]"
    if origin is frozenset:
        return f"set of {type_text(args[0])}" if args else "set"
    if kind is type(None):
        return "None"
    return getattr(kind, "__name__", str(kind))


def _settable(kind) -> bool:
    if kind is _EMPTY or isinstance(kind, str):  # unannotated, or unevaluated: read by guessing (`_guess`)
        return True
    if kind in (int, float, bool, str, type(None), frozenset):
        return True
    origin, args = typing.get_origin(kind), typing.get_args(kind)
    if origin is Literal:
        return True
    if origin in (Union, types.UnionType):
        return any(_settable(a) for a in args)
    if origin in (tuple, frozenset):
        return all(_settable(a) for a in args if a is not Ellipsis)
    return False


def _hints(obj) -> dict:
    """The evaluated annotations of a function or dataclass; where one cannot be evaluated, all keep their text."""
    try:
        return typing.get_type_hints(obj)
    except (NameError, TypeError):  # then every annotation stays text, and its values are read by guessing
        return dict(getattr(obj, "__annotations__", {}))


def _fixed_keywords(init) -> set[str]:
    """The keyword names `init` passes to `super().__init__(...)` itself."""
    try:
        tree = ast.parse(textwrap.dedent(inspect.getsource(init)))
    except (OSError, TypeError, SyntaxError):
        return set()
    fixed = set()
    for node in ast.walk(tree):
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "__init__"
                and isinstance(node.func.value, ast.Call) and isinstance(node.func.value.func, ast.Name)
                and node.func.value.func.id == "super"):
            fixed |= {kw.arg for kw in node.keywords if kw.arg is not None}
    return fixed


@functools.cache
def class_options(cls: type) -> dict[str, MixerOption]:
    """The options of mixer class `cls`, in the order its constructors declare them (module docstring)."""
    options: dict[str, MixerOption] = {}
    fixed: set[str] = set()

    def add(name, kind, default, owner):
        if name not in options and name not in fixed:
            options[name] = MixerOption(name, kind, default, owner)

    for klass in cls.__mro__:
        if klass is object or klass.__module__.startswith("torch."):  # nn.Module: past the mixer classes
            break
        init = klass.__dict__.get("__init__")
        if init is None:
            continue
        hints, more = _hints(init), False
        for p in inspect.signature(init).parameters.values():
            if p.kind is p.VAR_KEYWORD:
                more = True
            elif p.kind is not p.VAR_POSITIONAL and p.name not in SIZES:
                add(p.name, hints.get(p.name, p.annotation), p.default, klass.__name__)
        fixed |= _fixed_keywords(init)
        config = klass.__dict__.get("options_config")
        if config is not None:
            hints = _hints(config)
            for f in dataclasses.fields(config):
                default = f.default if f.default is not dataclasses.MISSING else (
                    f.default_factory() if f.default_factory is not dataclasses.MISSING else _EMPTY)
                add(f.name, hints.get(f.name, f.type), default, config.__name__)
            break
        if not more:
            break
    for klass in reversed(cls.__mro__):  # the most derived class's defaults win
        for name, value in klass.__dict__.get("option_defaults", {}).items():
            if name in options:
                options[name] = dataclasses.replace(options[name], default=value)
    return options


def mixer_class(name: str) -> type:
    """The class a mixer name builds (a key of MIXERS; a recipe:... name builds an EngineMixer or a named mixer)."""
    from regmem.layers.engine import PREFIX, EngineMixer, parse_recipe_name
    from regmem.layers.registry import MIXERS, named_mixer

    if name in MIXERS:
        return MIXERS[name]
    if name.startswith(PREFIX):
        named = named_mixer(parse_recipe_name(name))
        return MIXERS[named] if named is not None else EngineMixer
    raise ValueError(f"mixer must be one of {sorted(MIXERS)} or 'recipe:<weights>/<regressor>/<solver>', got {name!r}")


def mixer_options(mixer: str | type) -> dict[str, MixerOption]:
    """The options of a mixer (a name, as `build_mixer` takes it, or a class). An EngineMixer's `recipe` is set by
    its name and is not an option."""
    options = dict(class_options(mixer if isinstance(mixer, type) else mixer_class(mixer)))
    options.pop("recipe", None)
    return options


def mixer_signature(cls: type) -> inspect.Signature:
    """`cls(d_model, n_heads, *, <every option>)`: what `inspect.signature` and `help` show for a mixer class."""
    sizes = [inspect.Parameter(n, inspect.Parameter.POSITIONAL_OR_KEYWORD, annotation=int) for n in SIZES[1:]]
    options = [inspect.Parameter(o.name, inspect.Parameter.KEYWORD_ONLY, default=o.default,
                                 annotation=o.type_text() if o.kind is not _EMPTY else _EMPTY)
               for o in class_options(cls).values()]
    return inspect.Signature(sizes + options)


def coerce(kind, value, name: str = "value"):
    """`value` as an option of type `kind`: text is parsed ("16", "0.1", "true", "a,b" for a tuple, "none" for
    None), a typed value (from TOML or JSON) is checked, a list becomes a tuple. ValueError naming `name` and the
    expected type otherwise."""
    try:
        return _coerce(kind, value)
    except (ValueError, TypeError):
        raise ValueError(f"{name}: expected {type_text(kind)}, got {value!r}") from None


_TRUE, _FALSE = ("true", "yes", "1"), ("false", "no", "0")


def _coerce(kind, value):
    if kind is _EMPTY or isinstance(kind, str):  # unannotated, or an annotation that could not be evaluated
        return _guess(value) if isinstance(value, str) else value
    origin, args = typing.get_origin(kind), typing.get_args(kind)
    if origin in (Union, types.UnionType):
        # None first (for "none"); then each member, bool before int as given: the first that reads the value
        for arg in sorted(args, key=lambda a: a is not type(None)):
            try:
                return _coerce(arg, value)
            except (ValueError, TypeError):
                continue
        raise ValueError(value)
    if origin is Literal:
        for arg in args:
            if value == arg and type(value) is type(arg) or isinstance(value, str) and value == str(arg):
                return arg
        raise ValueError(value)
    if origin is tuple:
        items = [x.strip() for x in value.split(",")] if isinstance(value, str) else value
        if not isinstance(items, list | tuple):
            raise TypeError(value)
        kinds = [args[0]] * len(items) if len(args) == 2 and args[1] is Ellipsis else list(args)
        if len(kinds) != len(items):
            raise ValueError(value)
        return tuple(_coerce(k, x) for k, x in zip(kinds, items, strict=True))
    if kind is frozenset or origin is frozenset:  # a set of names, e.g. "memory,eta" or ["memory", "eta"]
        items = [x.strip() for x in value.split(",") if x.strip()] if isinstance(value, str) else value
        if not isinstance(items, list | tuple | set | frozenset):
            raise TypeError(value)
        # sorted, as a tuple: JSON-ready for run keys and configs; the options' owners make their own sets of it
        return tuple(sorted({_coerce(args[0], x) if args else x for x in items}))
    if kind is type(None):
        if value is None or isinstance(value, str) and value.lower() == "none":
            return None
        raise ValueError(value)
    if kind is bool:
        if isinstance(value, bool):
            return value
        if isinstance(value, str) and value.lower() in _TRUE + _FALSE:
            return value.lower() in _TRUE
        raise ValueError(value)
    if kind is int:
        if isinstance(value, str):
            return int(value)
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        raise TypeError(value)
    if kind is float:
        number = float(value) if isinstance(value, str) else value
        if isinstance(number, bool) or not isinstance(number, int | float) or not math.isfinite(number):
            raise ValueError(value)
        return float(number)
    if kind is str:
        if isinstance(value, str):
            return value
        raise TypeError(value)
    raise TypeError(f"options of type {type_text(kind)} are set from Python only")


def _guess(text: str):
    """An unannotated option's text as an int, float, bool, None or the text itself."""
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return {"true": True, "false": False, "none": None}.get(text.lower(), text)


def check_mixer_options(mixer: str, options: dict) -> dict:
    """`options` ({name: text or typed value}) read as `mixer`'s option types; ValueError naming the mixer and the
    unknown names with the list of its options, or the option whose value does not read (`coerce`)."""
    known = mixer_options(mixer)
    unknown = [name for name in options if name not in known]
    if unknown:
        raise ValueError(f"mixer {mixer!r} has no option {', '.join(map(repr, unknown))}; its options: "
                         f"{', '.join(known)} (`regmem mixers --describe {mixer}`)")
    checked = {}
    for name, value in options.items():
        option = known[name]
        if not option.settable():
            raise ValueError(f"mixer {mixer!r} option {name!r} is of type {option.type_text()}, set from Python only")
        checked[name] = coerce(option.kind, value, name=f"mixer {mixer!r} option {name!r}")
    return checked
