"""Higher-order linear attention (arXiv:2510.27258): second order (`hla2`) and asymmetric (`ahla`), each with
reference, recurrent and chunk forms and the associative scan (scan.py); third order (`hla3`: the causal triple
sum with reference, recurrent and chunk forms, and the paper's recurrence with reference and recurrent forms)."""

from regmem.ops.hla.ahla import AHLAState, ahla, ahla_chunk, ahla_recurrent, ahla_reference
from regmem.ops.hla.api import hla2, hla2_chunk, hla2_recurrent, hla2_reference
from regmem.ops.hla.hla3 import HLA3PaperState, HLA3State, hla3
from regmem.ops.hla.interface import HLA2State
from regmem.ops.hla.scan import (
    AHLASegment,
    HLA2Segment,
    ahla_combine,
    ahla_scan_states,
    ahla_token_segments,
    associative_scan,
    hla2_combine,
    hla2_scan_states,
    hla2_token_segments,
)

__all__ = [
    "AHLASegment",
    "AHLAState",
    "HLA2Segment",
    "HLA2State",
    "HLA3PaperState",
    "HLA3State",
    "ahla",
    "ahla_chunk",
    "ahla_combine",
    "ahla_recurrent",
    "ahla_reference",
    "ahla_scan_states",
    "ahla_token_segments",
    "associative_scan",
    "hla2",
    "hla2_chunk",
    "hla2_combine",
    "hla2_recurrent",
    "hla2_reference",
    "hla2_scan_states",
    "hla2_token_segments",
    "hla3",
]
