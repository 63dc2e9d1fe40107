"""Kernels of a kernelised associative memory (arXiv:2505.19488, Sec. 2.1): their definitions, the normalised read
of eq. 18, the truncated exp feature map of eq. 11 and the ReLU FFN as a sum of key-value memories (eq. 14)."""

import math

import pytest
import torch

from helpers import assert_close
from regmem.analysis import MEMORY_KERNELS, exp_feature_map, kernel, kernel_of_dot, normalized_weights, relu_ffn
from regmem.ops.common.kernels import score_kernel

F64 = torch.float64


def _pair(d=8, n=20, seed=0):
    gen = torch.Generator().manual_seed(seed)
    return torch.randn(n, d, generator=gen, dtype=F64), torch.randn(n, d, generator=gen, dtype=F64)


@pytest.mark.parametrize("name", MEMORY_KERNELS)
def test_each_kernel_is_its_definition_of_the_dot_product(name):
    x, y = _pair()
    s, tau = (x * y).sum(-1), 3.0
    expected = {"linear": s, "relu": s.clamp_min(0), "exp": torch.exp(s / tau), "solu": s * torch.exp(s / tau),
                "round": torch.round(s)}[name]
    assert_close(kernel(name, x, y, tau=tau), expected, name)


def test_round_kernel_rounds_to_decimals_and_passes_the_gradient_straight_through():
    dots = torch.tensor([1.236, -0.4449, 2.5], dtype=F64)
    assert torch.equal(kernel_of_dot("round", dots, decimals=2), torch.tensor([1.24, -0.44, 2.5], dtype=F64))
    x, y = _pair(d=4, n=3)
    x.requires_grad_(True)
    kernel("round", x, y).sum().backward()
    assert torch.equal(x.grad, y)  # d round(x.y) / dx := d (x.y) / dx = y


def test_kernels_broadcast_a_query_against_a_batch_of_keys():
    keys, q = _pair(n=5)
    out = kernel("exp", keys, q[0], tau=2.0)
    assert out.shape == (5,)
    assert_close(out, torch.exp(keys @ q[0] / 2.0), "broadcast")


def test_normalized_exp_weights_are_softmax():
    keys, q = _pair(d=6, n=7)
    weights = normalized_weights("exp", q[0], keys, tau=math.sqrt(6))
    assert_close(weights, score_kernel("softmax", keys @ q[0] / math.sqrt(6)), "softmax")
    assert_close(weights.sum(), torch.tensor(1.0, dtype=F64), "sum")


def test_truncated_exp_feature_map_tends_to_exp_within_the_taylor_tail():
    x, y = _pair(d=3, n=50, seed=1)
    scale = (x * y).sum(-1).abs().clamp_min(1.0).sqrt()
    x, y = x / scale.unsqueeze(-1), y / scale.unsqueeze(-1)  # |x.y| <= 1
    s = (x * y).sum(-1)
    errors = []
    for order in (2, 4, 6, 10):
        approx = (exp_feature_map(x, order) * exp_feature_map(y, order)).sum(-1)
        err = (approx - torch.exp(s)).abs()
        tail = s.abs() ** (order + 1) / math.factorial(order + 1) * torch.exp(s.abs())  # Lagrange remainder bound
        assert (err <= tail + 1e-15).all(), order
        errors.append(err.max().item())
    assert errors == sorted(errors, reverse=True)
    assert errors[-1] < 1e-6  # M = 10


def test_exp_feature_map_has_the_temperature_and_the_size_of_its_tensor_powers():
    x, y = _pair(d=2, n=4, seed=2)
    phi_x, phi_y = exp_feature_map(x, 12, tau=4.0), exp_feature_map(y, 12, tau=4.0)
    assert phi_x.shape == (4, sum(2**m for m in range(13)))
    assert_close((phi_x * phi_y).sum(-1), kernel("exp", x, y, tau=4.0), "exp(x.y / tau)")


def test_relu_ffn_is_the_sum_of_its_key_value_memories():
    gen = torch.Generator().manual_seed(3)
    w_k, w_v = torch.randn(12, 5, generator=gen, dtype=F64), torch.randn(12, 4, generator=gen, dtype=F64)
    x = torch.randn(6, 5, generator=gen, dtype=F64)
    memories = sum(w_v[i] * kernel("relu", w_k[i], x).unsqueeze(-1) for i in range(12))  # sum_i v_i relu(k_i.x)
    torch.testing.assert_close(relu_ffn(x, w_k, w_v), memories, rtol=0, atol=1e-12)
    batched = relu_ffn(x.unsqueeze(0).expand(2, -1, -1), w_k.expand(2, -1, -1), w_v.expand(2, -1, -1))
    torch.testing.assert_close(batched[1], memories, rtol=0, atol=1e-12)


@pytest.mark.parametrize(("call", "argument"), [
    (lambda x: kernel("gauss", x, x), "kernel"),
    (lambda x: kernel("exp", x, x, tau=0.0), "tau"),
    (lambda x: kernel("round", x, x, decimals=-1), "decimals"),
    (lambda x: kernel("linear", x, x[:, :2]), "x and y"),
    (lambda x: exp_feature_map(x, -1), "order"),
])
def test_bad_arguments_raise_naming_them(call, argument):
    with pytest.raises(ValueError, match=argument):
        call(torch.ones(2, 3))
