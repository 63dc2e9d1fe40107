"""Feature maps: their kernels, their dimensions, and their use inside linear attention."""

import math
from typing import get_args

import pytest
import torch

from helpers import assert_close, random_qkv
from regmem.ops import linear_attn
from regmem.ops.feature_maps import (
    DPFP,
    FEATURE_MAPS,
    FeatureMapName,
    RandomFeatures,
    Taylor2,
    resolve_feature_map,
)


def test_feature_maps_has_one_entry_per_name_of_feature_map_name():
    assert tuple(FEATURE_MAPS) == get_args(FeatureMapName)


@pytest.mark.parametrize("name", sorted(FEATURE_MAPS))
def test_feature_dim_matches_output(name):
    phi = resolve_feature_map(name, 6)
    assert phi(torch.randn(3, 6)).shape == (3, phi.feature_dim(6))


def test_taylor2_kernel_is_second_order_exp_expansion():
    q, k = torch.randn(50, 8, dtype=torch.float64), torch.randn(50, 8, dtype=torch.float64)
    x = (q * k).sum(-1) / math.sqrt(8)
    phi = Taylor2()
    assert_close((phi(q) * phi(k)).sum(-1), 1 + x + x**2 / 2, "taylor2 kernel")


def test_random_features_estimate_the_softmax_kernel():
    gen = torch.Generator().manual_seed(0)
    q, k = 0.5 * torch.randn(20, 4, generator=gen, dtype=torch.float64), 0.5 * torch.randn(20, 4, generator=gen,
                                                                                                dtype=torch.float64)
    phi = RandomFeatures(4, 40000, seed=1)
    estimate = (phi(q) * phi(k)).sum(-1)
    exact = torch.exp((q * k).sum(-1) / 2.0)  # exp(q.k / sqrt(K)), K = 4
    assert ((estimate - exact).abs() / exact).max() < 0.05  # Monte Carlo error ~ 1/sqrt(m)


def test_random_features_are_reproducible_from_a_seed_or_a_projection():
    a, b = RandomFeatures(4, 8, seed=3), RandomFeatures(4, 8, seed=3)
    x = torch.randn(5, 4)
    assert torch.equal(a(x), b(x))
    c = RandomFeatures(4, projection=a.projection)
    assert torch.equal(a(x), c(x))
    assert not torch.equal(a(x), RandomFeatures(4, 8, seed=4)(x))


def test_dpfp_is_non_negative_with_dimension_2k_nu():
    phi = DPFP(nu=3)
    out = phi(torch.randn(7, 5))
    assert out.shape == (7, 30) and (out >= 0).all()


def test_cosine_kernel_is_cosine_similarity():
    q, k = torch.randn(10, 6, dtype=torch.float64), torch.randn(10, 6, dtype=torch.float64)
    phi = resolve_feature_map("cosine", 6)
    assert_close((phi(q) * phi(k)).sum(-1), torch.nn.functional.cosine_similarity(q, k, dim=-1), "cosine")


@pytest.mark.parametrize("name", sorted(FEATURE_MAPS))
def test_feature_mapped_linear_attention_is_linear_attention_on_features(name):
    q, k, v = random_qkv(1, 30, 2, 4, 3)
    phi = resolve_feature_map(name, 4)
    o, _ = linear_attn(q, k, v, feature_map=phi, scale=0.7)
    o_plain, _ = linear_attn(phi(q), phi(k), v, scale=0.7)
    assert_close(o, o_plain, name)
