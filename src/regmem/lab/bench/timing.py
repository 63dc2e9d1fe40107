"""Timing on the machine at hand: torch.utils.benchmark with all of torch's threads, and the dense-matmul
throughput that every achieved FLOP/s is compared with (measured in the same run)."""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch.utils import benchmark


def median_seconds(fn: Callable[[], object], *, min_run_time: float) -> float:
    """Median wall time of fn() over blocks of runs lasting at least `min_run_time` seconds in total."""
    fn()  # warm-up: allocator, first-call dispatch
    timer = benchmark.Timer(stmt="fn()", globals={"fn": fn}, num_threads=torch.get_num_threads())
    return timer.blocked_autorange(min_run_time=min_run_time).median


def matmul_gflops(n: int, dtype: torch.dtype, *, min_run_time: float) -> float:
    """Throughput of a dense [n, n] @ [n, n] matmul, the machine's practical peak for this dtype."""
    gen = torch.Generator().manual_seed(0)
    a = torch.randn(n, n, generator=gen).to(dtype)
    b = torch.randn(n, n, generator=gen).to(dtype)
    seconds = median_seconds(lambda: a @ b, min_run_time=min_run_time)
    return 2 * n**3 / seconds / 1e9
