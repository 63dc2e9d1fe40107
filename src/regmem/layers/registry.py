"""Mixers by short name, for configs and the command line (no dotted import strings), and the one way to build a
mixer: `build_mixer(name | "recipe:<weights>/<regressor>/<solver>" | Recipe, d_model, n_heads, **options)`.

A point of the design space builds the first mixer of `MIXERS` whose declared point (`Mixer.default_recipe()`, read
from the class: nothing is built to find it) is that point, e.g. (uniform, linear, gd_step) -> linear attention,
(uniform, linear, sgd) -> DeltaNet, (uniform, linear, analytic) -> RLS; any other point the test-time-training engine
expresses builds an `EngineMixer` (regmem/layers/engine.py); other points raise ValueError.
"""

from __future__ import annotations

from regmem.layers.attention import SoftmaxAttention
from regmem.layers.base import Mixer, check_sizes
from regmem.layers.block_attention import MoBA, MoEAttention
from regmem.layers.deep_memory import TTTMLP, TitansMLP, TTTLinear
from regmem.layers.delta_product import DeltaProduct
from regmem.layers.deltaformer import DeltaFormer
from regmem.layers.deltanet import NLMS, DeltaNet, GatedDeltaNet, Longhorn
from regmem.layers.engine import PREFIX, EngineMixer, check_engine_builds, engine_builds, parse_recipe_name
from regmem.layers.fox import ForgettingAttention
from regmem.layers.gla import GLA
from regmem.layers.hla import AHLA, HLA
from regmem.layers.hope import Hope, HopeAttention, HopeStandIn
from regmem.layers.linear_attention import LinearAttention
from regmem.layers.local_linear import LocalLinearAttention
from regmem.layers.lstm import LSTM
from regmem.layers.mamba import Mamba
from regmem.layers.mamba2 import Mamba2
from regmem.layers.mesa import RLS, Mesa
from regmem.layers.retnet import RetNet
from regmem.layers.self_modifying import SelfModifyingTitans, SelfModifyingTitansStandIn
from regmem.layers.titans import TitansLinear
from regmem.recipe import Recipe

MIXERS: dict[str, type[Mixer]] = {
    "attn": SoftmaxAttention,
    "linear": LinearAttention,
    "retnet": RetNet,
    "mamba2": Mamba2,
    "gla": GLA,
    "mamba": Mamba,  # after GLA: build_mixer gives the first mixer at a point, and GLA is that point's plain form
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
    # the stabilised models before LMConfig format 7: eq. 84's targets, no DGD, a CMS that barely moves (hope.py)
    "self_modifying_titans_standin": SelfModifyingTitansStandIn,
    "hope_standin": HopeStandIn,
    "deltaformer": DeltaFormer,  # softmax attention + the delta rule (arXiv:2505.19488 Sec. 2.2)
    "fox": ForgettingAttention,  # softmax attention x a forget gate (arXiv:2505.19488 eqs. 30-31); recipe None
    "moe_attn": MoEAttention,  # attention over blocks of keys mixed by a router (arXiv:2505.19488 eq. 25); recipe None
    "moba": MoBA,  # attention over the top-k blocks of keys (arXiv:2505.19488 eqs. 26-27); recipe None
    "lstm": LSTM,  # the nonlinear recurrence of Nested Learning's Table 5; outside the design space (recipe None)
}


def is_mixer_name(name: str) -> bool:
    """A key of MIXERS or a 'recipe:<weights>/<regressor>/<solver>' name (regmem/layers/engine.py)."""
    return name in MIXERS or name.startswith(PREFIX)


def named_mixer(recipe: Recipe) -> str | None:
    """The first mixer of `MIXERS` whose declared point (at its default options) is `recipe`, or None."""
    return next((name for name, cls in MIXERS.items() if cls.default_recipe() == recipe), None)


def how_it_builds(recipe: Recipe) -> str:
    """'mixer <name>', 'engine' or '-' (does not build)."""
    name = named_mixer(recipe)
    if name is not None:
        return f"mixer {name}"
    return "engine" if engine_builds(recipe) else "-"


def check_builds(recipe: Recipe) -> None:
    """ValueError unless a mixer builds at `recipe` (a named mixer sits there or the engine expresses it); nothing is
    built to find out."""
    if named_mixer(recipe) is None:
        check_engine_builds(recipe)


def build_mixer(name: str | Recipe, d_model: int, n_heads: int, **kwargs) -> Mixer:
    """The mixer `name` names: a key of MIXERS, a 'recipe:<weights>/<regressor>/<solver>' name, or a `Recipe`;
    kwargs go to its constructor. The sizes are checked first, the same for every mixer (`check_sizes`): ValueError
    naming d_model, n_heads or head_dim."""
    check_sizes(d_model, n_heads, kwargs.get("head_dim"))
    if isinstance(name, str) and name.startswith(PREFIX):
        name = parse_recipe_name(name)
    if isinstance(name, Recipe):
        named = named_mixer(name)
        if named is None:
            return EngineMixer(d_model, n_heads, recipe=name, **kwargs)  # ValueError where the engine cannot
        name = named
    if name not in MIXERS:
        raise ValueError(f"mixer must be one of {sorted(MIXERS)} or 'recipe:<weights>/<regressor>/<solver>', "
                         f"got {name!r}")
    return MIXERS[name](d_model, n_heads, **kwargs)
