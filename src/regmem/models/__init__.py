"""Language models built from mixers."""

from regmem.models.config import LMConfig
from regmem.models.ffn import (
    FFN_CONFIGS,
    CMSConfig,
    FFNConfig,
    FFNKind,
    MemoryFFNConfig,
    MoEConfig,
    MultiHeadFFNConfig,
    NoFFN,
    SwiGLU,
    SwiGLUConfig,
)
from regmem.models.lm import LM, Block, BlockState, sample
from regmem.models.stacking import stack_levels

__all__ = ["FFN_CONFIGS", "LM", "Block", "BlockState", "CMSConfig", "FFNConfig", "FFNKind", "LMConfig",
           "MemoryFFNConfig", "MoEConfig", "MultiHeadFFNConfig", "NoFFN", "SwiGLU", "SwiGLUConfig", "sample",
           "stack_levels"]
