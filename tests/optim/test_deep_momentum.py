"""DeepMomentum (DMGD), Nested Learning (arXiv:2512.24695) Sec. 4.4 eq. (50): reductions to heavy ball, a learning
memory that trains, and the torch.optim contract."""

import copy

import pytest
import torch

from regmem.optim import DeepMomentum, momentum_memory

DT = torch.float64


def _problem(seed: int = 0):
    """A toy linear regression: X [32, 5] -> y [32, 2] with a [2, 5] weight and a [2] bias."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(32, 5, generator=g, dtype=DT)
    y = x @ torch.randn(5, 2, generator=g, dtype=DT) + 0.1 * torch.randn(32, 2, generator=g, dtype=DT)
    model = torch.nn.Linear(5, 2, dtype=DT)
    with torch.no_grad():
        model.weight.copy_(torch.randn(2, 5, generator=g, dtype=DT))
        model.bias.zero_()
    return model, x, y


def _loss(model, x, y):
    return ((model(x) - y) ** 2).mean()


def _run(model, opt, x, y, steps):
    losses = []
    for _ in range(steps):
        opt.zero_grad()
        loss = _loss(model, x, y)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses


def _params(model):
    return [p.detach().clone() for p in model.parameters()]


@pytest.mark.parametrize("objective, hb_momentum", [("dot", 0.9), ("l2", 0.9 - 0.05)], ids=["dot", "l2"])
def test_constant_output_memory_is_heavy_ball(objective, hb_momentum):
    """depth 0 + dot == SGD(momentum=alpha); depth 0 + l2 == SGD(momentum=alpha - lr) (module docstring)."""
    model, x, y = _problem()
    reference = copy.deepcopy(model)
    opt = DeepMomentum(model.parameters(), lr=0.05, momentum=0.9, objective=objective, memory_depth=0)
    ref = torch.optim.SGD(reference.parameters(), lr=0.05, momentum=hb_momentum)
    _run(model, opt, x, y, 15)
    _run(reference, ref, x, y, 15)
    for a, b in zip(model.parameters(), reference.parameters(), strict=True):
        torch.testing.assert_close(a, b, atol=1e-12, rtol=1e-12)


def test_the_printed_objective_with_a_constant_memory_ignores_the_gradient():
    """Sec. 4.4's example <m(u^T), 1>: dL2/dm = 1, so with depth 0 every step moves each weight by the same
    -lr * sum_k alpha^k whatever the gradient; "dot" (<m(u), u>) steps along the gradient."""
    moves = {}
    for objective in ("printed", "dot"):
        for scale in (1.0, 10.0):
            weight = torch.nn.Parameter(torch.zeros(3, 2, dtype=torch.float64))
            opt = DeepMomentum([weight], lr=0.1, momentum=0.5, objective=objective, memory_depth=0)
            for _ in range(2):
                weight.grad = scale * torch.arange(6, dtype=torch.float64).reshape(3, 2)
                opt.step()
            moves[objective, scale] = weight.detach().clone()
    expected = torch.full((3, 2), -0.1 * (1 + (1 + 0.5)), dtype=torch.float64)  # b_1 = -lr, b_2 = -lr (1 + alpha)
    torch.testing.assert_close(moves["printed", 1.0], expected, rtol=0, atol=1e-15)
    torch.testing.assert_close(moves["printed", 10.0], expected, rtol=0, atol=1e-15)
    assert not torch.allclose(moves["dot", 1.0], moves["dot", 10.0])


def test_constant_output_memory_state_is_momentum_memory():
    model, x, y = _problem()
    opt = DeepMomentum(model.parameters(), lr=0.05, momentum=0.8, objective="dot", memory_depth=0)
    buf = torch.zeros_like(model.weight)
    for _ in range(5):
        opt.zero_grad()
        _loss(model, x, y).backward()
        buf = momentum_memory(buf, model.weight.grad, 0.05, 0.8)
        opt.step()
    torch.testing.assert_close(opt.state[model.weight]["memory_bias"], buf, atol=1e-14, rtol=0)


def test_frozen_deep_memory_is_heavy_ball_and_learning_one_departs():
    """h's output layer starts at zero: with memory_lr = 0 it stays zero (DMGD == heavy ball at any depth); with
    memory_lr > 0 the very first read already includes the learned h, so the trajectory departs."""
    kwargs = dict(lr=0.05, momentum=0.9, objective="dot", memory_depth=2, memory_width=4)
    for memory_lr, same in [(0.0, True), (0.05, False)]:
        model, x, y = _problem()
        reference = copy.deepcopy(model)
        _run(model, DeepMomentum(model.parameters(), memory_lr=memory_lr, **kwargs), x, y, 5)
        _run(reference, torch.optim.SGD(reference.parameters(), lr=0.05, momentum=0.9), x, y, 5)
        gap = (model.weight - reference.weight).abs().max()
        assert (gap < 1e-14) if same else (gap > 1e-6)


@pytest.mark.parametrize("objective", ["dot", "l2"])
def test_learning_memory_changes_and_trains_toy_regression(objective):
    model, x, y = _problem(1)
    opt = DeepMomentum(model.parameters(), lr=0.05, momentum=0.9, objective=objective, memory_depth=1,
                       memory_width=8, memory_lr=0.05)
    _run(model, opt, x, y, 1)
    out_layer = opt.state[model.weight]["mlp_2"]
    hidden = opt.state[model.weight]["mlp_0"].clone()
    assert out_layer.abs().max() > 0  # started at zero
    losses = _run(model, opt, x, y, 60)
    assert (opt.state[model.weight]["mlp_0"] - hidden).abs().max() > 0
    assert losses[-1] < 0.01 * losses[0]


def _train(model, opt, x, y, steps):
    for _ in range(steps):
        opt.zero_grad()
        _loss(model, x, y).backward()
        opt.step()


@pytest.mark.parametrize("depth", [0, 2])
def test_state_dict_round_trip_is_bit_exact(depth):
    kwargs = dict(lr=0.05, momentum=0.9, objective="l2", memory_depth=depth, memory_width=4, memory_lr=0.3)
    model, x, y = _problem(2)
    opt = DeepMomentum(model.parameters(), **kwargs)
    _train(model, opt, x, y, 4)
    resumed = copy.deepcopy(model)
    opt2 = DeepMomentum(resumed.parameters(), **{**kwargs, "seed": 123})  # seed is restored from the checkpoint
    opt2.load_state_dict(copy.deepcopy(opt.state_dict()))
    _train(model, opt, x, y, 5)
    _train(resumed, opt2, x, y, 5)
    for a, b in zip(model.parameters(), resumed.parameters(), strict=True):
        assert torch.equal(a, b)


def test_step_with_closure_returns_loss():
    model, x, y = _problem()
    opt = DeepMomentum(model.parameters())

    returned = []

    def closure():
        opt.zero_grad()
        loss = _loss(model, x, y)
        loss.backward()  # runs under enable_grad although step is no_grad
        returned.append(loss)
        return loss

    before = _params(model)
    loss = opt.step(closure)
    assert loss is returned[0] and loss.requires_grad
    assert any(not torch.equal(a, b) for a, b in zip(before, model.parameters(), strict=True))
    assert opt.step() is None


def test_params_without_grad_are_skipped():
    a = torch.zeros(3, dtype=DT, requires_grad=True)
    b = torch.ones(3, dtype=DT, requires_grad=True)
    opt = DeepMomentum([a, b])
    a.grad = torch.ones(3, dtype=DT)
    opt.step()
    assert torch.equal(b, torch.ones(3, dtype=DT)) and b not in opt.state
    assert not torch.equal(a, torch.zeros(3, dtype=DT))


def test_sparse_gradients_rejected():
    p = torch.zeros(4, 2, requires_grad=True)
    p.grad = torch.zeros(4, 2).to_sparse()
    with pytest.raises(RuntimeError, match="sparse"):
        DeepMomentum([p]).step()


def test_complex_parameters_rejected():
    p = torch.zeros(3, dtype=torch.complex64, requires_grad=True)
    p.grad = torch.ones(3, dtype=torch.complex64)
    with pytest.raises(RuntimeError, match="complex"):
        DeepMomentum([p]).step()


@pytest.mark.parametrize(
    "kwargs, name",
    [
        (dict(lr=-1.0), "lr"),
        (dict(lr=float("nan")), "lr"),
        (dict(momentum=1.5), "momentum"),
        (dict(momentum=-0.1), "momentum"),
        (dict(objective="cosine"), "objective"),
        (dict(memory_depth=-1), "memory_depth"),
        (dict(memory_depth=1.5), "memory_depth"),
        (dict(memory_width=0), "memory_width"),
        (dict(memory_lr=-0.1), "memory_lr"),
        (dict(seed="a"), "seed"),
    ],
    ids=lambda v: v if isinstance(v, str) else None,
)
def test_bad_hyperparameters_raise_value_error_naming_them(kwargs, name):
    with pytest.raises(ValueError, match=name):
        DeepMomentum([torch.zeros(2, requires_grad=True)], **kwargs)
