"""Mamba-1's selective state-space scan (S6): reference, recurrent, chunk."""

from regmem.ops.ssm.api import selective_scan
from regmem.ops.ssm.discretize import zoh_input_weight

__all__ = ["selective_scan", "zoh_input_weight"]
