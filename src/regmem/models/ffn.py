"""The FFN of an LM block, as a tagged union of frozen configs: one class per kind, each default written once there.

    kind         config              module (x: [B, T, d_model] -> [B, T, d_model])
    "swiglu"     SwiGLUConfig        SwiGLU of width round(2/3 * expansion * d_model) (LLaMA's sizing)
    "cms"        CMSConfig           a Continuum Memory System (regmem/nested/cms.py; Nested Learning, Sec. 7.1)
    "none"       NoFFN               no FFN: the mixer is the whole block
    "relu"       MemoryFFNConfig     FFN(x) = sum_i v_i kappa(k_i, x) over round(expansion * d_model) memory slots
    "multihead"  MultiHeadFFNConfig  the same slots cut into `heads` heads
    "moe"        MoEConfig           `experts` experts, each token routed to its `top_k` most probable ones

The last three are the associative-memory FFNs of regmem/layers/ffn.py (arXiv:2505.19488, Sec. 2.1). `LMConfig.ffn`
holds one of these configs; `LMConfig(ffn="cms")` names a kind and means its config with the defaults.
`ffn_to_dict` / `ffn_from_dict` write and read one as JSON, `{"kind": "cms", "chunk_sizes": [16, 64, 256], ...}`.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import ClassVar, Literal

import torch.nn.functional as F
from torch import nn

from regmem.layers.ffn import (
    Activation,
    Expert,
    MemoryFFN,
    MoEFFN,
    MultiHeadFFN,
    check_activation,
    check_expert,
    check_positive,
    check_top_k,
)
from regmem.nested import CMS, CMSConfig

FFNKind = Literal["swiglu", "cms", "none", "relu", "moe", "multihead"]


class SwiGLU(nn.Module):
    def __init__(self, d_model: int, hidden: int):
        super().__init__()
        self.gate_up = nn.Linear(d_model, 2 * hidden, bias=False)
        self.down = nn.Linear(hidden, d_model, bias=False)

    def forward(self, x):
        gate, up = self.gate_up(x).chunk(2, dim=-1)  # [..., hidden] each
        return self.down(F.silu(gate) * up)


@dataclass(frozen=True, kw_only=True)
class _Expansion:
    expansion: float = 4.0  # the FFN's width in units of d_model (each kind says how)

    def __post_init__(self):
        if isinstance(self.expansion, bool) or not self.expansion > 0:
            raise ValueError(f"expansion must be > 0, got {self.expansion!r}")


@dataclass(frozen=True, kw_only=True)
class SwiGLUConfig(_Expansion):
    """SwiGLU(x) = W_down (silu(W_gate x) * W_up x), hidden width round(2/3 * expansion * d_model)."""

    kind: ClassVar[Literal["swiglu"]] = "swiglu"

    def hidden(self, d_model: int) -> int:
        return round(2 / 3 * self.expansion * d_model)


@dataclass(frozen=True)
class NoFFN:
    """No FFN: the block is norm -> mixer -> residual."""

    kind: ClassVar[Literal["none"]] = "none"


@dataclass(frozen=True, kw_only=True)
class _MemoryKernel(_Expansion):
    """m = round(expansion * d_model) memory slots (two m x d matrices: the parameters of the SwiGLU of the same
    expansion) read through the kernel `activation` ("solu": eq. 16's (k.x) exp(k.x / tau), tau = `temperature`)."""

    activation: Activation = "relu"  # eq. 14-15's kernel
    temperature: float | None = None  # tau of "solu"; None: sqrt of the key dim, as for attention

    def __post_init__(self):
        super().__post_init__()
        check_activation(self.activation, self.temperature)

    def memory_width(self, d_model: int) -> int:
        """m, the memory slots (of all heads or experts together)."""
        return round(self.expansion * d_model)


@dataclass(frozen=True, kw_only=True)
class MemoryFFNConfig(_MemoryKernel):
    """eq. 14 of arXiv:2505.19488: FFN(x) = sum_i v_i kappa(k_i, x) over the memory slots."""

    kind: ClassVar[Literal["relu"]] = "relu"


@dataclass(frozen=True, kw_only=True)
class MultiHeadFFNConfig(_MemoryKernel):
    """The memory FFN's slots cut into `heads` heads of d_model / heads channels each (Sec. 2.1, "Multihead")."""

    kind: ClassVar[Literal["multihead"]] = "multihead"
    heads: int = 4  # heads of d_model / 4 channels (must divide d_model)

    def __post_init__(self):
        super().__post_init__()
        check_positive("heads", self.heads)  # that heads divides d_model is LMConfig's check


@dataclass(frozen=True, kw_only=True)
class MoEConfig(_MemoryKernel):
    """eq. 24: `experts` experts of width round(m / experts), m the width of the `expert` kind (the memory width for
    "relu", the SwiGLU width for "swiglu"); each token is routed to its `top_k` most probable experts. `activation`
    and `temperature` are the kernel of relu experts."""

    kind: ClassVar[Literal["moe"]] = "moe"
    experts: int = 4  # the m slots split into 4 experts
    top_k: int = 2  # experts each token is routed to
    expert: Expert = "relu"  # eq. 24's memories; "swiglu": eq. 28's gated experts

    def __post_init__(self):
        super().__post_init__()
        check_positive("experts", self.experts)
        check_positive("top_k", self.top_k)
        check_top_k(self.top_k, self.experts, experts_name="experts")
        check_expert(self.expert, self.activation)

    def expert_width(self, d_model: int) -> int:
        width = self.memory_width(d_model) if self.expert == "relu" else SwiGLUConfig(
            expansion=self.expansion).hidden(d_model)
        return max(1, round(width / self.experts))


FFNConfig = SwiGLUConfig | CMSConfig | NoFFN | MemoryFFNConfig | MultiHeadFFNConfig | MoEConfig
FFN_CONFIGS: dict[str, type] = {cls.kind: cls for cls in (SwiGLUConfig, CMSConfig, NoFFN, MemoryFFNConfig,
                                                          MoEConfig, MultiHeadFFNConfig)}


def resolve_ffn(ffn: FFNConfig | FFNKind) -> FFNConfig:
    """A config, or the kind name standing for its config with the defaults."""
    if isinstance(ffn, str):
        if ffn not in FFN_CONFIGS:
            raise ValueError(f"ffn must be one of {tuple(FFN_CONFIGS)} or an FFN config, got {ffn!r}")
        return FFN_CONFIGS[ffn]()
    if type(ffn) not in FFN_CONFIGS.values():
        raise ValueError(f"ffn must be one of {tuple(FFN_CONFIGS)} or an FFN config "
                         f"({', '.join(c.__name__ for c in FFN_CONFIGS.values())}), got {ffn!r}")
    return ffn


def ffn_to_dict(ffn: FFNConfig) -> dict:
    """{"kind": ..., field: value, ...} with JSON types (lists for tuples)."""
    fields = {f.name: getattr(ffn, f.name) for f in dataclasses.fields(ffn)}
    return {"kind": ffn.kind, **{k: list(v) if isinstance(v, tuple) else v for k, v in fields.items()}}


def ffn_from_dict(d: dict) -> FFNConfig:
    """The inverse of ffn_to_dict; a missing kind, an unknown kind or an unknown field raises ValueError. A "cms"
    dict without "step_rule" was written before that field and loads with the rule of then, "explicit"."""
    if "kind" not in d:
        raise ValueError(f"an ffn dict needs a 'kind' among {tuple(FFN_CONFIGS)}, got keys {sorted(d)}")
    fields = {k: v for k, v in d.items() if k != "kind"}
    cls = type(resolve_ffn(d["kind"]))
    if cls is CMSConfig:  # ffn_to_dict writes every field: a CMS without one predates step_rule, when eq. 71's
        fields.setdefault("step_rule", "explicit")  # explicit step was the only one
    unknown = set(fields) - {f.name for f in dataclasses.fields(cls)}
    if unknown:
        raise ValueError(f"unknown ffn keys for kind {d['kind']!r}: {sorted(unknown)}")
    return cls(**fields)


def build_ffn(ffn: FFNConfig, d_model: int, norm_eps: float) -> nn.Module | None:
    """The block's FFN module (None for NoFFN). norm_eps reaches the CMS's level norms; the other kinds are applied
    after the block's own RMSNorm (regmem/models/lm.py)."""
    match ffn:
        case NoFFN():
            return None
        case SwiGLUConfig():
            return SwiGLU(d_model, ffn.hidden(d_model))
        case CMSConfig():
            return CMS(d_model, ffn, norm_eps=norm_eps)
        case MoEConfig():
            return MoEFFN(d_model, ffn.expert_width(d_model), ffn.experts, ffn.top_k, expert=ffn.expert,
                          activation=ffn.activation, temperature=ffn.temperature)
        case MultiHeadFFNConfig():
            return MultiHeadFFN(d_model, ffn.memory_width(d_model), ffn.heads, activation=ffn.activation,
                                temperature=ffn.temperature)
        case MemoryFFNConfig():
            return MemoryFFN(d_model, ffn.memory_width(d_model), activation=ffn.activation,
                             temperature=ffn.temperature)
    raise ValueError(f"not an FFN config: {ffn!r}")
