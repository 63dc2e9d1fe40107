"""Higher-order linear attention (arXiv:2510.27258), second order: reference, recurrent, chunk."""

from regmem.ops.hla.api import hla2, hla2_chunk, hla2_recurrent, hla2_reference
from regmem.ops.hla.interface import HLA2State

__all__ = ["HLA2State", "hla2", "hla2_chunk", "hla2_recurrent", "hla2_reference"]
