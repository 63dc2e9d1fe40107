"""Newton-Schulz as inner GD and Muon as a momentum memory with a nonlinear read-out (Nested Learning,
arXiv:2512.24695, Sec. 4.2 eqs. 42-44, Sec. 4.4 eq. 52)."""

import copy
import math

import pytest
import torch

from regmem.optim import (
    CUBIC,
    M3,
    QUINTIC,
    MuonMemory,
    newton_schulz,
    newton_schulz_step,
    orthogonality_gd_step,
    orthogonality_grad,
    orthogonality_loss,
)

SHAPES = [(6, 10), (10, 6), (8, 8)]
SHAPE_IDS = ["wide6x10", "tall10x6", "square8"]


def _gen(seed=0):
    return torch.Generator().manual_seed(seed)


def _conditioned(shape, cond, g):
    """A float64 matrix with singular values evenly spread in [3 / cond, 3], and its polar factor U V^T."""
    m, n = shape
    r = min(m, n)
    u, _ = torch.linalg.qr(torch.randn(m, r, generator=g, dtype=torch.float64))
    v, _ = torch.linalg.qr(torch.randn(n, r, generator=g, dtype=torch.float64))
    s = 3.0 * torch.linspace(1.0 / cond, 1.0, r, dtype=torch.float64)
    return u @ torch.diag(s) @ v.T, u @ v.T, u, v


@pytest.mark.parametrize("shape", SHAPES, ids=SHAPE_IDS)
def test_cubic_ns_step_is_gd_step_quarter_on_orthogonality_loss(shape):
    o = 0.3 * torch.randn(shape, generator=_gen(1), dtype=torch.float64)
    leaf = o.clone().requires_grad_()
    orthogonality_loss(leaf).backward()
    gd = o - 0.25 * leaf.grad  # eq. 44 without proximity term, zeta = 1/4
    torch.testing.assert_close(orthogonality_grad(o), leaf.grad, rtol=0, atol=1e-13)
    torch.testing.assert_close(newton_schulz_step(o, CUBIC), gd, rtol=0, atol=1e-13)
    torch.testing.assert_close(orthogonality_gd_step(o, 0.25), gd, rtol=0, atol=1e-13)
    torch.testing.assert_close(gd, 1.5 * o - 0.5 * o @ o.T @ o, rtol=0, atol=1e-13)


def test_gd_step_with_proximity_term_matches_autograd_and_first_step_is_cubic():
    g = 0.3 * torch.randn(5, 7, generator=_gen(2), dtype=torch.float64)
    o = g + 0.1 * torch.randn(5, 7, generator=_gen(3), dtype=torch.float64)
    leaf = o.clone().requires_grad_()
    (orthogonality_loss(leaf) + 0.5 * (leaf - g).square().sum()).backward()
    torch.testing.assert_close(orthogonality_gd_step(o, 0.1, anchor=g), o - 0.1 * leaf.grad, rtol=0, atol=1e-13)
    # From O_0 = g the proximity gradient vanishes: the first step of eq. 44 is the cubic NS step.
    torch.testing.assert_close(orthogonality_gd_step(g, 0.25, anchor=g), newton_schulz_step(g, CUBIC),
                               rtol=0, atol=1e-13)


@pytest.mark.parametrize("shape", SHAPES, ids=SHAPE_IDS)
def test_cubic_newton_schulz_converges_to_polar_factor(shape):
    x, polar, _, _ = _conditioned(shape, cond=5.0, g=_gen(4))
    svd_u, _, svd_vh = torch.linalg.svd(x, full_matrices=False)
    torch.testing.assert_close(polar, svd_u @ svd_vh, rtol=0, atol=1e-12)
    torch.testing.assert_close(newton_schulz(x, 30, CUBIC), polar, rtol=0, atol=1e-12)
    # Fewer steps have not arrived yet: the polar factor is the limit, not a one-step result.
    assert (newton_schulz(x, 3, CUBIC) - polar).abs().max() > 1e-2


@pytest.mark.parametrize("shape", SHAPES, ids=SHAPE_IDS)
def test_quintic_newton_schulz_keeps_singular_vectors_but_only_approximates_polar_factor(shape):
    x, polar, u, v = _conditioned(shape, cond=5.0, g=_gen(5))
    for steps in (5, 50):
        o = newton_schulz(x, steps, QUINTIC)
        core = u.T @ o @ v  # diagonal iff O = U S' V^T
        torch.testing.assert_close(core, torch.diag(torch.diagonal(core)), rtol=0, atol=1e-12)
        s = torch.linalg.svdvals(o)
        assert s.min() > 0.65 and s.max() < 1.15
        # The quintic overshoots by design: singular values settle in a band around 1, never at 1.
        assert (s - 1).abs().max() > 0.1
        assert (o - polar).abs().max() > 1e-2


def test_newton_schulz_maps_zero_to_zero_and_is_odd_and_scale_free():
    assert torch.equal(newton_schulz(torch.zeros(4, 6)), torch.zeros(4, 6))
    x = torch.randn(4, 6, generator=_gen(6), dtype=torch.float64)
    assert torch.equal(newton_schulz(-x), -newton_schulz(x))
    torch.testing.assert_close(newton_schulz(7.0 * x), newton_schulz(x), rtol=0, atol=1e-13)
    with pytest.raises(ValueError, match="2-D"):
        newton_schulz(torch.randn(2, 3, 4))


def _run(opt_cls, params, grads, **kw):
    opt = opt_cls(params, **kw)
    for step_grads in grads:
        for p, g in zip(params, step_grads, strict=True):
            p.grad = g.clone()
        opt.step()
    return opt


MUON_SETTINGS = {
    "defaults": dict(),
    "no-nesterov-no-wd": dict(nesterov=False, weight_decay=0.0),
    "cubic-7steps-original": dict(ns_coefficients=CUBIC, ns_steps=7, adjust_lr_fn="original", momentum=0.9),
    "match-rms-adamw-wd": dict(adjust_lr_fn="match_rms_adamw", weight_decay=0.05, ns_steps=3),
}


@pytest.mark.parametrize("settings", MUON_SETTINGS.values(), ids=MUON_SETTINGS.keys())
def test_muon_memory_equals_torch_muon_bit_for_bit(settings):
    g = _gen(7)
    init = [torch.randn(s, generator=g) for s in [(8, 16), (16, 8), (12, 12)]]
    grads = [[torch.randn(p.shape, generator=g) for p in init] for _ in range(12)]
    ours = [p.clone().requires_grad_() for p in init]
    theirs = [p.clone().requires_grad_() for p in init]
    opt = _run(MuonMemory, ours, grads, lr=0.02, **settings)
    ref = _run(torch.optim.Muon, theirs, grads, lr=0.02, **settings)
    for a, b, a0 in zip(ours, theirs, init, strict=True):
        assert torch.equal(a, b) and not torch.equal(a, a0)
        # The memory is torch's momentum buffer with the paper's (descent) sign.
        assert torch.equal(opt.state[a]["memory"], -ref.state[b]["momentum_buffer"])


def test_muon_memory_is_eq42_momentum_then_newton_schulz_in_param_dtype():
    g = _gen(8)
    w0 = torch.randn(5, 9, generator=g, dtype=torch.float64)
    grads = [[torch.randn(5, 9, generator=g, dtype=torch.float64)] for _ in range(4)]
    w = [w0.clone()]
    _run(MuonMemory, w, grads, lr=0.1, momentum=0.8, nesterov=False, weight_decay=0.0, ns_dtype=None,
         ns_coefficients=CUBIC, ns_steps=20)
    m, expected = torch.zeros_like(w0), w0.clone()
    for (grad,) in grads:
        m = 0.8 * m - 0.2 * grad  # eq. 42 with alpha = 0.8, eta = 0.2
        expected = expected + 0.1 * newton_schulz(m, 20, CUBIC)  # adjust "original": sqrt(max(1, 5/9)) = 1
    torch.testing.assert_close(w[0], expected, rtol=0, atol=1e-12)


@pytest.mark.parametrize("opt_cls", [MuonMemory, M3], ids=["MuonMemory", "M3"])
@pytest.mark.parametrize("shape", [(4,), (2, 3, 4), ()], ids=["1d", "3d", "scalar"])
def test_muon_family_rejects_non_matrix_params(opt_cls, shape):
    with pytest.raises(ValueError, match="only 2-D"):
        opt_cls([torch.zeros(3, 3, requires_grad=True), torch.zeros(shape, requires_grad=True)])


@pytest.mark.parametrize("kwargs,name", [
    (dict(lr=-1.0), "lr"), (dict(momentum=1.0), "momentum"), (dict(weight_decay=-0.1), "weight_decay"),
    (dict(ns_coefficients=(1.0, 2.0)), "ns_coefficients"), (dict(ns_steps=-1), "ns_steps"),
    (dict(eps=0.0), "eps"), (dict(adjust_lr_fn="rms"), "adjust_lr_fn"),
], ids=["lr", "momentum", "weight_decay", "ns_coefficients", "ns_steps", "eps", "adjust_lr_fn"])
def test_muon_memory_rejects_bad_hyperparameters(kwargs, name):
    with pytest.raises(ValueError, match=name):
        MuonMemory([torch.zeros(2, 2, requires_grad=True)], **kwargs)


def test_muon_memory_rejects_sparse_gradients():
    p = torch.zeros(3, 3, requires_grad=True)
    p.grad = torch.eye(3).to_sparse()
    with pytest.raises(RuntimeError, match="sparse"):
        MuonMemory([p]).step()


def test_muon_memory_closure_returns_loss_and_steps():
    w = torch.randn(4, 6, generator=_gen(9), requires_grad=True)
    w0 = w.detach().clone()
    opt = MuonMemory([w], lr=0.05)

    def closure():
        opt.zero_grad()
        loss = (w ** 2).sum()
        loss.backward()
        return loss

    loss = opt.step(closure)
    assert math.isclose(float(loss.detach()), float((w0 ** 2).sum()), rel_tol=1e-6)
    assert not torch.equal(w.detach(), w0)


def test_muon_memory_state_dict_round_trip_resumes_bit_exactly():
    g = _gen(10)
    init = [torch.randn(s, generator=g) for s in [(6, 10), (10, 6)]]
    grads = [[torch.randn(p.shape, generator=g) for p in init] for _ in range(8)]
    kw = dict(lr=0.03, momentum=0.9, adjust_lr_fn="match_rms_adamw")
    straight = [p.clone() for p in init]
    _run(MuonMemory, straight, grads, **kw)
    first = [p.clone() for p in init]
    opt = _run(MuonMemory, first, grads[:3], **kw)
    saved = copy.deepcopy(opt.state_dict())
    resumed = [p.clone() for p in first]
    opt2 = MuonMemory(resumed, **kw)
    opt2.load_state_dict(saved)
    for step_grads in grads[3:]:
        for p, gr in zip(resumed, step_grads, strict=True):
            p.grad = gr.clone()
        opt2.step()
    for a, b in zip(straight, resumed, strict=True):
        assert torch.equal(a, b)
