"""Gated DeltaNet chunk form, forward+backward: whichever regmem is importable beside fla's pure-torch
`naive_chunk_gated_delta_rule`, same inputs, one process, alternating. Usage:

    python benchmarks/scripts/gdn_vs_fla.py [T] [rounds]

Works against any regmem revision with `regmem.ops.gated_delta_rule(..., mode="chunk")` (e.g. an old commit in a
worktree, `PYTHONPATH=<worktree>/src`), which `regmem bench ops --ops fla_naive_gated_delta_rule` cannot. Needs
fla-core (`pip install 'regmem[bench]'`); fla's file is loaded by path, as `regmem.lab.bench.external` does, because
importing the `fla` package needs triton.
"""

import importlib.util
import pathlib
import sys

import torch
import torch.utils.benchmark as benchmark

import regmem
from regmem.ops import gated_delta_rule

T = int(sys.argv[1]) if len(sys.argv) > 1 else 16384
rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 2
B, H, K = 1, 4, 64

fla = importlib.util.find_spec("fla")
path = pathlib.Path(next(iter(fla.submodule_search_locations))) / "ops/gated_delta_rule/naive.py"
spec = importlib.util.spec_from_file_location("fla_gdn_naive", path)
naive = importlib.util.module_from_spec(spec)
spec.loader.exec_module(naive)

gen = torch.Generator().manual_seed(0)
q = torch.randn(B, T, H, K, generator=gen)
k = torch.nn.functional.normalize(torch.randn(B, T, H, K, generator=gen), dim=-1)
v = torch.randn(B, T, H, K, generator=gen)
g = torch.nn.functional.logsigmoid(torch.randn(B, T, H, generator=gen) + 3.0)  # retention ~0.95, as regmem bench
beta = torch.sigmoid(torch.randn(B, T, H, generator=gen))
leaves = [x.requires_grad_() for x in (q, k, v, g, beta)]


def fwd_bwd(fn):
    def step():
        for x in leaves:
            x.grad = None
        fn(*leaves)[0].sum().backward()
    return step


ours = fwd_bwd(lambda *a: gated_delta_rule(*a, mode="chunk", chunk_size=64))
theirs = fwd_bwd(lambda *a: naive.naive_chunk_gated_delta_rule(*a, chunk_size=64))


def seconds(step):
    timer = benchmark.Timer(stmt="step()", globals={"step": step}, num_threads=torch.get_num_threads())
    return timer.blocked_autorange(min_run_time=5).median


print(f"regmem from {pathlib.Path(regmem.__file__).parent}, T={T}, B={B}, H={H}, K=V={K}, fp32")
for r in range(rounds):
    a, b = seconds(ours), seconds(theirs)
    print(f"round {r}: regmem {a * 1e3:.0f} ms, fla naive {b * 1e3:.0f} ms, regmem speed-up {b / a:.2f}x", flush=True)
