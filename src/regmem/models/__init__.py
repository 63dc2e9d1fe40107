"""Language models built from mixers."""

from regmem.models.config import LMConfig
from regmem.models.lm import LM, Block, BlockState, SwiGLU, sample
from regmem.models.stacking import stack_levels

__all__ = ["LM", "Block", "BlockState", "LMConfig", "SwiGLU", "sample", "stack_levels"]
