"""Momentum as an associative memory (Nested Learning, arXiv:2512.24695, Secs. 4.2-4.4): heavy-ball momentum equals
torch.optim.SGD, its decay is an l2 penalty on the memory, the EMA horizon numbers of Sec. 4.3, value-ful and
feature-map momentum (eqs. 47, 51), and both forms of Delta Momentum (eqs. 48-49) against autograd on their
regression objectives."""

import copy

import pytest
import torch

from regmem.optim.momentum import DeltaMomentum, ValueMomentum, as_matrix, ema_horizon

STEPS = 25


def _model():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(5, 7), torch.nn.Tanh(), torch.nn.Linear(7, 3)).double()


def _groups(model, lrs=(0.05, 0.02)):
    return [{"params": model[0].parameters(), "lr": lrs[0]}, {"params": model[2].parameters(), "lr": lrs[1]}]


def _loss(model, gen):
    x, y = torch.randn(8, 5, generator=gen, dtype=torch.float64), torch.randn(8, 3, generator=gen, dtype=torch.float64)
    return torch.nn.functional.mse_loss(model(x), y)


def _run(model, opt, steps, gen):
    for _ in range(steps):
        opt.zero_grad()
        _loss(model, gen).backward()
        opt.step()


def _assert_same_params(a, b):
    for pa, pb in zip(a.parameters(), b.parameters(), strict=True):
        assert torch.equal(pa, pb)


@pytest.mark.parametrize("dampening", [0.0, 0.3], ids=["damp0", "damp0.3"])
@pytest.mark.parametrize("weight_decay", [0.0, 0.01], ids=["wd0", "wd0.01"])
@pytest.mark.parametrize("make", [
    pytest.param(lambda groups, **kw: ValueMomentum(groups, **kw), id="value"),
    pytest.param(lambda groups, **kw: DeltaMomentum(groups, delta=0.0, form="elementwise", **kw), id="delta0-elem"),
    pytest.param(lambda groups, **kw: DeltaMomentum(groups, delta=0.0, form="matrix", **kw), id="delta0-matrix"),
])
def test_momentum_memory_trajectory_equals_torch_sgd(make, dampening, weight_decay):
    """Two groups with different lrs; torch's buffer is seeded with zeros when dampening != 0 (the memory starts
    empty, torch copies the first gradient undamped)."""
    ours, ref = _model(), _model()
    opt = make(_groups(ours), lr=1.0, momentum=0.9, dampening=dampening, weight_decay=weight_decay)
    sgd = torch.optim.SGD(_groups(ref), lr=1.0, momentum=0.9, dampening=dampening, weight_decay=weight_decay,
                          foreach=False)
    if dampening:
        for p in ref.parameters():
            sgd.state[p]["momentum_buffer"] = torch.zeros_like(p)
    _run(ours, opt, STEPS, torch.Generator().manual_seed(1))
    _run(ref, sgd, STEPS, torch.Generator().manual_seed(1))
    _assert_same_params(ours, ref)
    assert not torch.equal(ours[0].weight, _model()[0].weight)


def test_momentum_decay_is_one_gd_step_on_l2_regularised_dot_product():
    """Paper memory m = -lr b; one GD step of size eta = lr (1 - dampening) on <m, g> + c/2 ||m||^2 with
    c = (1 - alpha) / eta gives alpha m - eta g (Sec. 4.2, alpha != 1)."""
    lr, alpha, damp = 0.05, 0.8, 0.25
    model = _model()
    opt = ValueMomentum(model.parameters(), lr=lr, momentum=alpha, dampening=damp)
    gen = torch.Generator().manual_seed(2)
    eta = lr * (1 - damp)
    c = (1 - alpha) / eta
    for _ in range(6):
        opt.zero_grad()
        _loss(model, gen).backward()
        before = {p: -lr * opt.state[p]["momentum_buffer"].clone() if opt.state[p] else torch.zeros_like(p)
                  for p in model.parameters()}
        opt.step()
        for p, m0 in before.items():
            m = m0.clone().requires_grad_(True)
            inner = (m * p.grad).sum() + c / 2 * m.pow(2).sum()
            (dm,) = torch.autograd.grad(inner, m)
            torch.testing.assert_close(-lr * opt.state[p]["momentum_buffer"], m0 - eta * dm, rtol=1e-12, atol=1e-14)


def test_ema_horizon_is_6_and_43_at_beta_0_9():
    assert ema_horizon(0.9, 0.5) == 6
    assert ema_horizon(0.9, 0.99) == 43
    for beta in (0.5, 0.9, 0.99):
        for mass in (0.5, 0.9, 0.99):
            n = ema_horizon(beta, mass)
            assert 1 - beta ** (n + 1) >= mass > 1 - beta**n


def test_ema_horizon_matches_the_weights_an_ema_buffer_gives_past_gradients():
    """Feed one-hot gradients e_0..e_{T-1} into an EMA momentum (dampening 1 - beta, lr 0): entry t of the buffer is
    the weight of the gradient of age T-1-t; ages 0..6 hold >= 50 % of the total, ages 0..5 do not (same for 43)."""
    beta, T = 0.9, 200
    p = torch.zeros(T, dtype=torch.float64, requires_grad=True)
    opt = ValueMomentum([p], lr=0.0, momentum=beta, dampening=1 - beta)
    for t in range(T):
        p.grad = torch.nn.functional.one_hot(torch.tensor(t), T).double()
        opt.step()
    by_age = opt.state[p]["momentum_buffer"].flip(0)  # [T], index = age
    cumulative = by_age.cumsum(0) / by_age.sum()
    for mass, horizon in ((0.5, 6), (0.99, 43)):
        assert cumulative[horizon] >= mass > cumulative[horizon - 1]
        assert ema_horizon(beta, mass) == horizon


def test_value_momentum_with_diagonal_preconditioner_and_feature_map_equals_manual_loop():
    """Eq. 51 with P_t = D (fixed diagonal, eq. 47) and phi(g) = g + g^3: b = beta b + D phi(g), W -= lr b."""
    model, ref = _model(), _model()
    diag = {p: torch.rand_like(p) + 0.5 for p in model.parameters()}
    opt = ValueMomentum(model.parameters(), lr=0.03, momentum=0.9, feature_map=lambda g: g + g**3,
                        preconditioner=lambda p, v: diag[p] * v)
    ref_diag = [diag[p] for p in model.parameters()]
    bufs = [torch.zeros_like(p) for p in ref.parameters()]
    gen_a, gen_b = torch.Generator().manual_seed(3), torch.Generator().manual_seed(3)
    for _ in range(STEPS):
        opt.zero_grad()
        _loss(model, gen_a).backward()
        opt.step()
        ref.zero_grad()
        _loss(ref, gen_b).backward()
        with torch.no_grad():
            for p, b, d in zip(ref.parameters(), bufs, ref_diag, strict=True):
                b.mul_(0.9).add_(d * (p.grad + p.grad**3))
                p.sub_(0.03 * b)
    for pa, pb in zip(model.parameters(), ref.parameters(), strict=True):
        torch.testing.assert_close(pa, pb, rtol=1e-12, atol=1e-14)


def test_value_map_must_keep_the_shape():
    p = torch.zeros(3, 2, requires_grad=True)
    p.grad = torch.ones(3, 2)
    opt = ValueMomentum([p], preconditioner=lambda p, v: v.sum(0))
    with pytest.raises(ValueError, match="keep the parameter's shape"):
        opt.step()


def _delta_objective(b, g, form, normalize, alpha, delta, damp):
    """The regression objective of DeltaMomentum's docstring whose one GD step (size delta) is the update."""
    if form == "elementwise":
        s = g.abs().amax() if normalize else torch.tensor(1.0, dtype=g.dtype)
        k, c = g / s, (1 - damp) * s / delta
        fit = 0.5 * (b * k - c).pow(2).sum()
    else:
        s = torch.linalg.vector_norm(g) if normalize else torch.tensor(1.0, dtype=g.dtype)
        B, K = as_matrix(b), as_matrix(g / s)
        target = (1 - damp) * s / delta * torch.eye(B.shape[0], dtype=g.dtype)
        fit = 0.5 * (B @ K.T - target).pow(2).sum()
    return fit + (1 - alpha) / (2 * delta) * b.pow(2).sum()


@pytest.mark.parametrize("shape", [(6,), (4, 7), (7, 3), (2, 3, 4)], ids=["vec6", "mat4x7", "mat7x3", "t2x3x4"])
@pytest.mark.parametrize("normalize", [True, False], ids=["norm", "raw"])
@pytest.mark.parametrize("form", ["elementwise", "matrix"])
@pytest.mark.parametrize("damp", [0.0, 0.2], ids=["undamped", "damped"])
def test_delta_momentum_is_one_gd_step_on_its_regression_objective(form, normalize, shape, damp):
    """Two parameters of one shape, so the element-wise form's shared scratch tensor is reused within a step."""
    alpha, delta = 0.9, 0.4
    gen = torch.Generator().manual_seed(4)
    params = [torch.zeros(shape, dtype=torch.float64, requires_grad=True) for _ in range(2)]
    opt = DeltaMomentum(params, lr=0.1, momentum=alpha, dampening=damp, delta=delta, form=form, normalize=normalize)
    for _ in range(4):
        before = {}
        for p in params:
            p.grad = 0.5 * torch.randn(shape, generator=gen, dtype=torch.float64)
            before[p] = opt.state[p]["momentum_buffer"].clone() if opt.state[p] else torch.zeros_like(p)
        opt.step()
        for p in params:
            b = before[p].clone().requires_grad_(True)
            (db,) = torch.autograd.grad(_delta_objective(b, p.grad, form, normalize, alpha, delta, damp), b)
            torch.testing.assert_close(opt.state[p]["momentum_buffer"], before[p] - delta * db, rtol=1e-12,
                                       atol=1e-13)


def test_elementwise_delta_momentum_keeps_float32_and_float64_parameters_apart():
    """The scratch tensors are kept per dtype: a float32 and a float64 parameter of one shape, stepped together,
    each match a lone run."""
    gen = torch.Generator().manual_seed(5)
    grads = [torch.randn(3, 5, generator=gen, dtype=torch.float64) for _ in range(3)]
    both = [torch.zeros(3, 5, dtype=torch.float32, requires_grad=True),
            torch.zeros(3, 5, dtype=torch.float64, requires_grad=True)]
    alone = [torch.zeros(3, 5, dtype=torch.float32, requires_grad=True),
             torch.zeros(3, 5, dtype=torch.float64, requires_grad=True)]
    together = DeltaMomentum(both, lr=0.1, delta=0.5)
    apart = [DeltaMomentum([p], lr=0.1, delta=0.5) for p in alone]
    for g in grads:
        for p, q in zip(both, alone, strict=True):
            p.grad, q.grad = g.to(p.dtype), g.to(q.dtype)
        together.step()
        for opt in apart:
            opt.step()
    for p, q in zip(both, alone, strict=True):
        assert p.dtype == q.dtype and torch.equal(p, q)


def test_delta_momentum_matrix_form_is_eq_49_as_printed():
    """delta = 1, normalize=False, P = I: m_{i+1} = m_i (alpha I - G^T G) + G (b units), and for vectors
    alpha m - (m . g) g + g."""
    alpha = 0.9
    gen = torch.Generator().manual_seed(5)
    W, v = torch.zeros(4, 6, dtype=torch.float64), torch.zeros(5, dtype=torch.float64)
    opt = DeltaMomentum([W, v], lr=0.0, momentum=alpha, delta=1.0, form="matrix", normalize=False)
    mW, mv = torch.zeros_like(W), torch.zeros_like(v)
    for _ in range(5):
        W.grad = 0.3 * torch.randn(4, 6, generator=gen, dtype=torch.float64)
        v.grad = 0.3 * torch.randn(5, generator=gen, dtype=torch.float64)
        opt.step()
        mW = mW @ (alpha * torch.eye(6, dtype=torch.float64) - W.grad.T @ W.grad) + W.grad
        mv = alpha * mv - (mv @ v.grad) * v.grad + v.grad
    torch.testing.assert_close(opt.state[W]["momentum_buffer"], mW, rtol=1e-12, atol=1e-14)
    torch.testing.assert_close(opt.state[v]["momentum_buffer"], mv, rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize("form", ["elementwise", "matrix"])
def test_normalised_delta_momentum_decay_lies_in_momentum_minus_delta_to_momentum(form):
    """Bounded state: with a normalised key every decay factor is in [alpha - delta, alpha], whatever the gradient's
    scale, so ||decayed b|| <= max(alpha, |alpha - delta|) ||b||; with delta = alpha the newest direction is erased."""
    alpha, delta = 0.9, 0.9
    gen = torch.Generator().manual_seed(6)
    p = torch.zeros(5, 8, dtype=torch.float64, requires_grad=True)
    opt = DeltaMomentum([p], lr=0.0, momentum=alpha, delta=delta, form=form)
    for _ in range(10):
        p.grad = 1e3 * torch.randn(5, 8, generator=gen, dtype=torch.float64)
        b0 = opt.state[p]["momentum_buffer"].clone() if opt.state[p] else torch.zeros_like(p)
        opt.step()
        decayed = opt.state[p]["momentum_buffer"] - p.grad
        assert torch.linalg.vector_norm(decayed) <= alpha * torch.linalg.vector_norm(b0) * (1 + 1e-12)
    g = p.grad
    p.grad = g.clone()
    opt.param_groups[0]["dampening"] = 1.0  # decay only: no write
    b0 = opt.state[p]["momentum_buffer"].clone()
    opt.step()
    if form == "matrix":  # rank-one check along the key: (b0 (I - k^T k)) with k = g/||g||, scaled by alpha
        k = g / torch.linalg.vector_norm(g)
        expected = alpha * b0 - delta * (b0 @ k.T) @ k
        torch.testing.assert_close(opt.state[p]["momentum_buffer"], expected, rtol=1e-12, atol=1e-9)
    else:  # the largest-|g| entry decays by exactly alpha - delta = 0
        i = g.abs().argmax()
        assert opt.state[p]["momentum_buffer"].flatten()[i] == 0


@pytest.mark.parametrize("make", [
    pytest.param(lambda ps: ValueMomentum(ps, lr=0.05, momentum=0.9, dampening=0.1, weight_decay=0.01), id="value"),
    pytest.param(lambda ps: DeltaMomentum(ps, lr=0.05, delta=0.5, form="elementwise"), id="delta-elem"),
    pytest.param(lambda ps: DeltaMomentum(ps, lr=0.05, delta=0.5, form="matrix"), id="delta-matrix"),
])
def test_state_dict_round_trip_resumes_bit_exactly(make):
    full, resumed = _model(), _model()
    gen_full, gen_res = torch.Generator().manual_seed(7), torch.Generator().manual_seed(7)
    opt_full = make(full.parameters())
    _run(full, opt_full, 20, gen_full)
    opt_res = make(resumed.parameters())
    _run(resumed, opt_res, 10, gen_res)
    saved_model, saved_opt = copy.deepcopy(resumed.state_dict()), copy.deepcopy(opt_res.state_dict())
    fresh = _model()
    fresh.load_state_dict(saved_model)
    opt_fresh = make(fresh.parameters())
    opt_fresh.load_state_dict(saved_opt)
    _run(fresh, opt_fresh, 10, gen_res)
    _assert_same_params(fresh, full)


@pytest.mark.parametrize("make", [ValueMomentum, DeltaMomentum], ids=["value", "delta"])
def test_step_returns_closure_loss_and_rejects_sparse_and_complex(make):
    model = _model()
    opt = make(model.parameters(), lr=0.01)
    gen = torch.Generator().manual_seed(8)

    def closure():
        opt.zero_grad()
        loss = _loss(model, gen)
        loss.backward()
        return loss

    loss = opt.step(closure)
    assert isinstance(loss, torch.Tensor) and loss.ndim == 0
    emb = torch.nn.Embedding(4, 3, sparse=True)
    emb(torch.tensor([1, 2])).sum().backward()
    with pytest.raises(RuntimeError, match="sparse"):
        make(emb.parameters(), lr=0.01).step()
    z = torch.zeros(3, dtype=torch.complex64, requires_grad=True)
    z.grad = torch.ones_like(z)
    with pytest.raises(RuntimeError, match="complex"):
        make([z], lr=0.01).step()


@pytest.mark.parametrize("make,name", [
    (lambda ps: ValueMomentum(ps, lr=-1.0), "lr"),
    (lambda ps: ValueMomentum(ps, momentum=1.5), "momentum"),
    (lambda ps: ValueMomentum(ps, dampening=-0.1), "dampening"),
    (lambda ps: ValueMomentum(ps, weight_decay=-1.0), "weight_decay"),
    (lambda ps: ValueMomentum(ps, feature_map=3), "feature_map"),
    (lambda ps: ValueMomentum(ps, preconditioner="diag"), "preconditioner"),
    (lambda ps: DeltaMomentum(ps, delta=-0.5), "delta"),
    (lambda ps: DeltaMomentum(ps, form="outer"), "form"),
    (lambda ps: DeltaMomentum(ps, normalize=1), "normalize"),
    (lambda ps: DeltaMomentum(ps, momentum=float("nan")), "momentum"),
], ids=["lr", "momentum", "dampening", "weight_decay", "feature_map", "preconditioner", "delta", "form", "normalize",
        "momentum-nan"])
def test_bad_hyperparameters_raise_value_error_naming_them(make, name):
    with pytest.raises(ValueError, match=name):
        make([torch.zeros(2, requires_grad=True)])
