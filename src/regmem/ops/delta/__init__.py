"""The delta-rule family: DeltaNet, Gated DeltaNet (scalar or diagonal gate), its parameterisations (Longhorn,
NLMS, Leaky LMS, decoupled weight decay) and DeltaProduct, every op on one kernel's reference, recurrent and chunk
forms."""

from regmem.ops.delta.api import delta_rule, gated_delta_rule
from regmem.ops.delta.parameterizations import decoupled_gated_delta_rule, leaky_lms, longhorn, nlms
from regmem.ops.delta.product import delta_product, delta_rule_multistep

__all__ = [
    "decoupled_gated_delta_rule",
    "delta_product",
    "delta_rule",
    "delta_rule_multistep",
    "gated_delta_rule",
    "leaky_lms",
    "longhorn",
    "nlms",
]
