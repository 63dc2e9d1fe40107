"""regmem: sequence models built on associative memory (test-time regression)."""

__version__ = "0.1.0"
