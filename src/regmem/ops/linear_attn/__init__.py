"""Linear attention and gated linear attention (RetNet, Mamba-2/SSD, GLA): reference, recurrent, chunk."""

from regmem.ops.linear_attn.api import (
    gated_linear_attn,
    gated_linear_attn_chunk,
    gated_linear_attn_recurrent,
    gated_linear_attn_reference,
    linear_attn,
    linear_attn_chunk,
    linear_attn_recurrent,
    linear_attn_reference,
)
from regmem.ops.linear_attn.interface import NormalizedState

__all__ = [
    "NormalizedState",
    "gated_linear_attn",
    "gated_linear_attn_chunk",
    "gated_linear_attn_recurrent",
    "gated_linear_attn_reference",
    "linear_attn",
    "linear_attn_chunk",
    "linear_attn_recurrent",
    "linear_attn_reference",
]
