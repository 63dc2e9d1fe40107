"""`Recipe.build()`: from a point of the design space (weights, regressor, solver) to a working mixer.

A point where regmem has a named mixer builds that mixer (the closed-form or chunk-parallel op behind it): the first
mixer of `MIXERS` whose recipe is the point, e.g. (uniform, linear, gd_step) -> linear attention, (uniform, linear,
sgd) -> DeltaNet, (uniform, linear, analytic) -> RLS. Any other point with a linear or MLP regressor and an SGD-family
solver builds the generic test-time-training engine (`regmem.ops.ttt`) as an `EngineMixer`:

    solver            inner loss and gates of the engine
    gd_step           dot-product loss -<f(k), v> with a learned step (one gradient step per pair: linear attention)
    sgd               l2 loss 1/2 ||f(k) - v||^2, learned step
    sgd_weight_decay  + data-dependent weight decay alpha_t
    sgd_momentum      + data-dependent momentum mu_t and weight decay (Titans)
    dgd               l2 loss, weight decay and Delta Gradient Descent's state-dependent decay (Nested Learning eq. 88)

with the regressor linear (k -> W^T k) or an MLP (x + LN(MLP(x)), GELU, width 4K). Weights other than uniform are
expressed by the solver's decay, so they build only where a named mixer exists. The names `recipe:<weights>/
<regressor>/<solver>` (e.g. `recipe:uniform/linear/dgd`) reach this builder from `build_mixer`, configs
and the command line.
"""

from __future__ import annotations

import functools

import torch

from regmem.layers.base import Mixer
from regmem.layers.deep_memory import DeepMemoryMixer
from regmem.ops import InnerModel
from regmem.recipe import Recipe, Regressor, Solver, Weights, set_builder

PREFIX = "recipe:"
ENGINE_SOLVERS = {"gd_step": "dot", "sgd": "l2", "sgd_weight_decay": "l2", "sgd_momentum": "l2", "dgd": "l2"}


class EngineMixer(DeepMemoryMixer):
    """The test-time-training engine at an arbitrary point of the design space (module docstring)."""

    def __init__(self, d_model: int, n_heads: int, *, recipe: Recipe, inner_lr: float | None = None, **kwargs):
        head_dim = kwargs.get("head_dim") or d_model // n_heads
        regressor, solver = recipe.regressor.kind, recipe.solver.kind
        if regressor == "mlp":
            model = InnerModel((4 * head_dim,), "gelu", residual=True, layer_norm=True)
        else:
            model = InnerModel()
        self.momentum = solver == "sgd_momentum"
        self.weight_decay = solver in ("sgd_weight_decay", "sgd_momentum", "dgd")
        default_lr = 1.0 if regressor == "linear" else 0.1
        kwargs.setdefault("dgd", solver == "dgd")
        super().__init__(d_model, n_heads, inner_model=model, loss=ENGINE_SOLVERS[solver],
                         inner_lr=default_lr if inner_lr is None else inner_lr, **kwargs)
        self._recipe = recipe

    @property
    def recipe(self) -> Recipe:
        return self._recipe


@functools.cache
def _default_recipes() -> dict[str, Recipe]:
    """Each mixer's point with its default options (some mixers move with an option, e.g. RLS with a decay is
    MesaNet), read from a small instance; the global RNG is left as it was."""
    from regmem.layers.registry import MIXERS

    with torch.random.fork_rng(devices=[]):
        return {name: cls(8, 2).recipe for name, cls in MIXERS.items()}


def named_mixer(recipe: Recipe) -> str | None:
    """The first mixer of `MIXERS` whose default options sit at exactly this point, or None."""
    return next((name for name, point in _default_recipes().items() if point == recipe), None)


def engine_builds(recipe: Recipe) -> bool:
    return (recipe.weights.kind == "uniform" and recipe.regressor.kind in ("linear", "mlp")
            and recipe.regressor.feature_map is None and recipe.solver.kind in ENGINE_SOLVERS
            and recipe.solver.steps == 1)


def how_it_builds(recipe: Recipe) -> str:
    """'mixer <name>', 'engine' or '-' (does not build)."""
    name = named_mixer(recipe)
    if name is not None:
        return f"mixer {name}"
    return "engine" if engine_builds(recipe) else "-"


def build_recipe(recipe: Recipe, d_model: int, n_heads: int, **kwargs) -> Mixer:
    """The mixer at `recipe` (module docstring); kwargs go to its constructor. ValueError where nothing builds."""
    from regmem.layers.registry import MIXERS

    name = named_mixer(recipe)
    if name is not None:
        return MIXERS[name](d_model, n_heads, **kwargs)
    if not engine_builds(recipe):
        raise ValueError(
            f"{recipe} does not build: no named mixer sits there, and the engine takes weights 'uniform', a 'linear' "
            f"or 'mlp' regressor and a solver in {sorted(ENGINE_SOLVERS)} (one step)")
    return EngineMixer(d_model, n_heads, recipe=recipe, **kwargs)


def parse_recipe_name(name: str) -> Recipe:
    """'recipe:<weights>/<regressor>/<solver>' -> Recipe; ValueError naming the part that is wrong."""
    parts = name.removeprefix(PREFIX).split("/")
    if not name.startswith(PREFIX) or len(parts) != 3:
        raise ValueError(f"a recipe mixer name is 'recipe:<weights>/<regressor>/<solver>', got {name!r}")
    weights, regressor, solver = parts
    return Recipe(Weights(weights), Regressor(regressor), Solver(solver))


set_builder(build_recipe)
