"""Generalised gradient descent (Nested Learning, arXiv:2512.24695, Sec. 4.5, Definition 5, eqs. 58-59; Sec. 4.2,
eqs. 35-37): each solver of `ggd_step` is what it claims on the objective written out here (the argmin: autograd
gradient zero; the gradient solver: one autograd step), and each named instance equals its closed form: GD is
W - lr G and torch.optim.SGD, heavy ball is the momentum recursion and torch.optim.SGD(momentum), DGD is
`regmem.ops.dgd_step` and `regmem.optim.DGD`; the torch.optim contract."""

import copy

import pytest
import torch

from regmem.ops import dgd_step
from regmem.optim import DGD, GeneralizedGD, delta_gradient_descent, ggd_step, gradient_descent, heavy_ball

F64 = torch.float64


def _problem(seed=0, N=3, K=6, V=4):
    """Row layout: W_t [K, V], inputs X [N, K], output gradients dY [N, V], G = X^T dY, C = X^T X."""
    gen = torch.Generator().manual_seed(seed)
    W, X, dY = (torch.randn(*s, generator=gen, dtype=F64) for s in ((K, V), (N, K), (N, V)))
    return W, X, dY, X.T @ dY, X.T @ X


def _inner_objective(objective, W, X, dY):
    """Definition 5's L~ with the self-generated values u_n = -dL/dy_n."""
    u = -dY
    if objective == "dot_product":
        return -(X @ W * u).sum()
    return 0.5 * (X @ W - u).pow(2).sum()


@pytest.mark.parametrize("objective", ["dot_product", "l2"])
@pytest.mark.parametrize("retention", [1.0, 0.8])
def test_exact_solver_is_the_argmin_of_objective_plus_retention(objective, retention):
    W0, X, dY, G, C = _problem()
    lr = 0.4
    W = ggd_step(W0, G, C, lr, objective=objective, retention=retention, solver="exact").requires_grad_()
    total = _inner_objective(objective, W, X, dY) + (W - retention * W0).pow(2).sum() / (2 * lr)
    (grad,) = torch.autograd.grad(total, W)
    assert grad.abs().max() < 1e-12


@pytest.mark.parametrize("objective", ["dot_product", "l2"])
def test_gradient_solver_is_one_gradient_step_from_the_retention_centre(objective):
    W0, X, dY, G, C = _problem(seed=1)
    lr, alpha = 0.3, 0.9
    centre = (alpha * W0).requires_grad_()
    (grad,) = torch.autograd.grad(_inner_objective(objective, centre, X, dY), centre)
    expected = alpha * W0 - lr * grad
    actual = ggd_step(W0, G, C, lr, objective=objective, retention=alpha, solver="gradient")
    torch.testing.assert_close(actual, expected, rtol=1e-12, atol=1e-12)


def _model(seed=0):
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(5, 7), torch.nn.Tanh(), torch.nn.Linear(7, 3)).double()


def _train(model, opt, steps=5, seed=0):
    gen = torch.Generator().manual_seed(seed)
    for _ in range(steps):
        x = torch.randn(8, 5, generator=gen, dtype=F64)
        y = torch.randn(8, 3, generator=gen, dtype=F64)
        opt.zero_grad()
        torch.nn.functional.mse_loss(model(x), y).backward()
        opt.step()
    return [p.detach().clone() for p in model.parameters()]


def test_gradient_descent_instance_is_w_minus_lr_g_and_sgd():
    model = _model()
    p0 = [p.detach().clone() for p in model.parameters()]
    opt = gradient_descent(model.parameters(), lr=0.1)
    x, y = torch.randn(8, 5, dtype=F64), torch.randn(8, 3, dtype=F64)
    torch.nn.functional.mse_loss(model(x), y).backward()
    grads = [p.grad.clone() for p in model.parameters()]
    opt.step()
    for p, w, g in zip(model.parameters(), p0, grads, strict=True):
        torch.testing.assert_close(p.detach(), w - 0.1 * g, rtol=0, atol=0)
    ours, ref = _model(), _model()
    torch.testing.assert_close(_train(ours, gradient_descent(ours.parameters(), lr=0.1)),
                               _train(ref, torch.optim.SGD(ref.parameters(), lr=0.1)), rtol=1e-14, atol=1e-14)


def test_heavy_ball_instance_is_the_momentum_recursion_and_sgd_with_momentum():
    """m_{t+1} = alpha m_t - lr G_t, W_{t+1} = W_t + m_{t+1}, written out for a fixed gradient sequence."""
    p = torch.nn.Parameter(torch.randn(4, 3, dtype=F64))
    grads = [torch.randn(4, 3, dtype=F64) for _ in range(4)]
    opt = heavy_ball([p], lr=0.2, momentum=0.7)
    W, m = p.detach().clone(), torch.zeros(4, 3, dtype=F64)
    for g in grads:
        p.grad = g.clone()
        opt.step()
        m = 0.7 * m - 0.2 * g
        W = W + m
        torch.testing.assert_close(p.detach(), W, rtol=1e-14, atol=1e-14)
    ours, ref = _model(), _model()
    torch.testing.assert_close(_train(ours, heavy_ball(ours.parameters(), lr=0.05, momentum=0.9)),
                               _train(ref, torch.optim.SGD(ref.parameters(), lr=0.05, momentum=0.9)),
                               rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("reduction", ["mean", "sum"])
def test_delta_gradient_descent_instance_is_dgd_step_and_the_dgd_optimiser(reduction):
    model = _model()
    opt = delta_gradient_descent(model.parameters(), lr=0.3, reduction=reduction)
    opt.track_inputs(model[0])
    x, y = torch.randn(8, 5, dtype=F64), torch.randn(8, 3, dtype=F64)
    w0 = model[0].weight.detach().clone()
    torch.nn.functional.mse_loss(model(x), y).backward()
    moment = x.T @ x / (8 if reduction == "mean" else 1)
    expected = dgd_step(w0.T, model[0].weight.grad.T, moment, 0.3).T
    opt.step()
    torch.testing.assert_close(model[0].weight.detach(), expected, rtol=1e-14, atol=1e-14)
    ours, ref = _model(), _model()
    ours_opt = delta_gradient_descent(ours.parameters(), lr=0.3, reduction=reduction)
    ref_opt = DGD(ref.parameters(), lr=0.3, reduction=reduction)
    for layer in (0, 2):
        ours_opt.track_inputs(ours[layer])
        ref_opt.track_inputs(ref[layer])
    torch.testing.assert_close(_train(ours, ours_opt), _train(ref, ref_opt), rtol=1e-13, atol=1e-13)


def test_l2_momentum_memory_regresses_on_the_inputs():
    """Generalised momentum with the l2 objective: m_{t+1} = (I + lr C)^{-1}(alpha m_t - lr G) in row layout,
    W_{t+1} = W_t + m_{t+1}; it differs from heavy ball exactly by the inputs' moment."""
    model = torch.nn.Linear(5, 3, bias=False).double()
    opt = GeneralizedGD(model.parameters(), lr=0.2, objective="l2", retention=0.5, memory="momentum",
                        reduction="sum")
    opt.track_inputs(model)
    W, m = model.weight.detach().T.clone(), torch.zeros(5, 3, dtype=F64)
    gen = torch.Generator().manual_seed(3)
    for _ in range(3):
        x, y = torch.randn(4, 5, generator=gen, dtype=F64), torch.randn(4, 3, generator=gen, dtype=F64)
        opt.zero_grad()
        torch.nn.functional.mse_loss(model(x), y).backward()
        G = model.weight.grad.T
        opt.step()
        m = torch.linalg.solve(torch.eye(5, dtype=F64) + 0.2 * x.T @ x, 0.5 * m - 0.2 * G)
        W = W + m
        torch.testing.assert_close(model.weight.detach().T, W, rtol=1e-13, atol=1e-13)


def test_state_dict_round_trip_resumes_bit_exactly():
    model = _model()
    opt = heavy_ball(model.parameters(), lr=0.05, momentum=0.9)
    _train(model, opt, steps=3)
    clone = copy.deepcopy(model)
    opt2 = heavy_ball(clone.parameters(), lr=0.05, momentum=0.9)
    opt2.load_state_dict(copy.deepcopy(opt.state_dict()))
    assert opt2.param_groups[0]["memory"] == "momentum"
    torch.testing.assert_close(_train(clone, opt2, seed=5), _train(model, opt, seed=5), rtol=0, atol=0)


def test_step_returns_the_closure_loss():
    p = torch.nn.Parameter(torch.ones(3, dtype=F64))
    opt = gradient_descent([p], lr=0.1)

    def closure():
        opt.zero_grad()
        loss = p.pow(2).sum()
        loss.backward()
        return loss

    assert opt.step(closure).item() == 3.0


@pytest.mark.parametrize(("kwargs", "name"), [
    ({"lr": 0.0}, "lr"), ({"retention": 1.5}, "retention"), ({"objective": "l1"}, "objective"),
    ({"solver": "newton"}, "solver"), ({"memory": "adam"}, "memory"), ({"reduction": "avg"}, "reduction"),
])
def test_bad_hyperparameters_raise_value_error_naming_them(kwargs, name):
    with pytest.raises(ValueError, match=name):
        GeneralizedGD([torch.nn.Parameter(torch.ones(2))], **{"lr": 0.1, **kwargs})
