"""The switching-AR key generator of TTR Sec. 5 (eq. 55): shapes, the value/query/target alignment, the regime
switch and seeding."""

import pytest
import torch

from regmem.tasks import OnlineRegressionConfig, switching_keys


def test_queries_values_and_targets_are_the_next_keys():
    config = OnlineRegressionConfig(dim=8, seq_len=40)
    q, k, v, target = switching_keys(config, 3, seed=0)
    assert q.shape == k.shape == v.shape == target.shape == (3, 40, 8)
    assert q.dtype == torch.float64
    torch.testing.assert_close(q[:, :-1], k[:, 1:], rtol=0, atol=0)  # q_t = k_{t+1}
    torch.testing.assert_close(v, q / q.norm(dim=-1, keepdim=True))  # v_t = k_{t+1} / |k_{t+1}|
    torch.testing.assert_close(target[:, :-1], v[:, 1:], rtol=0, atol=0)  # target_t = v_{t+1}


def test_ar_recursion_switches_retention_at_the_switch_step():
    config = OnlineRegressionConfig(dim=4, seq_len=20, decays=(0.5, 0.9), rho=0.0)  # Sigma = I
    _, k, _, _ = switching_keys(config, 1, seed=0)
    eps = torch.randn(1, 22, 4, generator=torch.Generator().manual_seed(0), dtype=torch.float64)  # same draws
    switch = config.switch_step  # 5: k_{t+1} = 0.5 k_t for t < 5 (1-based), 0.9 k_t after
    torch.testing.assert_close(k[0, 0], config.noise * eps[0, 0])
    for t in range(1, 20):  # k[t] is k_{t+1}
        a = 0.5 if t < switch else 0.9
        torch.testing.assert_close(k[0, t], a * k[0, t - 1] + config.noise * eps[0, t])


def test_innovations_are_equicorrelated():
    config = OnlineRegressionConfig(dim=6, seq_len=400, decays=(0.0, 0.0), rho=0.5)
    _, k, _, _ = switching_keys(config, 20, seed=1)  # zero retention: keys are the scaled innovations
    eps = (k[:, 1:] / config.noise).reshape(-1, 6)
    corr = torch.corrcoef(eps.T)
    off_diagonal = corr[~torch.eye(6, dtype=torch.bool)]
    assert (off_diagonal - 0.5).abs().max() < 0.05


def test_seeded_and_generator_draws_agree_and_bad_config_raises():
    config = OnlineRegressionConfig(dim=4, seq_len=10)
    a = switching_keys(config, 2, seed=3)
    b = switching_keys(config, 2, generator=torch.Generator().manual_seed(3))
    for x, y in zip(a, b, strict=True):
        torch.testing.assert_close(x, y, rtol=0, atol=0)
    with pytest.raises(ValueError, match="rho"):
        OnlineRegressionConfig(dim=4, rho=1.0)
    with pytest.raises(ValueError, match="switch_at"):
        OnlineRegressionConfig(switch_at=2.0)
    with pytest.raises(ValueError, match="seed"):
        switching_keys(config, 1)
