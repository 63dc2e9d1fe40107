"""The momentum delta rule (Titans linear memory: SGD + momentum + weight decay): reference, recurrent, chunk."""

from regmem.ops.momentum_delta.api import momentum_delta_rule
from regmem.ops.momentum_delta.state import MomentumState

__all__ = ["MomentumState", "momentum_delta_rule"]
