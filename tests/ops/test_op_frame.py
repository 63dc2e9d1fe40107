"""Issue 48's "validate once, at the edge": what an op call runs in Python before its core starts.

Counted with `sys.setprofile` (Python function calls only; C functions and torch's own Python are not regmem's),
the way the issue measured it: a chunk-mode `gated_delta_rule` call made 79 regmem calls, 48 of them (61 %)
validation, the dtype/packing frame and the backend check before the core. The frame now runs its checks in one
pass and calls a helper only where a value needs explaining (a failed check) or work (packing, a library's kernel).
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

import regmem
from regmem.ops import OPS, gated_delta_rule
from regmem.ops.examples import EXAMPLES

PACKAGE = str(Path(regmem.__file__).parent)


def _calls(fn) -> list[tuple[str, int]]:
    """(function name, frames below the first) of every regmem function entered while fn runs."""
    calls, depth = [], [0]

    def profile(frame, event, arg):
        if event == "call":
            if frame.f_code.co_filename.startswith(PACKAGE):
                calls.append((frame.f_code.co_name, depth[0]))
            depth[0] += 1
        elif event == "return":
            depth[0] -= 1

    sys.setprofile(profile)
    try:
        fn()
    finally:
        sys.setprofile(None)
    top = calls[0][1]
    return [(name, d - top) for name, d in calls]  # the public call at depth 0


def _before_core(calls, core_name: str) -> int:
    return next(i for i, (name, depth) in enumerate(calls) if name == core_name and depth == 1)


@pytest.mark.parametrize("with_state", [False, True])
def test_a_gated_delta_rule_call_spends_at_most_a_third_of_its_calls_before_the_core(with_state):
    B, T, H, K = 2, 64, 4, 32
    gen = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(B, T, H, K, generator=gen) for _ in range(3))
    k = torch.nn.functional.normalize(k, dim=-1)
    g, beta = -torch.rand(B, T, H, generator=gen) * 0.1, torch.rand(B, T, H, generator=gen)
    state = torch.zeros(B, H, K, K) if with_state else None
    gated_delta_rule(q, k, v, g, beta, initial_state=state)  # imports and caches before counting
    calls = _calls(lambda: gated_delta_rule(q, k, v, g, beta, initial_state=state, mode="chunk"))
    before = _before_core(calls, gated_delta_rule.forms["chunk"].__name__)
    assert calls[0] == ("__call__", 0)  # the public call, then the core one frame below it: two frames
    assert before <= len(calls) / 3, f"{before} of {len(calls)} regmem calls before the core: {calls[:before]}"


@pytest.mark.parametrize("name", sorted(OPS))
def test_every_core_runs_one_frame_below_the_public_call(name):
    """Prepare and the frame's helpers return before the core starts (op.py): the core is never deeper."""
    op = OPS[name]
    tokens, options, state = EXAMPLES[name].make(2, 8, 2, 4, 4, torch.float64, torch.Generator().manual_seed(0))
    for mode in ("reference", "recurrent", "chunk"):
        op(**tokens, **options, initial_state=state, mode=mode)
        calls = _calls(lambda mode=mode: op(**tokens, **options, initial_state=state, mode=mode))
        core = op.forms[mode].__name__
        assert calls[0] == ("__call__", 0) and (core, 1) in calls, f"{name} {mode}: {core} is not one frame below"
