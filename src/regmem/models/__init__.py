"""Language models built from mixers."""

from regmem.models.config import LMConfig
from regmem.models.lm import LM, Block, SwiGLU, sample

__all__ = ["LM", "Block", "LMConfig", "SwiGLU", "sample"]
