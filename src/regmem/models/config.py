"""LMConfig: the language model as data (frozen, JSON round-trip, unknown keys are errors)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Literal

from regmem.layers import MIXERS, is_mixer_name
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
    # "relu" | "moe" | "multihead": the associative-memory FFNs of regmem.layers.ffn (arXiv:2505.19488, Sec. 2.1).
    ffn: Literal["swiglu", "cms", "none", "relu", "moe", "multihead"] = "swiglu"
    ffn_expansion: float = 4.0  # SwiGLU hidden width = round(2/3 * ffn_expansion * d_model), LLaMA's sizing
    # ffn="relu" / "multihead" / "moe" with relu experts: m = round(ffn_expansion * d_model) memory slots (two
    # m x d matrices: the parameters of the SwiGLU of the same expansion), kernel ffn_activation ("solu": eq. 16's
    # (k.x) exp(k.x / tau), tau = ffn_solu_temperature or None for sqrt of the key dim).
    ffn_activation: Literal["relu", "solu"] = "relu"
    ffn_solu_temperature: float | None = None
    ffn_heads: int = 4  # ffn="multihead": heads of d_model / ffn_heads channels each
    # ffn="moe": moe_experts experts of width round(m / moe_experts) (m of the expert kind: the memory width for
    # "relu", the SwiGLU width for "swiglu"), each token routed to its moe_top_k most probable experts.
    moe_experts: int = 4
    moe_top_k: int = 2
    moe_expert: Literal["relu", "swiglu"] = "relu"
    # ffn="cms": a Continuum Memory System (regmem.nested.CMS) of cms_levels SwiGLU levels of that width, level l
    # updated in context every cms_chunk_sizes[l] tokens with inner learning rate cms_lr.
    cms_levels: int = 3
    cms_chunk_sizes: tuple[int, ...] = (16, 64, 256)
    cms_lr: float | tuple[float, ...] = 1e-3  # one for every level, or one per level
    cms_variant: Literal["sequential", "nested", "independent"] = "sequential"
    cms_objective: Literal["value", "reconstruct"] = "value"
    tie_embeddings: bool = True
    norm_eps: float = 1e-5
    init_std: float = 0.02  # normal init of embeddings and linear layers (GPT-2)

    def __post_init__(self):
        if isinstance(self.mixer, list):
            object.__setattr__(self, "mixer", tuple(self.mixer))
        for name in self.layer_mixers():
            if not is_mixer_name(name):
                raise ValueError(f"mixer must name mixers from {sorted(MIXERS)} or 'recipe:<weights>/<regressor>/"
                                 f"<solver>', got {name!r}")
        unknown = set(self.mixer_kwargs) - set(MIXERS)
        if unknown:
            raise ValueError(f"mixer_kwargs keys must be mixer names from {sorted(MIXERS)}, got {sorted(unknown)}")
        if self.ffn not in ("swiglu", "cms", "none", "relu", "moe", "multihead"):
            raise ValueError(f"ffn must be 'swiglu', 'cms', 'none', 'relu', 'moe' or 'multihead', got {self.ffn!r}")
        self._check_memory_ffn()
        object.__setattr__(self, "cms_chunk_sizes", tuple(self.cms_chunk_sizes))
        if isinstance(self.cms_lr, list):
            object.__setattr__(self, "cms_lr", tuple(self.cms_lr))
        if len(self.cms_chunk_sizes) != self.cms_levels:
            raise ValueError(f"cms_chunk_sizes lists {len(self.cms_chunk_sizes)} levels but cms_levels = "
                             f"{self.cms_levels}")
        if self.ffn == "cms":
            self.cms_config()  # validates the chunk sizes, lr and variant
        for name in ("vocab_size", "d_model", "n_layers", "n_heads"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")

    def layer_mixers(self) -> list[str]:
        """The mixer name of each layer."""
        names = list(self.mixer) if isinstance(self.mixer, tuple) else self.mixer.split(",")
        if isinstance(self.mixer, tuple) and len(names) != self.n_layers:
            raise ValueError(f"mixer lists {len(names)} layers but n_layers = {self.n_layers}")
        return [names[i % len(names)] for i in range(self.n_layers)]

    def _check_memory_ffn(self) -> None:
        """ValueError naming the field for a bad setting of the associative-memory FFNs (ffn relu/moe/multihead)."""
        for name, choices in (("ffn_activation", ("relu", "solu")), ("moe_expert", ("relu", "swiglu"))):
            if getattr(self, name) not in choices:
                raise ValueError(f"{name} must be one of {choices}, got {getattr(self, name)!r}")
        for name in ("ffn_heads", "moe_experts", "moe_top_k"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.moe_top_k > self.moe_experts:
            raise ValueError(f"moe_top_k must be <= moe_experts = {self.moe_experts}, got {self.moe_top_k}")
        if self.ffn == "multihead" and self.d_model % self.ffn_heads:
            raise ValueError(f"ffn_heads must divide d_model = {self.d_model}, got {self.ffn_heads}")
        if self.ffn_solu_temperature is not None and not self.ffn_solu_temperature > 0:
            raise ValueError(f"ffn_solu_temperature must be > 0 or None, got {self.ffn_solu_temperature}")
        uses_kernel = self.ffn in ("relu", "multihead") or (self.ffn == "moe" and self.moe_expert == "relu")
        if self.ffn_activation != "relu" and not uses_kernel:
            raise ValueError(f"ffn_activation={self.ffn_activation!r} applies to ffn 'relu', 'multihead' or 'moe' "
                             f"with moe_expert='relu', got ffn={self.ffn!r}, moe_expert={self.moe_expert!r}")

    def ffn_hidden(self) -> int:
        return round(2 / 3 * self.ffn_expansion * self.d_model)

    def ffn_memory_width(self) -> int:
        """m, the memory slots of ffn="relu" / "multihead" / relu MoE experts (all experts together)."""
        return round(self.ffn_expansion * self.d_model)

    def cms_config(self) -> CMSConfig:
        return CMSConfig(chunk_sizes=self.cms_chunk_sizes, lr=self.cms_lr, hidden=self.ffn_hidden(),
                         variant=self.cms_variant, objective=self.cms_objective, norm_eps=self.norm_eps)

    def to_dict(self) -> dict:
        d = dataclasses.asdict(self)
        d["mixer"] = list(self.mixer) if isinstance(self.mixer, tuple) else self.mixer
        d["cms_chunk_sizes"] = list(self.cms_chunk_sizes)
        d["cms_lr"] = list(self.cms_lr) if isinstance(self.cms_lr, tuple) else self.cms_lr
        return d

    @classmethod
    def from_dict(cls, d: dict) -> LMConfig:
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = set(d) - known
        if unknown:
            raise ValueError(f"unknown LMConfig keys: {sorted(unknown)}")
        return cls(**d)
