"""Higher-order linear attention (arXiv:2510.27258): second order (`hla2`) and asymmetric (`ahla`), each with
reference, recurrent and chunk forms; third order (`hla3`, causal and the paper's recurrence), reference and
recurrent forms only so far."""

from regmem.ops.hla.ahla import AHLAState, ahla, ahla_chunk, ahla_recurrent, ahla_reference
from regmem.ops.hla.api import hla2, hla2_chunk, hla2_recurrent, hla2_reference
from regmem.ops.hla.hla3 import HLA3PaperState, HLA3State, hla3
from regmem.ops.hla.interface import HLA2State

__all__ = [
    "AHLAState",
    "HLA2State",
    "HLA3PaperState",
    "HLA3State",
    "ahla",
    "ahla_chunk",
    "ahla_recurrent",
    "ahla_reference",
    "hla2",
    "hla2_chunk",
    "hla2_recurrent",
    "hla2_reference",
    "hla3",
]
