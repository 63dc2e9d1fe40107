"""The design space: Weights x Regressor x Solver, and the registry of known points."""

from regmem.recipe.registry import RecipeEntry, entries, find, format_table, get, register
from regmem.recipe.space import Recipe, Regressor, Solver, Weights

__all__ = [
    "Recipe",
    "RecipeEntry",
    "Regressor",
    "Solver",
    "Weights",
    "entries",
    "find",
    "format_table",
    "get",
    "register",
]
