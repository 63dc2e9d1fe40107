"""The momentum delta rule (Titans linear memory: SGD + momentum + weight decay): reference, recurrent, chunk."""

from regmem.ops.titans.api import (
    momentum_delta_rule,
    momentum_delta_rule_chunk,
    momentum_delta_rule_recurrent,
    momentum_delta_rule_reference,
)
from regmem.ops.titans.interface import MomentumState

__all__ = [
    "MomentumState",
    "momentum_delta_rule",
    "momentum_delta_rule_chunk",
    "momentum_delta_rule_recurrent",
    "momentum_delta_rule_reference",
]
