"""The delta-rule family: DeltaNet, Gated DeltaNet (scalar or diagonal gate), its parameterisations (Longhorn,
NLMS, Leaky LMS, decoupled weight decay) and DeltaProduct: reference, recurrent, chunk."""

from regmem.ops.delta.api import (
    delta_rule,
    delta_rule_chunk,
    delta_rule_recurrent,
    delta_rule_reference,
    gated_delta_rule,
    gated_delta_rule_chunk,
    gated_delta_rule_recurrent,
    gated_delta_rule_reference,
)
from regmem.ops.delta.parameterizations import decoupled_gated_delta_rule, leaky_lms, longhorn, nlms
from regmem.ops.delta.product import delta_product, delta_rule_multistep

__all__ = [
    "decoupled_gated_delta_rule",
    "delta_product",
    "delta_rule",
    "delta_rule_chunk",
    "delta_rule_recurrent",
    "delta_rule_multistep",
    "delta_rule_reference",
    "gated_delta_rule",
    "gated_delta_rule_chunk",
    "gated_delta_rule_recurrent",
    "gated_delta_rule_reference",
    "leaky_lms",
    "longhorn",
    "nlms",
]
