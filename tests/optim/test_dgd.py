"""Delta Gradient Descent (Nested Learning, arXiv:2512.24695, Sec. 4.5 eqs. 56-57): the Sherman-Morrison closed
form and the optimiser's batch step equal the exact minimiser of the regularised least-squares objective; without
the delta term DGD is SGD; the torch.optim contract (state_dict, closure, errors, param groups)."""

import copy

import pytest
import torch

from regmem.ops import dgd_step
from regmem.optim.dgd import DGD, dgd_minimiser

F64 = torch.float64


def _rand(*shape, gen):
    return torch.randn(*shape, generator=gen, dtype=F64)


def _dgd_one(weight, x, grad_output, lr):
    """DGD's step for one input on a weight [V, K] in torch.nn.Linear's layout: `dgd_step` on its transpose, with
    the one-sample statistics G = x (dL/dy)^T and C = x x^T."""
    return dgd_step(weight.T, torch.outer(x, grad_output), torch.outer(x, x), lr).T


@pytest.mark.parametrize("reduction", ["mean", "sum"])
def test_dgd_minimiser_is_stationary_point_of_the_objective(reduction):
    """Autograd on 1/(2 r) sum ||W x_n||^2 + sum <W x_n, dy_n> + 1/(2 lr) ||W - W_t||^2 vanishes there; with r = 1
    ("sum") this is 1/2 sum ||W x_n + dy_n||^2 up to a constant (eq. 56 with u = -dy), with r = N ("mean") its
    quadratic term is the mean over the rows."""
    gen = torch.Generator().manual_seed(0)
    W0, X, dY, lr = _rand(4, 6, gen=gen), _rand(3, 6, gen=gen), _rand(3, 4, gen=gen), 0.7
    W = dgd_minimiser(W0, X, dY, lr, reduction=reduction).requires_grad_(True)
    rows = 3 if reduction == "mean" else 1
    objective = (0.5 * (X @ W.T).pow(2).sum() / rows + (X @ W.T * dY).sum()
                 + (W - W0).pow(2).sum() / (2 * lr))
    (grad,) = torch.autograd.grad(objective, W)
    assert grad.abs().max() < 1e-12


@pytest.mark.parametrize("norm", [1.0, 2.5], ids=["unit-x", "norm2.5"])
def test_sherman_morrison_closed_form_equals_exact_minimiser(norm):
    gen = torch.Generator().manual_seed(1)
    W0, x, dy, lr = _rand(4, 6, gen=gen), _rand(6, gen=gen), _rand(4, gen=gen), 0.3
    x = norm * x / x.norm()
    exact = dgd_minimiser(W0, x[None], dy[None], lr)
    torch.testing.assert_close(_dgd_one(W0, x, dy, lr), exact, rtol=1e-12, atol=1e-12)
    if norm == 1.0:  # the paper's eta' = eta / (1 + eta), literally (eq. 57)
        eta_p = lr / (1 + lr)
        paper = W0 @ (torch.eye(6, dtype=F64) - eta_p * torch.outer(x, x)) - eta_p * torch.outer(dy, x)
        torch.testing.assert_close(paper, exact, rtol=1e-12, atol=1e-12)


def test_dgd_is_the_implicit_delta_rule_step_to_first_order_in_lr():
    """DGD (a proximal, i.e. implicit, step) and the explicit delta-rule GD step W - lr (W x + dy) x^T on the same
    objective differ by O(lr^2); DGD and plain GD W - lr dy x^T already differ at O(lr) by the decay -lr W x x^T."""
    gen = torch.Generator().manual_seed(2)
    W0, x, dy = _rand(4, 6, gen=gen), _rand(6, gen=gen), _rand(4, gen=gen)
    delta_gd = [(_dgd_one(W0, x, dy, lr) - (W0 - lr * torch.outer(W0 @ x + dy, x))).norm() for lr in (1e-3, 1e-4)]
    assert 90 < delta_gd[0] / delta_gd[1] < 110  # O(lr^2)
    plain_gd = [(_dgd_one(W0, x, dy, lr) - (W0 - lr * torch.outer(dy, x))).norm() for lr in (1e-3, 1e-4)]
    assert 9 < plain_gd[0] / plain_gd[1] < 11  # O(lr)


def _linear(seed=0):
    torch.manual_seed(seed)
    return torch.nn.Linear(6, 4).double()


@pytest.mark.parametrize("reduction", ["mean", "sum"])
@pytest.mark.parametrize("shape", [(8, 6), (2, 5, 6), (1, 6)], ids=["N8", "B2-T5", "N1"])
@pytest.mark.parametrize("delta", [1.0, 0.3], ids=["delta1", "delta0.3"])
def test_dgd_step_equals_exact_minimiser(shape, delta, reduction):
    """The weight goes to argmin of the batch objective; the untracked bias takes a plain SGD step."""
    gen = torch.Generator().manual_seed(3)
    layer, lr = _linear(), 0.2
    opt = DGD(layer.parameters(), lr=lr, delta=delta, reduction=reduction)
    opt.track_inputs(layer)
    W0, b0 = layer.weight.detach().clone(), layer.bias.detach().clone()
    X, target = _rand(*shape, gen=gen), _rand(*shape[:-1], 4, gen=gen)
    opt.zero_grad()
    y = layer(X)
    y.retain_grad()
    torch.nn.functional.mse_loss(y, target).backward()
    opt.step()
    dY = y.grad.reshape(-1, 4)
    expected = dgd_minimiser(W0, X.reshape(-1, 6), dY, lr, delta, reduction)
    torch.testing.assert_close(layer.weight.detach(), expected, rtol=1e-12, atol=1e-13)
    torch.testing.assert_close(layer.bias.detach(), b0 - lr * dY.sum(0), rtol=1e-12, atol=1e-14)
    if shape[0] == 1 and delta == 1.0:
        torch.testing.assert_close(layer.weight.detach(), _dgd_one(W0, X[0], dY[0], lr), rtol=1e-12, atol=1e-13)


def _one_step_shrink(rows, reduction, lr=0.01, width=16):
    """||W_1|| / ||W_0|| after one DGD step with a zero gradient (only the decay acts), on `rows` unit Gaussian
    inputs of the given width."""
    torch.manual_seed(0)
    layer = torch.nn.Linear(width, width, bias=False).double()
    opt = DGD(layer.parameters(), lr=lr, reduction=reduction)
    opt.track_inputs(layer)
    x = _rand(rows, width, gen=torch.Generator().manual_seed(rows))
    before = layer.weight.detach().norm()
    (0.0 * layer(x).mean()).backward()
    opt.step()
    return float(layer.weight.detach().norm() / before)


def test_mean_reduction_one_steps_shrink_does_not_depend_on_the_number_of_rows():
    """The batch decay as a mean over rows is balanced with a mean loss's gradient: one step (lr 0.01) shrinks
    ||W|| by about the same factor with 16 and 1024 rows; the sum's decay grows with the rows instead."""
    mean16, mean1024 = _one_step_shrink(16, "mean"), _one_step_shrink(1024, "mean")
    assert abs(mean16 - mean1024) < 0.01
    assert 0.98 < mean1024 < 1.0
    sum16, sum1024 = _one_step_shrink(16, "sum"), _one_step_shrink(1024, "sum")
    assert sum1024 < 0.2 < 0.8 < sum16


def test_mean_reduction_step_is_unchanged_by_repeating_the_batch():
    """With a mean loss, a batch repeated 64 times (1024 rows instead of 16) gives the same gradient and, under
    reduction "mean", the same input moment, hence the same step; under "sum" the decay is 64 times stronger."""
    gen = torch.Generator().manual_seed(11)
    x, y = _rand(16, 6, gen=gen), _rand(16, 4, gen=gen)
    weights = {}
    for reduction in ("mean", "sum"):
        for repeat in (1, 64):
            layer = _linear()
            opt = DGD(layer.parameters(), lr=0.05, reduction=reduction)
            opt.track_inputs(layer)
            torch.nn.functional.mse_loss(layer(x.repeat(repeat, 1)), y.repeat(repeat, 1)).backward()
            opt.step()
            weights[reduction, repeat] = layer.weight.detach()
    torch.testing.assert_close(weights["mean", 1], weights["mean", 64], rtol=1e-12, atol=1e-12)
    assert (weights["sum", 1] - weights["sum", 64]).abs().max() > 1e-2


def test_gradient_accumulation_averages_the_moment_over_all_rows():
    """Two forward passes before one step: the mean is over all their rows (the weighted mean of the passes)."""
    gen = torch.Generator().manual_seed(12)
    layer = _linear()
    opt = DGD(layer.parameters(), lr=0.1)
    opt.track_inputs(layer)
    a, b = _rand(3, 6, gen=gen), _rand(5, 6, gen=gen)
    layer(a)
    layer(b)
    expected = (a.T @ a + b.T @ b) / 8
    torch.testing.assert_close(opt.input_moment(layer.weight, "mean"), expected, rtol=1e-14, atol=1e-14)
    torch.testing.assert_close(opt.input_moment(layer.weight, "sum"), expected * 8, rtol=1e-14, atol=1e-14)


def test_state_dict_without_reduction_loads_as_the_sum_it_was_saved_with():
    layer = _linear()
    saved = DGD(layer.parameters(), lr=0.1).state_dict()
    for group in saved["param_groups"]:
        del group["reduction"]  # a checkpoint from before the option
    opt = DGD(layer.parameters(), lr=0.1)
    opt.load_state_dict(saved)
    assert [g["reduction"] for g in opt.param_groups] == ["sum"]


def _model(seed=0):
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(5, 7), torch.nn.Tanh(), torch.nn.Linear(7, 3)).double()


def _run(model, opt, steps, gen):
    for _ in range(steps):
        opt.zero_grad()
        x, y = _rand(8, 5, gen=gen), _rand(8, 3, gen=gen)
        torch.nn.functional.mse_loss(model(x), y).backward()
        opt.step()


def _groups(model):
    return [{"params": model[0].parameters(), "lr": 0.1}, {"params": model[2].parameters(), "lr": 0.03}]


def _assert_same_params(a, b):
    for pa, pb in zip(a.parameters(), b.parameters(), strict=True):
        assert torch.equal(pa, pb)


def test_dgd_without_delta_term_is_sgd():
    """delta = 0 (tracked) and untracked layers both follow torch.optim.SGD bit for bit, with per-group lrs."""
    ours, untracked, ref = _model(), _model(), _model()
    opt = DGD(_groups(ours), lr=1.0, delta=0.0)
    opt.track_inputs(ours[0])
    opt.track_inputs(ours[2])
    for model, o in ((ours, opt), (untracked, DGD(_groups(untracked), lr=1.0)),
                     (ref, torch.optim.SGD(_groups(ref), lr=1.0, foreach=False))):
        _run(model, o, 20, torch.Generator().manual_seed(4))
    _assert_same_params(ours, ref)
    _assert_same_params(untracked, ref)


def test_dgd_with_delta_term_differs_from_sgd_and_reduces_loss():
    gen = torch.Generator().manual_seed(5)
    model, ref = _model(), _model()
    opt = DGD(model.parameters(), lr=0.1)
    for layer in (model[0], model[2]):
        opt.track_inputs(layer)
    x, y = _rand(32, 5, gen=gen), _rand(32, 3, gen=gen)
    start = torch.nn.functional.mse_loss(model(x), y).item()
    for _ in range(30):
        opt.zero_grad()
        torch.nn.functional.mse_loss(model(x), y).backward()
        opt.step()
    assert torch.nn.functional.mse_loss(model(x), y).item() < 0.9 * start
    assert not torch.allclose(model[0].weight, ref[0].weight)


def test_zero_grad_discards_inputs_of_earlier_forward_passes():
    gen = torch.Generator().manual_seed(6)
    a, b = _linear(), _linear()
    opts = [DGD(m.parameters(), lr=0.5) for m in (a, b)]
    for m, o in zip((a, b), opts, strict=True):
        o.track_inputs(m)
    x, stray = _rand(4, 6, gen=gen), _rand(9, 6, gen=gen)
    a(stray)  # an evaluation pass before the training step
    for m, o in zip((a, b), opts, strict=True):
        o.zero_grad()
        m(x).pow(2).sum().backward()
        o.step()
    assert torch.equal(a.weight, b.weight)


def test_state_dict_round_trip_resumes_bit_exactly():
    def make(model):
        opt = DGD(_groups(model), lr=0.05, delta=0.7)
        opt.track_inputs(model[0])
        opt.track_inputs(model[2])
        return opt

    full, resumed = _model(), _model()
    gen_full, gen_res = torch.Generator().manual_seed(7), torch.Generator().manual_seed(7)
    _run(full, make(full), 20, gen_full)
    opt = make(resumed)
    _run(resumed, opt, 10, gen_res)
    saved_model, saved_opt = copy.deepcopy(resumed.state_dict()), copy.deepcopy(opt.state_dict())
    fresh = _model(seed=1)
    fresh.load_state_dict(saved_model)
    # wrong lrs and delta on purpose: the groups' hyperparameters come from the state_dict
    wrong_groups = [{"params": fresh[0].parameters(), "lr": 0.9}, {"params": fresh[2].parameters()}]
    opt_fresh = DGD(wrong_groups, lr=0.9, delta=0.1)
    opt_fresh.load_state_dict(saved_opt)
    opt_fresh.track_inputs(fresh[0])
    opt_fresh.track_inputs(fresh[2])
    _run(fresh, opt_fresh, 10, gen_res)
    _assert_same_params(fresh, full)


def test_step_returns_closure_loss_and_rejects_sparse_and_complex():
    layer = _linear()
    opt = DGD(layer.parameters(), lr=0.1)
    opt.track_inputs(layer)
    x = _rand(3, 6, gen=torch.Generator().manual_seed(8))

    def closure():
        opt.zero_grad()
        loss = layer(x).pow(2).mean()
        loss.backward()
        return loss

    assert isinstance(opt.step(closure), torch.Tensor)
    emb = torch.nn.Embedding(4, 3, sparse=True)
    emb(torch.tensor([1, 2])).sum().backward()
    with pytest.raises(RuntimeError, match="sparse"):
        DGD(emb.parameters(), lr=0.1).step()
    z = torch.zeros(3, dtype=torch.complex64, requires_grad=True)
    z.grad = torch.ones_like(z)
    with pytest.raises(RuntimeError, match="complex"):
        DGD([z], lr=0.1).step()


@pytest.mark.parametrize("kwargs,name", [
    ({"lr": 0.0}, "lr"), ({"lr": -1.0}, "lr"), ({"delta": -0.1}, "delta"), ({"delta": float("nan")}, "delta"),
    ({"reduction": "avg"}, "reduction"),
], ids=["lr0", "lr-neg", "delta-neg", "delta-nan", "reduction"])
def test_bad_hyperparameters_raise_value_error_naming_them(kwargs, name):
    with pytest.raises(ValueError, match=name):
        DGD([torch.zeros(2, requires_grad=True)], **kwargs)


def test_track_inputs_rejects_foreign_or_weightless_layers():
    opt = DGD(_linear().parameters(), lr=0.1)
    with pytest.raises(ValueError, match="not among"):
        opt.track_inputs(_linear(seed=1))
    with pytest.raises(ValueError, match="2-D weight"):
        opt.track_inputs(torch.nn.Tanh())
