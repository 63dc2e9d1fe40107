"""Probe (2026-11-30, issue 45): Hope compiled by piece (`compile_pieces=True`) beside an eager Gated DeltaNet layer,
one CPU thread, B 1, T 1024, d_model 256, 4 heads: the first call (a compile, or a load from the inductor cache) and
the steady step. Output: compiled_warm_cache.txt."""

import time

import torch

from regmem.layers.registry import build_mixer

T = 1024


def bench(mixer, n=3):
    x = torch.randn(1, T, 256, requires_grad=True)

    def step():
        mixer(x)[0].square().mean().backward()

    wall, cpu = time.perf_counter(), time.process_time()
    step()
    first = (time.perf_counter() - wall, time.process_time() - cpu)
    step()
    cpu = time.process_time()
    for _ in range(n):
        step()
    return first, (time.process_time() - cpu) / n * 1000


if __name__ == "__main__":
    torch.set_num_threads(1)
    torch.manual_seed(0)
    first, steady = bench(build_mixer("gated_deltanet", 256, 4))
    print("gdn steady ms", steady, flush=True)
    first, steady = bench(build_mixer("hope", 256, 4, compile_pieces=True))
    print("hope compiled first call wall/cpu s", first, "steady ms", steady, flush=True)
