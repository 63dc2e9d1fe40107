"""The learned preconditioner memory of ValueMomentum (Nested Learning, arXiv:2512.24695, Sec. 4.2, eqs. 38-41):
the optimiser equals eqs. 40-41 and the momentum written out as a step loop here; eq. 41 is one autograd gradient
step on eq. 40's objective; the memory learns its target map; the identity target is plain momentum (torch SGD);
the learned P survives a state_dict round trip; bad configs raise ValueError naming the field."""

import copy

import pytest
import torch

from regmem.optim import LearnedPreconditioner, ValueMomentum, newton_schulz, preconditioner_write

F64 = torch.float64


def _targets(G, target):
    return {"identity": G, "normalized": G / G.norm(), "sign": torch.sign(G), "orthogonal": newton_schulz(G)}[target]


@pytest.mark.parametrize("target", ["identity", "normalized", "sign", "orthogonal"])
@pytest.mark.parametrize("normalize", [True, False])
def test_optimiser_equals_eqs_40_41_and_momentum_as_a_step_loop(target, normalize):
    """P_{t+1} = P_t - zeta (P_t G_t - G^_t) G_t^T / s_t, v_t = P_{t+1} G_t, b = mu b + (1 - d) v_t, W -= lr b, for a
    matrix parameter (P: [4, 4]) and a vector one (P: [1, 1]), over a fixed gradient sequence."""
    config = LearnedPreconditioner(lr=0.3, target=target, normalize=normalize)
    gen = torch.Generator().manual_seed(0)
    params = [torch.nn.Parameter(torch.randn(4, 3, generator=gen, dtype=F64)),
              torch.nn.Parameter(torch.randn(5, generator=gen, dtype=F64))]
    opt = ValueMomentum(params, lr=0.1, momentum=0.8, dampening=0.25, preconditioner=config)
    expected = [p.detach().clone() for p in params]
    Ps = [torch.eye(4, dtype=F64), torch.eye(1, dtype=F64)]
    bufs = [torch.zeros_like(p) for p in params]
    for _ in range(6):
        grads = [torch.randn(p.shape, generator=gen, dtype=F64) for p in params]
        for p, g in zip(params, grads, strict=True):
            p.grad = g.clone()
        opt.step()
        for n, g in enumerate(grads):
            G = g.reshape(g.shape[0], -1) if g.ndim == 2 else g.reshape(1, -1)
            s = G.norm() ** 2 if normalize else 1.0
            Ps[n] = Ps[n] - 0.3 * (Ps[n] @ G - _targets(G, target)) @ G.T / s  # eq. 41
            bufs[n] = 0.8 * bufs[n] + 0.75 * (Ps[n] @ G).reshape(g.shape)
            expected[n] = expected[n] - 0.1 * bufs[n]
        for p, w, P, n in zip(params, expected, Ps, range(2), strict=True):
            torch.testing.assert_close(p.detach(), w, rtol=1e-12, atol=1e-12, msg=f"param {n}")
            torch.testing.assert_close(opt.state[p]["preconditioner"], P, rtol=1e-12, atol=1e-12)


def test_eq_41_is_one_gradient_step_on_the_eq_40_objective():
    gen = torch.Generator().manual_seed(1)
    P0, G = torch.randn(4, 4, generator=gen, dtype=F64), torch.randn(4, 6, generator=gen, dtype=F64)
    config = LearnedPreconditioner(lr=0.7, target="orthogonal")
    P = P0.clone().requires_grad_()
    objective = 0.5 * (P @ G - newton_schulz(G)).pow(2).sum() / G.norm() ** 2
    (grad,) = torch.autograd.grad(objective, P)
    P1, value = preconditioner_write(P0, G, config)
    torch.testing.assert_close(P1, P0 - 0.7 * grad, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(value, P1 @ G, rtol=0, atol=0)


def test_the_memory_learns_its_target_map_in_context():
    """Gradients from a fixed 4-dimensional row space: after enough normalised-LMS steps P G = G^ on that space,
    so the read-out is the target's coordinates (here the normalised gradient)."""
    gen = torch.Generator().manual_seed(2)
    basis = torch.randn(4, 4, generator=gen, dtype=F64)
    config = LearnedPreconditioner(lr=1.0, target="normalized")
    P = torch.eye(4, dtype=F64)
    c = torch.randn(4, 3, generator=gen, dtype=F64)
    G = basis @ c  # one gradient, seen repeatedly (a stationary landscape)
    for _ in range(200):
        P, value = preconditioner_write(P, G, config)
    torch.testing.assert_close(value, G / G.norm(), rtol=1e-8, atol=1e-8)
    assert not torch.allclose(P, torch.eye(4, dtype=F64))


def test_identity_target_keeps_p_at_the_identity_and_is_sgd_with_momentum():
    torch.manual_seed(0)
    model = torch.nn.Linear(5, 3).double()
    ref = copy.deepcopy(model)
    opt = ValueMomentum(model.parameters(), lr=0.05, momentum=0.9,
                        preconditioner=LearnedPreconditioner(target="identity"))
    sgd = torch.optim.SGD(ref.parameters(), lr=0.05, momentum=0.9)
    gen = torch.Generator().manual_seed(1)
    for _ in range(5):
        x, y = torch.randn(8, 5, generator=gen, dtype=F64), torch.randn(8, 3, generator=gen, dtype=F64)
        for m, o in ((model, opt), (ref, sgd)):
            o.zero_grad()
            torch.nn.functional.mse_loss(m(x), y).backward()
            o.step()
    torch.testing.assert_close(list(model.parameters()), list(ref.parameters()), rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(opt.state[model.weight]["preconditioner"], torch.eye(3, dtype=F64))


def test_state_dict_round_trip_keeps_the_learned_preconditioner():
    gen = torch.Generator().manual_seed(3)
    p = torch.nn.Parameter(torch.randn(3, 4, generator=gen, dtype=F64))
    config = LearnedPreconditioner(lr=0.5, target="sign")
    opt = ValueMomentum([p], lr=0.1, momentum=0.9, preconditioner=config)
    grads = [torch.randn(3, 4, generator=gen, dtype=F64) for _ in range(6)]
    for g in grads[:3]:
        p.grad = g.clone()
        opt.step()
    q = torch.nn.Parameter(p.detach().clone())
    opt2 = ValueMomentum([q], lr=0.1, momentum=0.9, preconditioner=config)
    opt2.load_state_dict(copy.deepcopy(opt.state_dict()))
    for g in grads[3:]:
        p.grad, q.grad = g.clone(), g.clone()
        opt.step()
        opt2.step()
    torch.testing.assert_close(q, p, rtol=0, atol=0)


@pytest.mark.parametrize(("kwargs", "name"), [
    ({"lr": 0.0}, "lr"), ({"target": "adam"}, "target"), ({"normalize": 1}, "normalize"),
])
def test_bad_config_raises_value_error_naming_the_field(kwargs, name):
    with pytest.raises(ValueError, match=name):
        LearnedPreconditioner(**kwargs)
