"""Peak memory of one op call on CPU: the call runs once in a fresh spawned process (torch imported, inputs
built), and its extra memory is the peak resident set during the call minus the resident set before it.

On Linux the high-water mark is reset just before the call (writing 5 to /proc/self/clear_refs) and read from
VmHWM in /proc/self/status after it. Elsewhere the process-wide `ru_maxrss` is used, which cannot be reset: a
call that needs less than the import did then reads as 0."""

from __future__ import annotations

import multiprocessing
import resource
import sys

import torch

from regmem.lab.bench.cases import ALL_CASES, case_inputs, op_step


def peak_mb(case_name: str, shape, dtype, form: str, pass_: str) -> float:
    """Extra peak resident memory (MiB) of one `pass_` ("fwd" | "fwdbwd") of `case_name` in `form`: the call of
    `cases.op_step`, the one ops.py times."""
    with multiprocessing.get_context("spawn").Pool(1) as pool:
        return pool.apply(_measure, (case_name, shape, dtype, form, pass_))


def _status_mb(field: str) -> float:
    with open("/proc/self/status") as status:
        line = next(line for line in status if line.startswith(field + ":"))
    return int(line.split()[1]) / 2**10  # kB


def _reset_peak() -> bool:
    try:
        with open("/proc/self/clear_refs", "w") as refs:
            refs.write("5")  # resets VmHWM to the current resident set (Linux >= 4.0)
        return True
    except OSError:
        return False


def _maxrss_mb() -> float:
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return rss / 2**20 if sys.platform == "darwin" else rss / 2**10  # bytes on macOS, KiB on Linux


def _measure(case_name, shape, dtype, form, pass_) -> float:
    case = ALL_CASES[case_name]
    tokens, options = case_inputs(case, shape, dtype, torch.Generator().manual_seed(0))
    kwargs = {"mode": form, **({"chunk_size": shape.chunk_size} if form == "chunk" else {})}
    step = op_step(case, tokens, options, kwargs, pass_)
    if sys.platform.startswith("linux") and _reset_peak():
        before = _status_mb("VmRSS")
        step()
        return _status_mb("VmHWM") - before
    before = _maxrss_mb()
    step()
    return _maxrss_mb() - before
