"""`regmem bench ops`: forward and forward+backward of each op and form over sequence lengths.

The cases (which op, on which inputs, with how many FLOPs) are in cases.py; memory.py measures a case's peak
memory in a fresh process."""

from __future__ import annotations

from dataclasses import asdict

import torch

from regmem.lab.bench.cases import ALL_CASES, Shape, case_inputs, forward_flops, op_step
from regmem.lab.bench.peak_memory import peak_mb
from regmem.lab.bench.timing import matmul_gflops, median_seconds


def run(
    case_names, forms, seq_lens, *, batch, heads, head_dim, chunk_size, dtype, min_run_time, memory=False,
    max_token_loop_len=None, progress=print,
) -> dict:
    """Times every (case, form, T, pass); with `memory`, also measures each one's peak memory in a fresh process
    (bench/peak_memory.py); forms other than chunk only up to T = `max_token_loop_len` (None: every T).
    Returns {"meta": ..., "rows": [...]}."""
    peak = matmul_gflops(1024, dtype, min_run_time=min_run_time)
    progress(f"dense matmul 1024^3 ({dtype}): {peak:.1f} GFLOP/s")
    rows = []
    gen = torch.Generator().manual_seed(0)
    for name in case_names:
        case = ALL_CASES[name]
        for T in seq_lens:
            shape = Shape(batch, T, heads, head_dim, head_dim, chunk_size)
            tokens, options = case_inputs(case, shape, dtype, gen)
            long = max_token_loop_len is not None and T > max_token_loop_len
            for form in (f for f in forms if f in case.forms and not (long and f != "chunk")):
                kwargs = {"mode": form, **({"chunk_size": chunk_size} if form == "chunk" else {})}
                for pass_ in ("fwd", "fwdbwd"):
                    seconds = median_seconds(op_step(case, tokens, options, kwargs, pass_), min_run_time=min_run_time)
                    flops = forward_flops(case, form, shape) * (3 if pass_ == "fwdbwd" else 1)
                    row = {
                        "op": name, "form": form, "pass": pass_, **asdict(shape), "dtype": str(dtype),
                        "ms": seconds * 1e3, "tokens_per_s": batch * T / seconds,
                        "gflops": flops / seconds / 1e9, "matmul_ratio": flops / seconds / 1e9 / peak,
                    }
                    if memory:
                        row["peak_mb"] = peak_mb(name, shape, dtype, form, pass_)
                    rows.append(row)
                    extra = f", peak +{row['peak_mb']:.0f} MiB" if memory else ""
                    progress(f"{name:>22} {form:>9} {pass_:>6} T={T:>6}: {row['ms']:9.2f} ms{extra}")
    meta = {"matmul_gflops": peak, "threads": torch.get_num_threads(), "torch": torch.__version__}
    return {"meta": meta, "rows": rows}
