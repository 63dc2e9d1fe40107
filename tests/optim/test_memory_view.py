"""Executable equivalences "optimisers are associative memories": Nested Learning (arXiv:2512.24695) eqs. (1)–(3),
(12)–(13), (29)–(34) and App. B (101)–(111), checked against autograd and torch.optim in float64."""

import torch

from regmem.optim import (
    adagrad_momentum_memory,
    adam_as_optimal_memory,
    elementwise_optimal_memory,
    ema_moments,
    ftrl_memory,
    mlp2_memory_writes,
    momentum_memory,
    outer_product_optimal_memory,
    proximal_dot_product_memory,
)

DT = torch.float64
ATOL = 1e-12


def _gen(seed: int = 0) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def test_gd_is_proximal_dot_product_memory_and_autograd_sgd_step():
    g = _gen(1)
    w_t = torch.randn(4, 3, generator=g, dtype=DT)
    x = torch.randn(5, 3, generator=g, dtype=DT)
    u = torch.randn(5, 4, generator=g, dtype=DT)
    lr = 0.3
    closed = proximal_dot_product_memory(w_t, x, u, lr)
    # The closed form is the stationary point of the (strictly convex) proximal objective.
    w = closed.clone().requires_grad_(True)
    objective = ((x @ w.T) * u).sum() + ((w - w_t) ** 2).sum() / (2 * lr)
    (grad,) = torch.autograd.grad(objective, w)
    assert grad.abs().max() < ATOL
    # One torch.optim.SGD step on a linear layer whose output gradient is u.
    layer = torch.nn.Linear(3, 4, bias=False, dtype=DT)
    with torch.no_grad():
        layer.weight.copy_(w_t)
    opt = torch.optim.SGD(layer.parameters(), lr=lr)
    (layer(x) * u).sum().backward()  # dL/dy = u
    opt.step()
    torch.testing.assert_close(layer.weight.detach(), closed, atol=ATOL, rtol=0)


def test_ftrl_equals_iterated_gd_with_linear_losses():
    g = _gen(2)
    w1 = torch.randn(3, 2, generator=g, dtype=DT)
    grads = torch.randn(7, 3, 2, generator=g, dtype=DT)  # linear losses <g_s, W>: gradient g_s at any W
    lr = 0.05
    w = w1.clone()
    for t in range(grads.shape[0]):
        w = w - lr * grads[t]
        torch.testing.assert_close(ftrl_memory(w1, grads[: t + 1], lr), w, atol=ATOL, rtol=0)


def test_momentum_memory_is_l2_regularised_gd_step_and_sgd_momentum_trajectory():
    g = _gen(3)
    lr, alpha = 0.1, 0.8
    m_t = torch.randn(6, generator=g, dtype=DT)
    grad = torch.randn(6, generator=g, dtype=DT)
    # One GD step of size lr on <m, g> + (c/2)||m||^2 with c = (1 - alpha)/lr (eq. 33, alpha != 1).
    m = m_t.clone().requires_grad_(True)
    c = (1 - alpha) / lr
    (d,) = torch.autograd.grad((m * grad).sum() + c / 2 * (m**2).sum(), m)
    torch.testing.assert_close(momentum_memory(m_t, grad, lr, alpha), m_t - lr * d, atol=ATOL, rtol=0)
    # Trajectory W <- W + m equals torch.optim.SGD(momentum=alpha, dampening=0) on a quadratic.
    target = torch.randn(6, generator=g, dtype=DT)
    p = torch.zeros(6, dtype=DT, requires_grad=True)
    opt = torch.optim.SGD([p], lr=lr, momentum=alpha)
    w, buf = torch.zeros(6, dtype=DT), torch.zeros(6, dtype=DT)
    for _ in range(10):
        opt.zero_grad()
        ((p - target) ** 2).sum().backward()
        opt.step()
        buf = momentum_memory(buf, 2 * (w - target), lr, alpha)
        w = w + buf
    torch.testing.assert_close(p.detach(), w, atol=ATOL, rtol=0)


def test_elementwise_optimal_memory_minimises_eq_101():
    g = _gen(4)
    grads = torch.randn(9, 5, generator=g, dtype=DT)
    weights = torch.rand(9, 1, generator=g, dtype=DT)
    P = torch.rand(5, generator=g, dtype=DT) + 0.5
    lam = 0.3
    M, H = (weights * grads).sum(0), (weights * grads**2).sum(0)
    m_star = elementwise_optimal_memory(M, H, P, lam)
    m = m_star.clone().requires_grad_(True)
    objective = (weights * (m * grads - P) ** 2).sum() + lam * (m**2).sum()
    (grad,) = torch.autograd.grad(objective, m)
    assert grad.abs().max() < 1e-11
    # eq. (104): P = H, lam = 0 -> the memory is M itself (momentum GD).
    torch.testing.assert_close(elementwise_optimal_memory(M, H, H, 0.0), M, atol=ATOL, rtol=1e-12)


def test_single_objective_with_equal_betas_is_adam_direction_without_bias_correction():
    g = _gen(5)
    beta, T = 0.9, 12
    grads = torch.randn(T, 4, generator=g, dtype=DT)
    weights = ((1 - beta) * beta ** torch.arange(T - 1, -1, -1, dtype=DT)).unsqueeze(1)  # [T, 1], oldest first
    H = (weights * grads**2).sum(0)
    m_star = elementwise_optimal_memory((weights * grads).sum(0), H, H.sqrt(), 0.0)
    M_ema, H_ema = ema_moments(grads, beta, beta)
    torch.testing.assert_close(m_star, M_ema / H_ema.sqrt(), atol=ATOL, rtol=1e-12)


def _adam_trajectories(eps: float):
    g = _gen(6)
    target = torch.randn(3, 4, generator=g, dtype=DT)
    start = torch.randn(3, 4, generator=g, dtype=DT)
    lr, betas = 0.05, (0.9, 0.999)
    p = start.clone().requires_grad_(True)
    opt = torch.optim.Adam([p], lr=lr, betas=betas, eps=eps)
    w, history = start.clone(), []
    for t in range(1, 13):
        opt.zero_grad()
        ((p - target) ** 3).abs().sum().backward()
        opt.step()
        history.append(3 * (w - target) ** 2 * torch.sign(w - target))
        M, H = ema_moments(torch.stack(history), *betas)
        w = w - lr * adam_as_optimal_memory(M, H, t, betas, eps)
        torch.testing.assert_close(p.detach(), w, atol=1e-12, rtol=1e-12)


def test_adam_is_elementwise_optimal_memory_over_12_steps_with_eps():
    _adam_trajectories(eps=1e-3)


def test_adam_is_elementwise_optimal_memory_over_12_steps_eps_zero_is_paper_property():
    _adam_trajectories(eps=0.0)


def test_outer_product_memory_minimises_clean_objective():
    g = _gen(7)
    grads = torch.randn(10, 4, generator=g, dtype=DT)
    w = torch.rand(10, generator=g, dtype=DT)
    lam = 0.2
    M, H = (w[:, None] * grads).sum(0), torch.einsum("t,ti,tj->ij", w, grads, grads)
    m_star = outer_product_optimal_memory(M, H, torch.eye(4, dtype=DT), lam)
    m = m_star.clone().requires_grad_(True)
    objective = (w * (grads @ m - 1) ** 2).sum() + lam * (m**2).sum()
    (grad,) = torch.autograd.grad(objective, m)
    assert grad.abs().max() < 1e-11


def test_adagrad_momentum_memory_tends_to_inverse_sqrt_preconditioned_momentum():
    g = _gen(8)
    grads = torch.randn(20, 4, generator=g, dtype=DT)
    H = grads.T @ grads
    M = grads.mean(0)
    evals, evecs = torch.linalg.eigh(H)
    inv_sqrt = evecs @ torch.diag(evals**-0.5) @ evecs.T
    torch.testing.assert_close(adagrad_momentum_memory(M, H, 1e-12), inv_sqrt @ M, atol=1e-10, rtol=1e-10)
    # Diagonal H: element-wise AdaGrad-style M / sqrt(H).
    Hd = torch.diag(H.diagonal())
    torch.testing.assert_close(adagrad_momentum_memory(M, Hd, 0.0), M / H.diagonal().sqrt(), atol=ATOL, rtol=1e-12)


def _quartic_grad(w: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    return 4 * (w - target) ** 3


def test_diagonal_memory_with_current_gradient_is_torch_adagrad():
    """Conventions coincide for M = g_t (no momentum), H = plain sum of g^2, lr_decay = 0, accumulator 0."""
    g = _gen(9)
    target, start = torch.randn(5, generator=g, dtype=DT), torch.randn(5, generator=g, dtype=DT)
    lr, eps = 0.1, 1e-4
    p = start.clone().requires_grad_(True)
    opt = torch.optim.Adagrad([p], lr=lr, eps=eps)
    w, H = start.clone(), torch.zeros(5, dtype=DT)
    for _ in range(12):
        opt.zero_grad()
        ((p - target) ** 4).sum().backward()
        opt.step()
        grad = _quartic_grad(w, target)
        H = H + grad**2
        w = w - lr * elementwise_optimal_memory(grad, H, H / (H.sqrt() + eps), 0.0)
    torch.testing.assert_close(p.detach(), w, atol=ATOL, rtol=1e-12)


def test_diagonal_memory_with_ema_momentum_is_direct_adagrad_with_momentum():
    """AdaGrad with momentum (Defossez et al. 2022: m = b1 m + (1-b1) g, v = v + g^2) written directly."""
    g = _gen(10)
    target, start = torch.randn(5, generator=g, dtype=DT), torch.randn(5, generator=g, dtype=DT)
    lr, beta1 = 0.1, 0.9
    direct, mom, acc = start.clone(), torch.zeros(5, dtype=DT), torch.zeros(5, dtype=DT)
    w, history = start.clone(), []
    for _ in range(12):
        grad = _quartic_grad(direct, target)
        mom, acc = beta1 * mom + (1 - beta1) * grad, acc + grad**2
        direct = direct - lr * mom / acc.sqrt()
        history.append(_quartic_grad(w, target))
        M, _ = ema_moments(torch.stack(history), beta1, 0.0)
        H = (torch.stack(history) ** 2).sum(0)
        w = w - lr * adagrad_momentum_memory(M, torch.diag(H), 0.0)
    torch.testing.assert_close(w, direct, atol=ATOL, rtol=1e-12)


def test_backprop_writes_of_two_layer_mlp_equal_autograd_and_sgd():
    g = _gen(11)
    x = torch.randn(6, 3, generator=g, dtype=DT)
    y = torch.randn(6, 2, generator=g, dtype=DT)
    net = torch.nn.Sequential(torch.nn.Linear(3, 5, dtype=DT), torch.nn.Tanh(), torch.nn.Linear(5, 2, dtype=DT))
    for p in net.parameters():
        torch.nn.init.normal_(p, generator=g)
    params = [p.detach().clone() for p in net.parameters()]  # w1, b1, w2, b2
    out = net(x)
    loss = 0.5 * ((out - y) ** 2).sum()
    grad_output = (out - y).detach()  # dL/dy, the layer-2 local error
    writes = mlp2_memory_writes(x, *params, grad_output, activation="tanh")
    loss.backward()
    auto = [p.grad for p in net.parameters()]
    for name, a in zip(("w1", "b1", "w2", "b2"), auto, strict=True):
        torch.testing.assert_close(writes[name], a, atol=ATOL, rtol=1e-12)
    # Each weight's SGD step is the proximal dot-product memory write of (input, local error) pairs (eq. 31).
    lr = 0.1
    torch.optim.SGD(net.parameters(), lr=lr).step()
    new_w1 = proximal_dot_product_memory(params[0], x, writes["delta1"], lr)
    new_w2 = proximal_dot_product_memory(params[2], writes["x1"], writes["delta2"], lr)
    torch.testing.assert_close(net[0].weight.detach(), new_w1, atol=ATOL, rtol=1e-12)
    torch.testing.assert_close(net[2].weight.detach(), new_w2, atol=ATOL, rtol=1e-12)
