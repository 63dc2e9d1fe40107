"""regmem: sequence models built on associative memory (test-time regression)."""

__version__ = "0.1.0"

import regmem.layers  # noqa: E402, F401  (registers the builder behind Recipe.build; regmem/layers/recipe_builder.py)
