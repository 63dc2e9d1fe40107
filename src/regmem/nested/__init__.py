"""Nested Learning (Behrouz et al., arXiv:2512.24695): models as nested optimisation problems. Self-modifying Titans
(Sec. 8.1-8.2) is here; it runs on the test-time-training engine of `regmem.ops.ttt`."""

from regmem.nested.self_modifying import (
    MEMORIES,
    OuterParams,
    SelfModifyingConfig,
    SelfModifyingState,
    initial_state,
    self_modifying_titans,
)

__all__ = ["MEMORIES", "OuterParams", "SelfModifyingConfig", "SelfModifyingState", "initial_state",
           "self_modifying_titans"]
