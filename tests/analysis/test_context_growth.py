"""Vignette 3 of arXiv:2505.19488 (Sec. 4, eqs. 44-49, App. F): the DeltaNet fixed point (eq. 46, not the printed
eq. 48), online SGD reaching it, normalised softmax attention as a running mean whose updates vanish like 1/t
(eq. 79), and the sqrt(t) growth of an un-normalised memory (Sec. 2.2)."""

import math
from functools import partial

import pytest
import torch

from regmem.analysis.context_growth import (
    deltanet_fixed_point,
    last_token_weights,
    loglog_slope,
    online_deltanet,
    paper_multihead_fixed_point,
    prefix_memories,
    running_mean_memory,
    scaled_update_norms,
    spectral_norm_growth,
)
from regmem.analysis.kernels import exp_feature_map
from regmem.analysis.update_framework import normalized_softmax_steps, unroll

F64 = torch.float64


def _orthogonal(n, g):
    return torch.linalg.qr(torch.randn(n, n, generator=g, dtype=F64))[0]


def _covariance(n, low, high, seed):
    """A random covariance with eigenvalues evenly spread over [low, high]."""
    Q = _orthogonal(n, torch.Generator().manual_seed(seed))
    return Q @ torch.diag(torch.linspace(low, high, n, dtype=F64)) @ Q.mT


SIGMAS = (_covariance(4, 0.5, 2.0, seed=1), _covariance(4, 0.2, 1.0, seed=2))


def _full_rank_projections():
    """W_k square with singular values in [1, 2] (so the normalised SGD converges fast), W_v random: [4, 4] each."""
    g = torch.Generator().manual_seed(0)
    W_k = _orthogonal(4, g) @ torch.diag(torch.tensor([1.0, 1.2, 1.5, 2.0], dtype=F64)) @ _orthogonal(4, g).mT
    return W_k, torch.randn(4, 4, generator=g, dtype=F64)


def _low_rank_projections(D=6, K=3, V=3):
    g = torch.Generator().manual_seed(0)
    return torch.randn(K, D, generator=g, dtype=F64), torch.randn(V, D, generator=g, dtype=F64)


def _low_rank_sigmas(D=6):
    return _covariance(D, 0.5, 2.0, seed=1), _covariance(D, 0.2, 1.0, seed=2)


def test_full_rank_fixed_point_is_w_v_w_k_inverse_for_every_sigma():
    """Eq. 47: with W_k square and invertible, eq. 46 is W_v W_k^{-1}, whatever Sigma."""
    W_k, W_v = _full_rank_projections()
    for sigma in SIGMAS:
        S_star = deltanet_fixed_point(W_k, W_v, sigma)
        assert (S_star - W_v @ torch.linalg.inv(W_k)).abs().max().item() < 1e-10


def test_online_normalized_deltanet_converges_to_w_v_w_k_inverse():
    """Testable consequence (i), full rank. v = W_v W_k^{-1} k exactly, so the normalised step contracts the error
    with no noise floor. beta = 0.5 for 1000 tokens (faster than the 20k tokens at beta = 0.02 that the same
    convergence takes with the small step) reaches W_v W_k^{-1} to 1e-8 for both covariances."""
    W_k, W_v = _full_rank_projections()
    target = W_v @ torch.linalg.inv(W_k)
    for seed, sigma in enumerate(SIGMAS):
        trajectory = online_deltanet(W_k, W_v, sigma, steps=1000, step_size=0.5,
                                     generator=torch.Generator().manual_seed(seed))  # [1001, 1, 4, 4]
        assert (trajectory[0] == 0).all()
        assert (trajectory[-1, 0] - target).abs().max().item() < 1e-8
        assert (trajectory[10, 0] - target).abs().max().item() > 1e-2  # it did have to converge


def test_eq46_zeroes_the_expected_gradient_and_eq48_does_not():
    """Eq. 45: the expected gradient (S W_k - W_v) Sigma W_k^T vanishes at eq. 46; the printed eq. 48 differs from
    eq. 46 by O(1) in the low-rank case (erratum) and leaves a non-zero gradient."""
    W_k, W_v = _low_rank_projections()
    sigma = _low_rank_sigmas()[0]
    S46 = deltanet_fixed_point(W_k, W_v, sigma)
    S48 = paper_multihead_fixed_point(W_k, W_v, sigma)

    def gradient(S):
        return (S @ W_k - W_v) @ sigma @ W_k.mT

    assert gradient(S46).abs().max().item() < 1e-10
    assert gradient(S48).abs().max().item() > 0.1
    assert (S48 - S46).abs().max().item() > 0.1


def test_low_rank_fixed_point_depends_on_sigma():
    """Eq. 46 with W_k: [3, 6]: W_k^+ W_k != I, Sigma does not cancel, two covariances give two fixed points."""
    W_k, W_v = _low_rank_projections()
    S1, S2 = (deltanet_fixed_point(W_k, W_v, sigma) for sigma in _low_rank_sigmas())
    assert (S1 - S2).abs().max().item() > 0.1


def test_online_deltanet_low_rank_reaches_its_own_sigma_fixed_point():
    """Testable consequence (i), low rank. The plain step (normalize=False) has E[S_t] -> eq. 46 exactly; the iterates
    fluctuate by O(sqrt(beta)), so the check averages the second half of 32 streams (beta = 0.02, 3000 tokens):
    the average lies within 5% of |S1 - S2| of its own covariance's fixed point and far from the other one."""
    W_k, W_v = _low_rank_projections()
    sigmas = _low_rank_sigmas()
    fixed = [deltanet_fixed_point(W_k, W_v, sigma) for sigma in sigmas]
    gap = (fixed[0] - fixed[1]).abs().max().item()
    for i, sigma in enumerate(sigmas):
        trajectory = online_deltanet(W_k, W_v, sigma, steps=3000, step_size=0.02, trials=32, normalize=False,
                                     generator=torch.Generator().manual_seed(3 + i))  # [3001, 32, 3, 3]
        average = trajectory[1500:].mean((0, 1))  # [3, 3]
        assert (average - fixed[i]).abs().max().item() < 0.05 * gap
        assert (average - fixed[1 - i]).abs().max().item() > 0.5 * gap


def test_values_linear_in_keys_give_fixed_point_m_for_every_sigma():
    """If W_v = M W_k then S* = M for every Sigma (eq. 46), and the normalised SGD reaches it (realisable data)."""
    W_k, _ = _low_rank_projections()
    M = torch.randn(3, 3, generator=torch.Generator().manual_seed(7), dtype=F64)
    for seed, sigma in enumerate(_low_rank_sigmas()):
        assert (deltanet_fixed_point(W_k, M @ W_k, sigma) - M).abs().max().item() < 1e-10
        trajectory = online_deltanet(W_k, M @ W_k, sigma, steps=1500, step_size=0.5,
                                     generator=torch.Generator().manual_seed(seed))
        assert (trajectory[-1, 0] - M).abs().max().item() < 1e-6


def test_running_mean_satisfies_eq79_exactly():
    """S_t = 1/t sum_{i<=t} v_i phi(k_i)^T equals (t-1)/t S_{t-1} + 1/t v_t phi(k_t)^T, the normalised-softmax row of
    Table 2, with the explicit feature map phi of eq. 11 truncated after order 3."""
    g = torch.Generator().manual_seed(0)
    keys, values = torch.randn(50, 4, generator=g, dtype=F64), torch.randn(50, 3, generator=g, dtype=F64)
    features = exp_feature_map(keys, 3, tau=2.0)  # [50, 85]
    running = running_mean_memory(features, values)  # [50, 3, 21]
    recurrent = unroll(normalized_softmax_steps(features, values))[1:]  # [50, 3, 21]
    assert (running - recurrent).abs().max().item() < 1e-12


def test_normalized_attention_with_z_replaced_by_t_c_reads_the_running_mean():
    """Eqs. 77-78: with Z_t = sum_{j<=t} exp(q.k_j) replaced by t c(q), attention reads S_t phi(q) / c(q). The law
    of large numbers behind it: Z_t / t -> c(q) = E exp(s q.k) = exp(s^2 ||q||^2 / 2) for k ~ N(0, I)."""
    g = torch.Generator().manual_seed(0)
    T, K = 4096, 4
    keys, values = torch.randn(T, K, generator=g, dtype=F64), torch.randn(T, 3, generator=g, dtype=F64)
    q = torch.nn.functional.normalize(torch.randn(K, generator=g, dtype=F64), dim=0) * K**0.5  # s^2 ||q||^2 = 1
    phi = partial(exp_feature_map, order=3, tau=2.0)  # phi(q).phi(k) = sum_{m<=3} (q.k / 2)^m / m!
    kernel = phi(keys) @ phi(q)  # [T]
    c = 1.7
    attention = (kernel[:, None] * values).cumsum(0) / (torch.arange(1, T + 1, dtype=F64)[:, None] * c)  # [T, 3]
    read = running_mean_memory(phi(keys), values) @ phi(q) / c  # [T, 3]
    assert (attention - read).abs().max().item() < 1e-12
    s = K**-0.5
    z_over_t = torch.exp(s * keys @ q).mean()
    assert abs(z_over_t.item() / math.exp(s * s * q.dot(q).item() / 2) - 1) < 0.1


def test_update_of_normalized_softmax_memory_vanishes_like_one_over_t():
    """Testable consequence (ii): t ||S_t - S_{t-1}||_F = ||v_t phi(k_t)^T - S_{t-1}||_F stays bounded, so the
    update itself decays like 1/t (log-log slope -1 +- 0.1 over t in [16, 2048])."""
    g = torch.Generator().manual_seed(0)
    keys, values = torch.randn(4, 2048, 4, generator=g, dtype=F64), torch.randn(4, 2048, 3, generator=g, dtype=F64)
    scaled = scaled_update_norms(running_mean_memory(exp_feature_map(keys, 3, tau=2.0), values)).mean(0)  # [2048]
    assert scaled[1023:].max().item() < 2 * scaled[15:64].max().item()
    updates = scaled / torch.arange(1, 2049, dtype=F64)  # ||S_t - S_{t-1}||_F
    times = [16, 32, 64, 128, 256, 512, 1024, 2048]
    band = torch.stack([updates[t // 2: t].mean() for t in times])  # window means over [t/2, t]
    assert abs(loglog_slope(times, band) + 1) < 0.1


def test_weight_of_the_newest_token_decays_like_one_over_t():
    """Testable consequence (ii): in causal softmax attention with i.i.d. tokens, token t's weight in o_t is
    ~ 1 / t (t times the weight stays near 1; log-log slope -1 +- 0.1 over t in [16, 512], 16 streams)."""
    g = torch.Generator().manual_seed(0)
    q, k = torch.randn(16, 512, 8, generator=g, dtype=F64), torch.randn(16, 512, 8, generator=g, dtype=F64)
    weights = last_token_weights(q, k).mean(0)  # [512]
    t = torch.arange(1, 513, dtype=F64)
    times = [16, 32, 64, 128, 256, 512]
    # window means over [t/2, t] smooth the heavy-tailed exp(q.k) of single tokens
    scaled = torch.stack([(weights * t)[tt // 2: tt].mean() for tt in times])
    assert ((scaled - 1).abs() < 0.25).all()  # Z_t ~ t c(q) and E exp(q.k_t) = c(q): t w_t ~ 1
    band = torch.stack([weights[tt // 2: tt].mean() for tt in times])
    assert abs(loglog_slope(times, band) + 1) < 0.1


def test_unnormalized_memory_spectral_norm_grows_like_sqrt_t():
    """Sec. 2.2 / testable consequence (iii): ||sum_{i<=t} v_i k_i^T||_2 for i.i.d. pairs, d = 16, grows like
    sqrt(t): log-log slope 0.5 +- 0.1 over t in [64, 4096] (4 streams)."""
    times = [64, 128, 256, 512, 1024, 2048, 4096]
    norms = spectral_norm_growth(16, times, trials=4, generator=torch.Generator().manual_seed(0))
    assert abs(loglog_slope(times, norms) - 0.5) < 0.1


def test_prefix_memories_are_cumulative_outer_products():
    g = torch.Generator().manual_seed(0)
    keys, values = torch.randn(2, 30, 4, generator=g, dtype=F64), torch.randn(2, 30, 3, generator=g, dtype=F64)
    got = prefix_memories(keys, values, [1, 7, 30])  # [2, 3, 3, 4]
    for j, t in enumerate([1, 7, 30]):
        expected = torch.einsum("btv,btk->bvk", values[:, :t], keys[:, :t])
        assert (got[:, j] - expected).abs().max().item() < 1e-12


def test_bad_inputs_raise_value_error_naming_the_argument():
    W_k, W_v = _low_rank_projections()
    with pytest.raises(ValueError, match="covariance must have shape"):
        deltanet_fixed_point(W_k, W_v, torch.eye(5, dtype=F64))
    with pytest.raises(ValueError, match="key_proj must be"):
        deltanet_fixed_point(W_k, W_v[:, :5], torch.eye(6, dtype=F64))
    with pytest.raises(ValueError, match="singular"):
        deltanet_fixed_point(W_k.mT, W_v.mT, torch.eye(3, dtype=F64))  # W_k: [6, 3], rank 3 < K = 6
    with pytest.raises(ValueError, match="covariance must be symmetric positive definite"):
        online_deltanet(W_k, W_v, -torch.eye(6, dtype=F64), steps=3, step_size=0.1, generator=torch.Generator())
    with pytest.raises(ValueError, match="step_size"):
        online_deltanet(W_k, W_v, torch.eye(6, dtype=F64), steps=3, step_size=0.0, generator=torch.Generator())
    with pytest.raises(ValueError, match="times must be"):
        prefix_memories(torch.zeros(10, 2), torch.zeros(10, 2), [5, 3])
