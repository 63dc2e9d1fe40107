"""Multi-step full-batch gradient descent on least squares (ttr.md L7): reference, recurrent, chunk."""

from regmem.ops.gd.api import multi_step_gd, multi_step_gd_chunk, multi_step_gd_recurrent, multi_step_gd_reference
from regmem.ops.gd.interface import GDStats

__all__ = [
    "GDStats",
    "multi_step_gd",
    "multi_step_gd_chunk",
    "multi_step_gd_recurrent",
    "multi_step_gd_reference",
]
