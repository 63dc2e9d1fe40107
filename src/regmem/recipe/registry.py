"""Registry of known points of the design space: each op and named model with its test-time-regression
coordinates and the equation of *Test-time regression* (arXiv:2501.12352; ttr.md §2.1) it comes from."""

from __future__ import annotations

from dataclasses import dataclass

from regmem.recipe.space import Recipe, Regressor, Solver, Weights


@dataclass(frozen=True)
class RecipeEntry:
    name: str  # short name, e.g. "retnet"
    recipe: Recipe
    op: str  # the regmem op call that computes it
    source: str  # equation / catalogue row of the TTR paper
    models: tuple[str, ...] = ()  # published models at this point
    note: str = ""


_REGISTRY: dict[str, RecipeEntry] = {}


def register(entry: RecipeEntry) -> RecipeEntry:
    if entry.name in _REGISTRY:
        raise ValueError(f"recipe name {entry.name!r} is already registered")
    _REGISTRY[entry.name] = entry
    return entry


def get(name: str) -> RecipeEntry:
    if name not in _REGISTRY:
        raise ValueError(f"unknown recipe {name!r}; known: {sorted(_REGISTRY)}")
    return _REGISTRY[name]


def entries() -> list[RecipeEntry]:
    return list(_REGISTRY.values())


def find(recipe: Recipe) -> list[RecipeEntry]:
    """Every registered entry at exactly this point of the space."""
    return [e for e in _REGISTRY.values() if e.recipe == recipe]


def format_table(rows: list[RecipeEntry] | None = None) -> str:
    """A markdown table: name, weights, regressor, solver, op, source, models."""
    rows = entries() if rows is None else rows
    header = "| name | weights | regressor | solver | op | TTR source | models |\n|---|---|---|---|---|---|---|"
    lines = [
        f"| {e.name} | {e.recipe.weights} | {e.recipe.regressor} | {e.recipe.solver} | `{e.op}` | {e.source} | "
        f"{', '.join(e.models)}{' (' + e.note + ')' if e.note else ''} |"
        for e in rows
    ]
    return "\n".join([header, *lines])


_GD_STEP = Solver("gd_step")
_LINEAR = Regressor("linear")

register(RecipeEntry(
    "linear_attn", Recipe(Weights("uniform"), _LINEAR, _GD_STEP), "linear_attn(q, k, v)",
    "eq. (2), (24); L2", ("Linear Transformer without normaliser",),
))
register(RecipeEntry(
    "feature_linear_attn", Recipe(Weights("uniform"), Regressor("feature_linear", feature_map="phi"), _GD_STEP),
    "linear_attn(q, k, v, feature_map=phi)", "eq. (3); L3",
    ("Performer (random_features)", "Based (taylor2)", "DPFP", "1+ELU"),
))
register(RecipeEntry(
    "normalized_linear_attn",
    Recipe(Weights("query_similarity"), Regressor("local_polynomial", degree=0, feature_map="phi"),
           Solver("analytic")),
    "linear_attn(q, k, v, feature_map=phi, normalize=True)", "eq. (50) with s(k, q) = phi(k).phi(q); L20",
    ("Linear Transformer (Katharopoulos 2020)",), "Nadaraya-Watson with a feature-map kernel",
))
register(RecipeEntry(
    "softmax_attn",
    Recipe(Weights("query_similarity"), Regressor("local_polynomial", degree=0), Solver("analytic")),
    "scaled_dot_product_attention(q, k, v)", "eq. (50); L20 (with QK-norm: eq. (51), L21)", ("Transformer",),
    "Nadaraya-Watson with s(k, q) = exp(k.q / sqrt(K))",
))
register(RecipeEntry(
    "gated_linear_attn", Recipe(Weights("scalar_decay"), _LINEAR, _GD_STEP), "gated_linear_attn(q, k, v, g[B,T,H])",
    "eq. (4), (16); L6", ("mLSTM (forget gate)", "GateLoop"),
))
register(RecipeEntry(
    "retnet", Recipe(Weights("constant_decay"), _LINEAR, _GD_STEP),
    "gated_linear_attn(q, k, v, g = log gamma_h)", "eq. (16); L6", ("RetNet",),
))
register(RecipeEntry(
    "mamba2", Recipe(Weights("scalar_decay"), _LINEAR, _GD_STEP),
    "gated_linear_attn(q=C, k=B, v=x dt, g = A dt)", "eq. (16) via SSD; L6", ("Mamba-2",),
))
register(RecipeEntry(
    "gla", Recipe(Weights("diagonal_decay"), _LINEAR, _GD_STEP), "gated_linear_attn(q, k, v, g[B,T,H,K])",
    "eq. (16), per channel; L6", ("GLA", "RWKV-6", "HGRN-2"), "outside the paper's scalar derivation",
))
