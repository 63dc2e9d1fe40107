"""LMConfig: the language model as data (frozen, JSON round-trip, unknown keys are errors)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

from regmem.layers import MIXERS, is_mixer_name
from regmem.layers.ffn import check_heads_divide
from regmem.models.ffn import (
    FFNConfig,
    FFNKind,
    MultiHeadFFNConfig,
    SwiGLUConfig,
    ffn_from_dict,
    ffn_to_dict,
    resolve_ffn,
)
from regmem.nested import CMSConfig


@dataclass(frozen=True)
class LMConfig:
    vocab_size: int
    d_model: int = 128
    n_layers: int = 2
    n_heads: int = 4
    # One name, a comma pattern repeated over the layers ("gla,gla,gla,attn"), or one name per layer.
    mixer: str | tuple[str, ...] = "gla"
    # Constructor arguments per mixer name, e.g. {"attn": {"qk_norm": True}, "gla": {"expand_v": 2.0}}.
    mixer_kwargs: dict[str, dict] = field(default_factory=dict)
    # The FFN of every block: a config of regmem/models/ffn.py (SwiGLUConfig, CMSConfig, NoFFN, MemoryFFNConfig,
    # MultiHeadFFNConfig, MoEConfig), or the name of its kind ("cms", "none", ...) for that config's defaults.
    ffn: FFNConfig | FFNKind = field(default_factory=SwiGLUConfig)
    tie_embeddings: bool = True
    norm_eps: float = 1e-5
    init_std: float = 0.02  # normal init of embeddings and linear layers (GPT-2)

    def __post_init__(self):
        if isinstance(self.mixer, list):
            object.__setattr__(self, "mixer", tuple(self.mixer))
        layers = self.layer_mixers()
        for name in layers:
            if not is_mixer_name(name):
                raise ValueError(f"mixer must name mixers from {sorted(MIXERS)} or 'recipe:<weights>/<regressor>/"
                                 f"<solver>', got {name!r}")
        unknown = set(self.mixer_kwargs) - set(MIXERS)
        if unknown:
            raise ValueError(f"mixer_kwargs keys must be mixer names from {sorted(MIXERS)}, got {sorted(unknown)}")
        unused = set(self.mixer_kwargs) - set(layers)
        if unused:
            raise ValueError(f"mixer_kwargs has options for mixers no layer uses: {sorted(unused)} (layers: "
                             f"{sorted(set(layers))})")
        object.__setattr__(self, "ffn", resolve_ffn(self.ffn))
        if isinstance(self.ffn, MultiHeadFFNConfig):
            check_heads_divide(self.ffn.heads, self.d_model, name="ffn.heads")
        for name in ("vocab_size", "d_model", "n_layers", "n_heads"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")

    def layer_mixers(self) -> list[str]:
        """The mixer name of each layer."""
        return layer_mixers(self.mixer, self.n_layers)

    def to_dict(self) -> dict:
        d = dataclasses.asdict(self)
        d["mixer"] = list(self.mixer) if isinstance(self.mixer, tuple) else self.mixer
        d["ffn"] = ffn_to_dict(self.ffn)
        return {**d, "format": FORMAT}

    @classmethod
    def from_dict(cls, d: dict) -> LMConfig:
        """The inverse of to_dict. A config.json of the flat format written before the typed FFN configs
        (`"ffn": "cms", "cms_chunk_sizes": [...], "moe_experts": 4, ...`) loads as the same model, and a config
        without "format" (written before format 2) keeps the defaults it was trained with (DEFAULTS_BEFORE_2)."""
        d = dict(d)
        version = d.pop("format", 1)
        if version not in range(1, FORMAT + 1):
            raise ValueError(f"format must be 1 to {FORMAT} (this version of regmem), got {version!r}")
        if FLAT_FFN_KEYS & set(d):
            d = _from_flat(d)
        if version < 2:
            d = _defaults_before_2(d)
        if version < 3:
            d = _mixer_defaults(d, DEFAULTS_BEFORE_3)
        if version < 4:
            d = _mixer_defaults(d, DEFAULTS_BEFORE_4)
        if version < 5:
            d = _mixer_defaults(d, DEFAULTS_BEFORE_5)
        if version < 6:
            d = _mixer_defaults(d, DEFAULTS_BEFORE_6)
        if version < 7:
            d = _mixer_defaults(d, DEFAULTS_BEFORE_7)
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = set(d) - known
        if unknown:
            raise ValueError(f"unknown LMConfig keys: {sorted(unknown)}")
        if isinstance(d.get("ffn"), dict):
            d = {**d, "ffn": ffn_from_dict(d["ffn"])}
        return cls(**d)


FORMAT = 7  # of to_dict's output; 1 (no "format" key) is every config written before format 2

# Mixer options whose defaults changed with format 2 (regmem/layers/self_modifying.py, regmem/nested/cms.py): a
# config without "format" was trained with these values, so they are filled in where it does not set them. The
# CMS's width then was the LM's SwiGLU width, round(8/3 d_model), for every level (now split over the levels).
DEFAULTS_BEFORE_2 = {
    "self_modifying_titans": {"step_rule": "explicit", "inputs": "shared", "momentum": False, "eta_max": 0.05,
                              "layer_norm": False},
    "hope": {"step_rule": "explicit", "inputs": "shared", "momentum": False, "eta_max": 0.05, "layer_norm": False},
}
CMS_BEFORE_2 = {"step_rule": "explicit"}  # and hidden = round(8/3 d_model): the CMS of an FFN, Hope, Hope-Attention
# Format 3: every memory of self-modifying Titans regresses onto v_t (eq. 84), no longer its own M(v_t) (eq. 87).
DEFAULTS_BEFORE_3 = {"self_modifying_titans": {"self_values": True}, "hope": {"self_values": True}}
# Format 4: the memories' layer norms have a learnable affine, the generating memories' gain starting small.
DEFAULTS_BEFORE_4 = {"self_modifying_titans": {"ln_affine": False}, "hope": {"ln_affine": False}}
# Format 5: self-modifying Titans' memories step without eq. 88's DGD term (regmem/layers/self_modifying.py).
DEFAULTS_BEFORE_5 = {"self_modifying_titans": {"dgd": True}, "hope": {"dgd": True}}
# Format 6: self-modifying Titans' main memory is Titans-MLP's (4 d wide, GELU), no longer the generators' shape.
_GENERATORS_MEMORY = {"memory_expand": 0, "memory_activation": None}
DEFAULTS_BEFORE_6 = {"self_modifying_titans": _GENERATORS_MEMORY, "hope": _GENERATORS_MEMORY}
# Format 7: the paper's mechanisms by default (regmem/layers/self_modifying.py): every memory regresses onto its own
# M(v_t) with DGD's term. Before it, the stand-in's (regmem/layers/hope.py: HopeStandIn).
DEFAULTS_BEFORE_7 = {"self_modifying_titans": {"self_values": False, "dgd": False},
                     "hope": {"self_values": False, "dgd": False}}


def _defaults_before_2(d: dict) -> dict:
    d_model = d.get("d_model", LMConfig.d_model)
    cms_then = {**CMS_BEFORE_2, "hidden": round(8 / 3 * d_model)}
    ffn = d.get("ffn")
    if isinstance(ffn, dict) and ffn.get("kind") == "cms":
        d = {**d, "ffn": {**ffn, **{k: v for k, v in cms_then.items() if not ffn.get(k)}}}
    elif ffn == "cms":
        d = {**d, "ffn": {"kind": "cms", **cms_then}}
    elif isinstance(ffn, CMSConfig):
        d = {**d, "ffn": dataclasses.replace(ffn, hidden=ffn.hidden or cms_then["hidden"])}
    layers = set(layer_mixers(d.get("mixer", LMConfig.mixer), d.get("n_layers", LMConfig.n_layers)))
    kwargs = d.get("mixer_kwargs", {})
    if not isinstance(kwargs, dict):
        return d
    kwargs = dict(kwargs)
    for name in layers & {"self_modifying_titans", "hope", "hope_attention"}:
        options = {**DEFAULTS_BEFORE_2.get(name, {}), **kwargs.get(name, {})}
        if name != "self_modifying_titans" and options.get("cms", True):
            options = {**{f"cms_{k}": v for k, v in cms_then.items()}, **options}
            options["cms_hidden"] = options["cms_hidden"] or cms_then["hidden"]
        kwargs[name] = options
    return {**d, "mixer_kwargs": kwargs}


def _mixer_defaults(d: dict, defaults: dict) -> dict:
    """d with each of its layers' mixers given `defaults[name]` where its mixer_kwargs do not set them."""
    kwargs = d.get("mixer_kwargs", {})
    if not isinstance(kwargs, dict):
        return d
    layers = set(layer_mixers(d.get("mixer", LMConfig.mixer), d.get("n_layers", LMConfig.n_layers)))
    kwargs = {**kwargs, **{name: {**defaults[name], **kwargs.get(name, {})} for name in layers & set(defaults)}}
    return {**d, "mixer_kwargs": kwargs}


def layer_mixers(mixer: str | tuple[str, ...] | list[str], n_layers: int) -> list[str]:
    """The mixer name of each of `n_layers` layers: one name, a comma pattern repeated, or one name per layer."""
    names = list(mixer) if isinstance(mixer, tuple | list) else mixer.split(",")
    if isinstance(mixer, tuple | list) and len(names) != n_layers:
        raise ValueError(f"mixer lists {len(names)} layers but n_layers = {n_layers}")
    return [names[i % len(names)] for i in range(n_layers)]


# The flat FFN fields of LMConfig's JSON before the typed FFN configs: each old key and the field it became, in the
# configs that have that field. Keys of other kinds than the file's ffn never reached the model and are dropped.
_FLAT_FFN_FIELDS = {"ffn_expansion": "expansion", "ffn_activation": "activation", "ffn_solu_temperature": "temperature",
                    "ffn_heads": "heads", "moe_experts": "experts", "moe_top_k": "top_k", "moe_expert": "expert",
                    "cms_chunk_sizes": "chunk_sizes", "cms_lr": "lr", "cms_variant": "variant",
                    "cms_objective": "objective"}
FLAT_FFN_KEYS = {*_FLAT_FFN_FIELDS, "cms_levels"}


def _from_flat(d: dict) -> dict:
    """A flat (old-format) config dict with its FFN fields gathered into the FFN config of its kind. Absent keys
    take the new config's defaults, which are the flat format's; the CMS's width was the SwiGLU's of ffn_expansion
    and its norm eps the model's (still so: regmem/models/ffn.py)."""
    flat = {k: v for k, v in d.items() if k in FLAT_FFN_KEYS}
    rest = {k: v for k, v in d.items() if k not in FLAT_FFN_KEYS}
    kind = rest.get("ffn", "swiglu")  # the flat format's default kind
    if not isinstance(kind, str):
        raise ValueError(f"a flat config (with keys {sorted(flat)}) names its ffn by kind, got ffn={kind!r}")
    config_class = type(resolve_ffn(kind))
    names = {f.name for f in dataclasses.fields(config_class)}
    options = {new: flat[old] for old, new in _FLAT_FFN_FIELDS.items() if old in flat and new in names}
    if options.get("activation") != "solu":  # the flat format allowed a temperature that nothing read
        options.pop("temperature", None)
    if config_class is CMSConfig:
        if "ffn_expansion" in flat:
            d_model = rest.get("d_model", LMConfig.d_model)
            options["hidden"] = SwiGLUConfig(expansion=flat["ffn_expansion"]).hidden(d_model)
        levels = len(options.get("chunk_sizes", CMSConfig.chunk_sizes))
        if flat.get("cms_levels", levels) != levels:
            raise ValueError(f"cms_chunk_sizes lists {levels} levels but cms_levels = {flat['cms_levels']}")
        options["step_rule"] = "explicit"  # the only rule before CMSConfig.step_rule
    layers = set(layer_mixers(rest.get("mixer", LMConfig.mixer), rest.get("n_layers", LMConfig.n_layers)))
    kwargs = rest.get("mixer_kwargs", {})
    if isinstance(kwargs, dict):  # the flat format kept options of mixers no layer used
        kwargs = {k: v for k, v in kwargs.items() if k in layers}
        rest = {**rest, "mixer_kwargs": kwargs}
    return {**rest, "ffn": config_class(**options)}
