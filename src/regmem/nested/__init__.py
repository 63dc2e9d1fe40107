"""Nested Learning (Behrouz et al., arXiv:2512.24695): models as nested optimisation problems. Here: the Continuum
Memory System (Sec. 7.1), self-modifying Titans (Sec. 8.1-8.2, on the test-time-training engine of `regmem.ops.ttt`),
Linear Attention++ (Sec. 3.2 and 5.1) and the levels of a model (Definition 2)."""

from regmem.nested.cms import CMS, CMSConfig, CMSState, LevelState, SwiGLUWeights
from regmem.nested.levels import Level, describe_levels, format_levels
from regmem.nested.linear_attention_pp import LinearAttentionPP
from regmem.nested.self_modifying import (
    MEMORIES,
    OuterParams,
    SelfModifyingConfig,
    SelfModifyingState,
    initial_state,
    self_modifying_titans,
)

__all__ = ["CMS", "CMSConfig", "CMSState", "Level", "LevelState", "SwiGLUWeights", "describe_levels", "format_levels",
           "LinearAttentionPP",
           "MEMORIES", "OuterParams", "SelfModifyingConfig", "SelfModifyingState", "initial_state",
           "self_modifying_titans"]
