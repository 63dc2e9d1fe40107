"""Benchmarks: `regmem bench ops` times ops and forms, `regmem bench decode` one decoding step against the context
length, `regmem bench layers` whole layers beside public implementations, `regmem bench snr` the retrieval-SNR
estimator; results go to benchmarks/results/."""

from regmem.lab.bench.cases import ALL_CASES, CASES, DEFAULT_CASES, EXTERNAL_CASES
from regmem.lab.bench.decode import decode_table, run_decode
from regmem.lab.bench.layers import LAYER_CASES, PASSES, layers_table, run_layers
from regmem.lab.bench.ops import run
from regmem.lab.bench.report import comparison_table, markdown_table, targets_table, write
from regmem.lab.bench.snr import run_snr_timing, snr_timing_table

__all__ = [
    "ALL_CASES", "CASES", "DEFAULT_CASES", "EXTERNAL_CASES", "comparison_table", "decode_table", "markdown_table",
    "run", "run_decode", "targets_table", "write", "LAYER_CASES", "PASSES", "layers_table",
    "run_layers", "run_snr_timing", "snr_timing_table",
]
