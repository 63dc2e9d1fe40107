"""Linear attention and gated linear attention (RetNet, Mamba-2/SSD, GLA): reference, recurrent, chunk."""

from regmem.ops.linear_attn.api import NormalizedState, gated_linear_attn, linear_attn

__all__ = ["NormalizedState", "gated_linear_attn", "linear_attn"]
