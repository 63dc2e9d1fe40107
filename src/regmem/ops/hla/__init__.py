"""Higher-order linear attention (arXiv:2510.27258): second order (`hla2`), asymmetric (`ahla`), third order
(`hla3`, the causal triple sum) and the paper's third-order recurrence (`hla3_paper`), each with reference,
recurrent and chunk forms; the associative scan of hla2 and ahla (scan.py)."""

from regmem.ops.hla.api import ahla, hla2, hla3, hla3_paper
from regmem.ops.hla.scan import (
    AHLASegment,
    HLA2Segment,
    ahla_combine,
    ahla_scan_states,
    ahla_token_segments,
    hla2_combine,
    hla2_scan_states,
    hla2_token_segments,
)
from regmem.ops.hla.state import AHLAState, HLA2State, HLA3PaperState, HLA3State

__all__ = [
    "AHLASegment",
    "AHLAState",
    "HLA2Segment",
    "HLA2State",
    "HLA3PaperState",
    "HLA3State",
    "ahla",
    "ahla_combine",
    "ahla_scan_states",
    "ahla_token_segments",
    "hla2",
    "hla2_combine",
    "hla2_scan_states",
    "hla2_token_segments",
    "hla3",
    "hla3_paper",
]
