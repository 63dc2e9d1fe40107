"""`torch.compile` for a function a loop calls many times at one shape: the deep memories' per-mini-batch work (the
test-time-training engine's blocks, `compile_blocks`; self-modifying Titans' fused pieces, `compile_pieces`).

Compiling the whole layer unrolls its loop over mini-batches into one graph as long as the sequence (on an H200,
Hope's did not finish compiling in 110 s); compiling the loop's body instead gives one graph, traced once per shape
and reused by every mini-batch. Same results as eager to float round-off (tests compare outputs and gradients).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Literal, get_args

import torch

CompileBackend = Literal["inductor", "cudagraphs", "aot_eager", "eager"]  # torch.compile backends


def check_compile_option(name: str, value) -> None:
    """A compile option: False (eager), True (inductor) or a `CompileBackend` name."""
    if not isinstance(value, bool) and value not in get_args(CompileBackend):
        raise ValueError(f"{name} must be True, False or one of {get_args(CompileBackend)}, got {value!r}")


@functools.cache
def compiled(fn: Callable, backend: bool | CompileBackend) -> Callable:
    """`fn` through torch.compile, once per process, function and backend (True: inductor); fixed shapes, so dynamo
    re-traces only for a new shape or configuration."""
    return torch.compile(fn, dynamic=False, backend="inductor" if backend is True else backend)
