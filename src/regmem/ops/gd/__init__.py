"""Multi-step full-batch gradient descent on least squares (TTR eqs. 18-23): reference, recurrent, chunk."""

from regmem.ops.gd.api import multi_step_gd
from regmem.ops.gd.state import GDStats

__all__ = ["GDStats", "multi_step_gd"]
