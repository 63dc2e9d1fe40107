"""Peak memory of one op call on CPU: the call runs once in a fresh spawned process, and the peak resident set
(`ru_maxrss`) after the call minus the peak before it (torch imported, inputs built) is its extra memory.

A process-wide high-water mark cannot go down, so a call that needs less than the import did reads as 0; the
numbers are upper bounds on what the op itself allocates at its peak (allocator caching included)."""

from __future__ import annotations

import multiprocessing
import resource
import sys


def peak_mb(case_name: str, shape, dtype, form: str, pass_: str) -> float:
    """Extra peak resident memory (MiB) of one `pass_` ("fwd" | "fwdbwd") of `case_name` in `form`."""
    with multiprocessing.get_context("spawn").Pool(1) as pool:
        return pool.apply(_measure, (case_name, shape, dtype, form, pass_))


def _maxrss_mb() -> float:
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return rss / 2**20 if sys.platform == "darwin" else rss / 2**10  # bytes on macOS, KiB on Linux


def _measure(case_name, shape, dtype, form, pass_) -> float:
    import torch

    from regmem.bench.ops import CASES, _step

    case = CASES[case_name]
    inputs = case.make_inputs(shape, dtype, torch.Generator().manual_seed(0))
    kwargs = {"mode": form, **({"chunk_size": shape.chunk_size} if form == "chunk" else {})}
    step = _step(case, inputs, kwargs, pass_)
    before = _maxrss_mb()
    step()
    return _maxrss_mb() - before
