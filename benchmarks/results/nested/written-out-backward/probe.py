"""Probe (2026-11-30, issue 45): where Hope's eager training step goes, on one CPU thread (B 1, T 1024, d_model 256,
4 heads, fwd+bwd of the mixer alone, the mean of 3 steps after 2 warm-up steps, CPU time).

Variants, each swapped into the engine (src/regmem/ops/ttt/chunk.py) for the timing only:
  engine        the engine as committed
  function      `_layer_state` replaced by layer_state_function.py (exact; one autograd node, backward by hand)
  bound-state   `_layer_state` replaced by a cheap stand-in with the same inputs and outputs (wrong numbers): what
                the whole state update costs, an upper bound on what fusing it could save
  bound-kernels `_kernels` replaced by a cheap stand-in (wrong numbers): what the decay kernels cost
  bound-steps   `layer_steps` replaced by eta * ||x||^2 (wrong numbers): what the proximal steps cost
Run from the repository root: PYTHONPATH=src python benchmarks/results/nested/written-out-backward/probe.py
"""

import itertools
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).parent))
import layer_state_function  # noqa: E402

import regmem.ops.ttt.chunk  # noqa: E402, F401
from regmem.layers.registry import build_mixer  # noqa: E402

engine = sys.modules["regmem.ops.ttt.chunk"]
ORIGINAL = {name: getattr(engine, name) for name in ("_layer_state", "_kernels", "layer_steps")}


def check_exact():
    """layer_state_function against the engine's `_layer_state` under autograd: values and every gradient, float64."""
    f64, cases = torch.float64, 0
    for momentum, dgd, given, (lw, lx) in itertools.product(
            [False, True], [False, True], [False, True], [((3,), (3,)), ((2, 3), (2, 1)), ((2, 1), (2, 3))]):
        gen = torch.Generator().manual_seed(cases)
        r = lambda *s, gen=gen: torch.randn(*s, generator=gen, dtype=f64)  # noqa: E731
        W0 = r(*lw, 4, 3).requires_grad_()
        P0 = r(*lw, 4, 3).requires_grad_() if momentum else None
        X, D = (r(*lx, 5, 4) * 0.5).requires_grad_(), r(*lx, 5, 3).requires_grad_()
        rho = torch.rand(*lx, 5, 1, generator=gen, dtype=f64).requires_grad_() if dgd else None
        XW0 = (X.detach() @ W0.detach()).requires_grad_() if given and dgd else None
        g = (-torch.rand(*lx, 5, generator=gen, dtype=f64)).requires_grad_()
        log_mu = (-torch.rand(*lx, 5, generator=gen, dtype=f64)).requires_grad_() if momentum else None
        inputs = [t for t in (W0, P0, X, D, rho, XW0, g, log_mu) if t is not None]
        results = []
        for form in (layer_state_function.layer_state, ORIGINAL["_layer_state"]):
            outs = [t for t in form(W0, P0, X, D, rho, engine._kernels(g, log_mu), XW0) if t is not None]
            weights = torch.Generator().manual_seed(99)
            loss = sum((t * torch.randn(t.shape, generator=weights, dtype=f64)).sum() for t in outs)
            grads = torch.autograd.grad(loss, inputs, allow_unused=True)
            grads = [torch.zeros_like(x) if d is None else d for d, x in zip(grads, inputs, strict=True)]
            results.append((outs, grads))
        for a, b in zip(results[0][0] + results[0][1], results[1][0] + results[1][1], strict=True):
            torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-10)
        cases += 1
    args = [(-torch.rand(2, 4, dtype=f64)).requires_grad_() for _ in range(2)]
    args = [torch.randn(2, 3, 2, dtype=f64, requires_grad=True) for _ in range(2)] + [
        torch.randn(2, 4, 3, dtype=f64, requires_grad=True), torch.randn(2, 4, 2, dtype=f64, requires_grad=True),
        torch.rand(2, 4, 1, dtype=f64, requires_grad=True)] + args
    ok = torch.autograd.gradcheck(lambda W0, P0, X, D, rho, g, m: layer_state_function.layer_state(
        W0, P0, X, D, rho, engine._kernels(g, m)), args)
    print(f"exact: {cases} combinations of momentum / DGD / given X W0 / broadcast leading dims agree to 1e-10 "
          f"in float64, values and gradients; gradcheck {ok}")


def bound_state(W0, P0, X, D, rho, kn, XW0=None):
    Xt = X.transpose(-1, -2)
    E = None if rho is None else rho * (XW0 + D + kn["a_prev"] * kn["M_prev"][..., :1] * kn["Gam_prev"][..., :1])
    W = kn["a_end"] * W0 + engine.matmul(Xt, D if E is None else D + E)
    return W, (None if P0 is None else P0 * kn["c_end"] + engine.matmul(Xt, D)), E


def bound_kernels(g, log_mu, live=None):
    C = g.shape[-1]
    e = torch.exp(g).unsqueeze(-1)
    Gam = e.expand(*g.shape, C)
    out = {"Gam": Gam, "a": e, "a_end": e[..., -1:, :], "Gam_end": e, "a_prev": e, "Gam_prev": Gam, "M": Gam}
    if log_mu is not None:
        m = torch.exp(log_mu).unsqueeze(-1)
        out |= {"b": m, "b_end": m[..., -1:, :], "b_prev": m, "c_end": m[..., -1:, :], "E_end": m,
                "M": m.expand(*g.shape, C)}
    return out | {"M_end": e, "M_prev": out["M"]}


def bound_steps(rule, eta, x_sq, g_sq, r_sq, log_mu):
    steps = [eta * x2 for x2 in x_sq]
    return steps, steps


VARIANTS = {"engine": {}, "function": {"_layer_state": layer_state_function.layer_state},
            "bound-state": {"_layer_state": bound_state}, "bound-kernels": {"_kernels": bound_kernels},
            "bound-steps": {"layer_steps": bound_steps}}


def step_ms(name: str, T: int = 1024) -> float:
    for key, value in ORIGINAL.items():
        setattr(engine, key, VARIANTS.get(name, {}).get(key, value))
    torch.manual_seed(0)
    mixer = build_mixer("gated_deltanet" if name == "gdn" else "hope", 256, 4)
    x = torch.randn(1, T, 256, requires_grad=True)

    def step():
        mixer(x)[0].square().mean().backward()

    step(), step()
    start = time.process_time()
    for _ in range(3):
        step()
    return (time.process_time() - start) / 3 * 1000


if __name__ == "__main__":
    torch.set_num_threads(1)
    check_exact()
    gdn = step_ms("gdn")
    print(f"gated_deltanet: {gdn:.0f} ms")
    for name in [*VARIANTS, "engine"]:
        ms = step_ms(name)
        print(f"hope, {name}: {ms:.0f} ms ({ms / gdn:.1f}x Gated DeltaNet)", flush=True)
