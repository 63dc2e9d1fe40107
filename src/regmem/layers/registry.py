"""Mixers by short name, for configs and the command line (no dotted import strings)."""

from __future__ import annotations

from regmem.layers.attention import SoftmaxAttention
from regmem.layers.base import Mixer
from regmem.layers.deep_memory import TTTMLP, TitansMLP, TTTLinear
from regmem.layers.delta_product import DeltaProduct
from regmem.layers.deltaformer import DeltaFormer
from regmem.layers.deltanet import NLMS, DeltaNet, GatedDeltaNet, Longhorn
from regmem.layers.fox import ForgettingAttention
from regmem.layers.gla import GLA
from regmem.layers.hla import AHLA, HLA
from regmem.layers.hope import Hope, HopeAttention
from regmem.layers.linear_attention import LinearAttention
from regmem.layers.local_linear import LocalLinearAttention
from regmem.layers.lstm import LSTM
from regmem.layers.mamba import Mamba
from regmem.layers.mamba2 import Mamba2
from regmem.layers.mesa import RLS, Mesa
from regmem.layers.retnet import RetNet
from regmem.layers.self_modifying import SelfModifyingTitans
from regmem.layers.titans import TitansLinear

MIXERS: dict[str, type[Mixer]] = {
    "attn": SoftmaxAttention,
    "linear": LinearAttention,
    "retnet": RetNet,
    "mamba2": Mamba2,
    "gla": GLA,
    "mamba": Mamba,  # after GLA: Recipe.build() gives the first mixer at a point, and GLA is that point's plain form
    "deltanet": DeltaNet,
    "gated_deltanet": GatedDeltaNet,
    "longhorn": Longhorn,
    "nlms": NLMS,
    "delta_product": DeltaProduct,
    "titans": TitansLinear,
    "mesa": Mesa,
    "rls": RLS,
    "local_linear": LocalLinearAttention,
    "hla": HLA,
    "ahla": AHLA,
    "ttt_linear": TTTLinear,
    "ttt_mlp": TTTMLP,
    "titans_mlp": TitansMLP,
    "self_modifying_titans": SelfModifyingTitans,
    "hope": Hope,
    "hope_attention": HopeAttention,
    "deltaformer": DeltaFormer,  # softmax attention + the delta rule (arXiv:2505.19488 Sec. 2.2)
    "fox": ForgettingAttention,  # softmax attention x a forget gate (arXiv:2505.19488 eqs. 30-31); recipe None
    "lstm": LSTM,  # the nonlinear recurrence of Nested Learning's Table 5; outside the design space (recipe None)
}


def is_mixer_name(name: str) -> bool:
    """A key of MIXERS or a 'recipe:<weights>/<regressor>/<solver>' name (recipe_builder.py)."""
    return name in MIXERS or name.startswith("recipe:")


def build_mixer(name: str, d_model: int, n_heads: int, **kwargs) -> Mixer:
    if name.startswith("recipe:"):
        from regmem.layers.recipe_builder import build_recipe, parse_recipe_name

        return build_recipe(parse_recipe_name(name), d_model, n_heads, **kwargs)
    if name not in MIXERS:
        raise ValueError(f"mixer must be one of {sorted(MIXERS)} or 'recipe:<weights>/<regressor>/<solver>', "
                         f"got {name!r}")
    return MIXERS[name](d_model, n_heads, **kwargs)
