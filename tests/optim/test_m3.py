"""M3, Multi-scale Momentum Muon (Nested Learning, arXiv:2512.24695, Sec. 7.2, Algorithm 1), against a literal
chunk-by-chunk transcription of Algorithm 1 and its stated reductions."""

import copy
import math

import pytest
import torch

from regmem.optim import CUBIC, M3, QUINTIC, newton_schulz

SHAPE = (5, 7)


def _grads(n, seed, scale=1.0):
    g = torch.Generator().manual_seed(seed)
    return [scale * torch.randn(SHAPE, generator=g, dtype=torch.float64) for _ in range(n)]


def _m3_reference(w0, grads, *, lr, betas, alpha, eps, f, ns_steps, coefficients, accumulate, weight_decay=0.0):
    """Algorithm 1 as printed, loops over chunks k and steps t = kf+1 .. (k+1)f; returns W after every step."""
    b1, b2, b3 = betas

    def write(memory, value, beta):
        return memory + beta * value if accumulate == "sum" else beta * memory + (1 - beta) * value

    def ns(m):
        return newton_schulz(m, ns_steps, coefficients)

    m1, m2, v, w = torch.zeros_like(w0), torch.zeros_like(w0), torch.zeros_like(w0), w0.clone()
    trajectory, k = [], 0
    while k * f < len(grads):
        if k > 0:  # line 3: the f gradients of chunk k-1, steps (k-1)f+1 .. kf (1-based)
            m2 = write(m2, sum(grads[(k - 1) * f:k * f]), b3)
        o2 = ns(m2)  # line 4
        for t in range(k * f + 1, min((k + 1) * f, len(grads)) + 1):
            g = grads[t - 1]  # line 6
            m1 = write(m1, g, b1)  # line 7
            v = write(v, g * g, b2)  # line 8
            o1 = ns(m1)  # line 9
            w = w * (1 - lr * weight_decay) - lr * (o1 + alpha * o2) / (v.sqrt() + eps)  # line 10
            trajectory.append(w)
        k += 1
    return trajectory


def _run(w, grads, **kw):
    opt = M3([w], **{"ns_dtype": None, **kw})  # float64 Newton-Schulz, as the reference's
    trajectory, states = [], []
    for g in grads:
        w.grad = g.clone()
        opt.step()
        trajectory.append(w.detach().clone())
        states.append({k: (v.clone() if torch.is_tensor(v) else v) for k, v in opt.state[w].items()})
    return opt, trajectory, states


CASES = {
    "sum-f3": dict(accumulate="sum", frequency=3),
    "sum-f1": dict(accumulate="sum", frequency=1),
    "ema-f3-wd": dict(accumulate="ema", frequency=3, weight_decay=0.1),
    "sum-f4-cubic": dict(accumulate="sum", frequency=4, ns_coefficients=CUBIC, ns_steps=8),
}


@pytest.mark.parametrize("case", CASES.values(), ids=CASES.keys())
def test_m3_matches_algorithm1_reference(case):
    kw = dict(lr=0.01, betas=(0.9, 0.99, 0.8), alpha=0.5, eps=1e-3, ns_steps=5, ns_coefficients=QUINTIC) | case
    grads = _grads(10, seed=1)
    w0 = torch.randn(SHAPE, generator=torch.Generator().manual_seed(2), dtype=torch.float64)
    _, trajectory, _ = _run(w0.clone().requires_grad_(), grads, **kw)
    ref = _m3_reference(w0, grads, lr=kw["lr"], betas=kw["betas"], alpha=kw["alpha"], eps=kw["eps"],
                        f=kw["frequency"], ns_steps=kw["ns_steps"], coefficients=kw["ns_coefficients"],
                        accumulate=kw["accumulate"], weight_decay=kw.get("weight_decay", 0.0))
    for ours, theirs in zip(trajectory, ref, strict=True):
        torch.testing.assert_close(ours, theirs, rtol=0, atol=1e-12)


def test_m3_without_slow_memory_and_normaliser_is_ns_of_accumulated_gradient():
    # alpha = 0 drops O2; beta2 = 0 keeps V = 0 so the denominator is eps = 1; then M1_t = beta1 sum_{s<=t} g_s and
    # Newton-Schulz is scale-free: W_t = W_{t-1} - lr NS(sum_{s<=t} g_s) (Muon with undamped momentum 1, no Nesterov).
    grads = _grads(7, seed=3)
    w = torch.zeros(SHAPE, dtype=torch.float64, requires_grad=True)
    _, trajectory, _ = _run(w, grads, lr=0.1, betas=(0.9, 0.0, 0.9), alpha=0.0, eps=1.0, frequency=3)
    expected, total = torch.zeros(SHAPE, dtype=torch.float64), torch.zeros(SHAPE, dtype=torch.float64)
    for g, ours in zip(grads, trajectory, strict=True):
        total = total + g
        expected = expected - 0.1 * newton_schulz(total, 5, QUINTIC)
        torch.testing.assert_close(ours, expected, rtol=0, atol=1e-12)


def test_m3_slow_memory_changes_only_at_multiples_of_frequency():
    f, beta3 = 3, 0.7
    grads = _grads(10, seed=4)
    w = torch.zeros(SHAPE, dtype=torch.float64, requires_grad=True)
    _, _, states = _run(w, grads, betas=(0.9, 0.99, beta3), frequency=f)
    previous = torch.zeros(SHAPE, dtype=torch.float64)
    for t, state in enumerate(states, start=1):
        slow = state["slow_momentum"]
        assert torch.equal(slow, previous) == (t % f != 0), t
        if t % f == 0:  # the write is beta3 times the sum of this chunk's f gradients
            torch.testing.assert_close(slow - previous, beta3 * sum(grads[t - f:t]), rtol=0, atol=1e-12)
            torch.testing.assert_close(state["slow_readout"], newton_schulz(slow, 5, QUINTIC), rtol=0, atol=0)
        previous = slow


def test_m3_frequency_one_slow_memory_is_fast_memory_lagged_by_one_step():
    grads = _grads(6, seed=5)
    kw = dict(lr=0.05, betas=(0.9, 0.99, 0.9), alpha=0.5, eps=1e-8, frequency=1)
    w = torch.zeros(SHAPE, dtype=torch.float64, requires_grad=True)
    _, trajectory, states = _run(w, grads, **kw)
    previous_w, previous_m1 = torch.zeros(SHAPE, dtype=torch.float64), torch.zeros(SHAPE, dtype=torch.float64)
    for state, w_t in zip(states, trajectory, strict=True):
        assert torch.equal(state["slow_momentum"], state["fast_momentum"])
        m1 = state["fast_momentum"]
        o = newton_schulz(m1, 5, QUINTIC) + 0.5 * newton_schulz(previous_m1, 5, QUINTIC)
        torch.testing.assert_close(w_t, previous_w - 0.05 * o / (state["second_moment"].sqrt() + 1e-8),
                                   rtol=0, atol=1e-12)
        previous_w, previous_m1 = w_t, m1


@pytest.mark.parametrize("accumulate", ["sum", "ema"])
def test_m3_second_moment_is_documented_accumulation_and_sets_update_scale(accumulate):
    beta2 = 0.95
    grads = _grads(5, seed=6)
    runs = []
    for scale in (1.0, 10.0):
        w = torch.zeros(SHAPE, dtype=torch.float64, requires_grad=True)
        _, trajectory, states = _run(w, [scale * g for g in grads], betas=(0.9, beta2, 0.9), eps=1e-30,
                                     accumulate=accumulate, frequency=2)
        runs.append(trajectory[-1])
    v = torch.zeros(SHAPE, dtype=torch.float64)
    for g in grads:
        v = v + beta2 * g * g if accumulate == "sum" else beta2 * v + (1 - beta2) * g * g
    torch.testing.assert_close(states[-1]["second_moment"], 100.0 * v, rtol=1e-13, atol=0)
    # NS read-outs are scale-free and sqrt(V) scales with the gradients: 10x gradients give a 10x smaller step.
    torch.testing.assert_close(runs[1], runs[0] / 10.0, rtol=1e-10, atol=0)


@pytest.mark.parametrize("accumulate", ["sum", "ema"])
def test_m3_beta1_beta3_matter_only_as_ema_decays(accumulate):
    """Under "sum" (Algorithm 1 as printed) M1 = beta1 sum g and M2 = beta3 sum S are only rescaled by beta1, beta3,
    and Newton-Schulz is scale-invariant (it normalises by the Frobenius norm first), so two runs with different
    beta1, beta3 agree to round-off; under "ema" the betas set how far back each memory looks, so they differ."""
    grads = _grads(12, seed=9)
    runs = []
    for beta1, beta3 in ((0.9, 0.9), (0.5, 0.2)):
        w = torch.zeros(SHAPE, dtype=torch.float64, requires_grad=True)
        _, trajectory, _ = _run(w, grads, lr=0.01, betas=(beta1, 0.999, beta3), frequency=3, accumulate=accumulate)
        runs.append(torch.stack(trajectory))
    gap = (runs[0] - runs[1]).abs().max()
    if accumulate == "sum":
        assert gap < 1e-12
    else:
        assert gap > 1e-3


def test_m3_state_dict_round_trip_resumes_bit_exactly():
    grads = _grads(9, seed=7)
    kw = dict(lr=0.02, alpha=0.3, frequency=3, weight_decay=0.01)
    w0 = torch.randn(SHAPE, generator=torch.Generator().manual_seed(8), dtype=torch.float64)
    _, straight, _ = _run(w0.clone().requires_grad_(), grads, **kw)
    first = w0.clone().requires_grad_()
    opt, _, _ = _run(first, grads[:4], **kw)  # stop mid-chunk: chunk_grad_sum holds one gradient
    saved = copy.deepcopy(opt.state_dict())
    resumed = first.detach().clone().requires_grad_()
    opt2 = M3([resumed], **{"ns_dtype": None, **kw})
    opt2.load_state_dict(saved)
    for g in grads[4:]:
        resumed.grad = g.clone()
        opt2.step()
    assert torch.equal(resumed, straight[-1])


def test_m3_closure_returns_loss():
    w = torch.randn(4, 6, generator=torch.Generator().manual_seed(9), requires_grad=True)
    w0 = w.detach().clone()
    opt = M3([w], lr=0.01)

    def closure():
        opt.zero_grad()
        loss = (w ** 2).sum()
        loss.backward()
        return loss

    loss = opt.step(closure)
    assert math.isclose(float(loss.detach()), float((w0 ** 2).sum()), rel_tol=1e-6)
    assert not torch.equal(w.detach(), w0)


@pytest.mark.parametrize("kwargs,name", [
    (dict(lr=-1.0), "lr"), (dict(betas=(0.9, 1.0, 0.9)), "betas"), (dict(betas=(0.9, 0.9)), "betas"),
    (dict(alpha=-0.5), "alpha"), (dict(eps=0.0), "eps"), (dict(frequency=0), "frequency"),
    (dict(frequency=2.5), "frequency"), (dict(ns_steps=-1), "ns_steps"),
    (dict(ns_coefficients=(1.0,)), "ns_coefficients"), (dict(accumulate="mean"), "accumulate"),
    (dict(weight_decay=-1.0), "weight_decay"), (dict(ns_eps=0.0), "ns_eps"), (dict(ns_dtype=torch.int32), "ns_dtype"),
], ids=["lr", "beta2", "betas-len", "alpha", "eps", "frequency", "frequency-float", "ns_steps", "ns_coefficients",
        "accumulate", "weight_decay", "ns_eps", "ns_dtype"])
def test_m3_rejects_bad_hyperparameters(kwargs, name):
    with pytest.raises(ValueError, match=name):
        M3([torch.zeros(2, 2, requires_grad=True)], **kwargs)


def test_newton_schulz_runs_in_bfloat16_by_default_and_returns_to_the_params_dtype():
    """A bfloat16 read-out (torch.optim.Muon's iteration, the "auto" choice where bfloat16 is native) is cast back:
    the state stays float32, and the step is within bfloat16 round-off of the float32 one."""
    grads = [g.float() for g in _grads(4, seed=3)]
    runs = {}
    for ns_dtype in (torch.bfloat16, None):
        w = torch.zeros(SHAPE, requires_grad=True)
        opt, trajectory, states = _run(w, grads, lr=0.01, frequency=2, ns_dtype=ns_dtype)
        assert all(v.dtype == torch.float32 for v in states[-1].values() if torch.is_tensor(v))
        runs[ns_dtype] = trajectory[-1]
    assert M3([torch.zeros(2, 2, requires_grad=True)]).defaults["ns_dtype"] == "auto"
    assert not torch.equal(runs[torch.bfloat16], runs[None])
    torch.testing.assert_close(runs[torch.bfloat16], runs[None], rtol=0.05, atol=1e-3)


def test_auto_precision_follows_the_device(monkeypatch):
    """"auto" is bfloat16 where bfloat16 is native and the param's dtype where it is not (module docstring)."""
    import regmem.optim.m3 as m3_module

    grads = [g.float() for g in _grads(2, seed=4)]
    ends = {}
    for native in (True, False):
        monkeypatch.setattr(m3_module, "fast_bfloat16", lambda device, native=native: native)
        ends[native] = _run(torch.zeros(SHAPE, requires_grad=True), grads, lr=0.01, ns_dtype="auto")[1][-1]
    for dtype in (torch.bfloat16, None):
        end = _run(torch.zeros(SHAPE, requires_grad=True), grads, lr=0.01, ns_dtype=dtype)[1][-1]
        assert torch.equal(end, ends[dtype is torch.bfloat16])
