"""AdaMuon (regmem/optim/adamuon.py) against the authors' update written out here from their `adamuon.py`
(github.com/Chongjie-Si/AdaMuon): a gradient-sign momentum buffer, the Nesterov look-ahead, Newton-Schulz, Adam's
bias-corrected second moment of its output, and the rescaling by sqrt(min) / ||u|| times 0.2 sqrt(max)."""

import copy
import math

import pytest
import torch

from regmem.optim import AdaMuon, newton_schulz


def authors_adamuon(w0, grads, *, lr, momentum=0.95, nesterov=True, weight_decay=0.01, beta2=0.999, eps=1e-8):
    """Their step for one matrix, in its dtype (Newton-Schulz in that dtype too)."""
    w, buf, v = w0.clone(), torch.zeros_like(w0), torch.zeros_like(w0)
    for t, g in enumerate(grads, start=1):
        buf = buf.lerp(g, 1 - momentum)
        query = g.lerp(buf, momentum) if nesterov else buf
        o = newton_schulz(query, 5)
        v = beta2 * v + (1 - beta2) * o * o
        u = o / ((v / (1 - beta2 ** t)).sqrt() + eps)
        u = u * min(w.shape) ** 0.5 / (u.norm() + eps)
        w = w * (1 - lr * weight_decay) - lr * 0.2 * max(w.shape) ** 0.5 * u
    return w


def _run(params, grads, **kwargs):
    opt = AdaMuon(params, **kwargs)
    for step in grads:
        for p, g in zip(params, step, strict=True):
            p.grad = g.clone()
        opt.step()
    return opt


@pytest.mark.parametrize("settings", [dict(), dict(nesterov=False, weight_decay=0.0, momentum=0.8, beta2=0.9)],
                         ids=["defaults", "plain-momentum"])
@pytest.mark.parametrize("shape", [(6, 10), (10, 6)])
def test_adamuon_equals_the_authors_update(shape, settings):
    g = torch.Generator().manual_seed(0)
    w0 = torch.randn(shape, generator=g, dtype=torch.float64)
    grads = [torch.randn(shape, generator=g, dtype=torch.float64) for _ in range(6)]
    w = [w0.clone()]
    _run(w, [[gr] for gr in grads], lr=0.01, ns_dtype=None, **settings)
    torch.testing.assert_close(w[0], authors_adamuon(w0, grads, lr=0.01, **settings), rtol=0, atol=1e-12)


def test_each_step_has_rms_point_two_times_lr():
    """Without weight decay every step moves the matrix by RMS 0.2 lr, whatever its shape and the gradient's size."""
    for shape, size in (((8, 32), 1e-3), ((32, 8), 1e3)):
        w = torch.randn(shape, dtype=torch.float64, requires_grad=True)
        before = w.detach().clone()
        w.grad = size * torch.randn(shape, dtype=torch.float64)
        AdaMuon([w], lr=0.05, weight_decay=0.0, ns_dtype=None).step()
        rms = (w.detach() - before).pow(2).mean().sqrt()
        assert math.isclose(float(rms), 0.2 * 0.05, rel_tol=1e-6)


def test_second_moment_changes_the_direction():
    """AdaMuon's first step is the sign of Muon's orthogonalised direction (v = (1 - beta2) o^2, bias-corrected to
    o^2), rescaled (eps made negligible); Muon steps along o itself. The two steps differ, and AdaMuon's has one
    magnitude everywhere."""
    from regmem.optim import MuonMemory

    g = torch.Generator().manual_seed(1)
    grad = torch.randn(8, 12, generator=g, dtype=torch.float64)
    steps = []
    for cls, kwargs in ((AdaMuon, {"eps": 1e-14}), (MuonMemory, {"adjust_lr_fn": "match_rms_adamw"})):
        w = torch.zeros(8, 12, dtype=torch.float64, requires_grad=True)
        w.grad = grad.clone()
        cls([w], lr=0.1, weight_decay=0.0, ns_dtype=None, **kwargs).step()
        steps.append(w.detach().clone())
    ada, muon = steps
    cosine = (ada * muon).sum() / (ada.norm() * muon.norm())
    assert cosine < 0.99
    torch.testing.assert_close(ada.abs(), torch.full_like(ada, 0.2 * 0.1), rtol=1e-6, atol=0)
    assert torch.equal(torch.sign(ada), torch.sign(muon))


@pytest.mark.parametrize("kwargs,name", [
    (dict(lr=-1.0), "lr"), (dict(momentum=1.0), "momentum"), (dict(weight_decay=-0.1), "weight_decay"),
    (dict(beta2=1.0), "beta2"), (dict(eps=0.0), "eps"), (dict(ns_steps=-1), "ns_steps"),
    (dict(ns_coefficients=(1.0, 2.0)), "ns_coefficients"),
])
def test_adamuon_rejects_bad_hyperparameters_and_non_matrices(kwargs, name):
    with pytest.raises(ValueError, match=name):
        AdaMuon([torch.zeros(2, 2, requires_grad=True)], **kwargs)
    with pytest.raises(ValueError, match="only 2-D"):
        AdaMuon([torch.zeros(3, requires_grad=True)])


def test_adamuon_state_dict_round_trip_resumes_bit_exactly():
    g = torch.Generator().manual_seed(2)
    init = [torch.randn(s, generator=g) for s in [(6, 10), (10, 6)]]
    grads = [[torch.randn(p.shape, generator=g) for p in init] for _ in range(6)]
    straight = [p.clone() for p in init]
    _run(straight, grads, lr=0.02)
    first = [p.clone() for p in init]
    saved = copy.deepcopy(_run(first, grads[:2], lr=0.02).state_dict())
    opt = AdaMuon(first, lr=0.02)
    opt.load_state_dict(saved)
    for step in grads[2:]:
        for p, gr in zip(first, step, strict=True):
            p.grad = gr.clone()
        opt.step()
    for a, b in zip(straight, first, strict=True):
        assert torch.equal(a, b)
