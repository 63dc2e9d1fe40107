"""`regmem bench snr`: the wall time of the retrieval-SNR Monte-Carlo estimator `measure_inverse_snr` (Sec. 2.1 of
*Understanding Transformer from the Perspective of Associative Memory*, arXiv:2505.19488, eq. 5) at the size the
analysis needs, N = 4096 pairs, d_k = 64, d_v = 32, 400 trials; the target is under 5 s on one CPU thread."""

from __future__ import annotations

import math

import torch

from regmem.analysis.snr import measure_inverse_snr
from regmem.lab.bench.timing import median_seconds

TARGET_SECONDS = 5.0


def run_snr_timing(kernels, *, N: int = 4096, d_k: int = 64, d_v: int = 32, trials: int = 400,
                   min_run_time: float = 1.0, progress=print) -> dict:
    """Times one `measure_inverse_snr` call per kernel (tau = sqrt(d_k) for exp and solu). Returns
    {"meta": ..., "rows": [...]}, each row with the seconds and the estimate."""
    rows = []
    for kernel in kernels:
        tau = math.sqrt(d_k) if kernel in ("exp", "solu") else 1.0

        def call(kernel=kernel, tau=tau):
            return measure_inverse_snr(kernel, N, d_k, d_v, tau=tau, trials=trials, seed=0)

        seconds = median_seconds(call, min_run_time=min_run_time)
        rows.append({"kernel": kernel, "N": N, "d_k": d_k, "d_v": d_v, "trials": trials, "seconds": seconds,
                     "inverse_snr": call(), "target_seconds": TARGET_SECONDS})
        progress(f"{kernel:>8} N={N} d_k={d_k} trials={trials}: {seconds:.2f} s")
    return {"meta": {"threads": torch.get_num_threads(), "torch": torch.__version__}, "rows": rows}


def snr_timing_table(result: dict) -> str:
    lines = [f"Threads: {result['meta']['threads']} (torch {result['meta']['torch']}).", "",
             "| kernel | N | d_k | d_v | trials | seconds | target | SNR^-1 |",
             "|---|---:|---:|---:|---:|---:|---|---:|"]
    for r in result["rows"]:
        verdict = "ok" if r["seconds"] < r["target_seconds"] else "MISSED"
        lines.append(f"| {r['kernel']} | {r['N']} | {r['d_k']} | {r['d_v']} | {r['trials']} | {r['seconds']:.2f} | "
                     f"< {r['target_seconds']:g} s: {verdict} | {r['inverse_snr']:.4g} |")
    return "\n".join(lines)
