"""Probe (2026-11-30, issue 45): forward and backward CPU time of one training step of each named mixer (one
thread, B 1, d_model 256, 4 heads, the mean of 3 steps after 2; arguments: T, then mixers as name or
name:option=value,...). Output: step_split.txt."""

import sys
import time

import torch

from regmem.layers.registry import build_mixer


def split_ms(mixer, T: int) -> tuple[float, float]:
    x = torch.randn(1, T, 256, requires_grad=True)

    def step():
        start = time.process_time()
        y = mixer(x)
        loss = (y[0] if isinstance(y, tuple) else y).square().mean()
        middle = time.process_time()
        loss.backward()
        return middle - start, time.process_time() - middle

    step(), step()
    runs = [step() for _ in range(3)]
    return tuple(sum(r[i] for r in runs) / 3 * 1000 for i in (0, 1))


if __name__ == "__main__":
    torch.set_num_threads(1)
    T = int(sys.argv[1])
    for spec in sys.argv[2:]:
        torch.manual_seed(0)
        name, _, opts = spec.partition(":")
        kw = eval(f"dict({opts})")
        fwd, bwd = split_ms(build_mixer(name, 256, 4, **kw), T)
        print(f"{name} {kw} fwd {fwd:.0f} bwd {bwd:.0f} total {fwd + bwd:.0f}", flush=True)
