"""Benchmarks: `regmem bench ops` times ops and forms; results go to benchmarks/results/."""

from regmem.bench.ops import CASES, DEFAULT_CASES, run
from regmem.bench.report import markdown_table, targets_table, write

__all__ = ["CASES", "DEFAULT_CASES", "markdown_table", "run", "targets_table", "write"]
