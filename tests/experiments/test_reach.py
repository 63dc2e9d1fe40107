"""`regmem analyze reach` (regmem/lab/experiments/reach.py): how far back a layer's gradient reaches at
initialisation."""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

from regmem.lab.cli import main
from regmem.lab.experiments.reach import ReachSettings, growth_per_token, input_sensitivity, parse_layers, run
from regmem.layers import build_mixer


class MovingAverage(nn.Module):
    """y_t = sum_{s <= t} gamma^(t - s) x_s: r(s) = gamma^(T - 1 - s) exactly (the gradient of ||y_T|| with respect to
    x_s is gamma^(T - 1 - s) y_T / ||y_T||, a vector of that norm)."""

    def __init__(self, gamma: float):
        super().__init__()
        self.gamma = gamma

    def forward(self, x):
        T = x.shape[1]
        t = torch.arange(T, dtype=x.dtype)
        weights = torch.tril(self.gamma ** (t[:, None] - t[None, :]).clamp(min=0))  # [T, T]
        return torch.einsum("ts,bsd->btd", weights, x), None


@pytest.mark.parametrize("gamma", [0.9, 1.05])
def test_a_moving_average_reaches_gamma_to_the_distance(gamma):
    T = 40
    x = torch.randn(2, T, 5, dtype=torch.float64)
    r = input_sensitivity(MovingAverage(gamma), x)
    torch.testing.assert_close(r, gamma ** torch.arange(T - 1, -1, -1, dtype=torch.float64), rtol=1e-10, atol=0)
    assert growth_per_token(r) == pytest.approx(math.log(gamma), rel=1e-9)  # < 0 falls, > 0 grows


def test_the_sensitivity_is_the_gradient_by_finite_differences():
    torch.manual_seed(0)
    mixer = build_mixer("gated_deltanet", 16, 2).double()
    x = torch.randn(1, 12, 16, dtype=torch.float64)
    r = input_sensitivity(mixer, x)

    def norm_last(z):
        with torch.no_grad():
            return mixer(z)[0][0, -1].norm()

    eps, s = 1e-6, 3
    grad = torch.zeros(16, dtype=torch.float64)
    for i in range(16):
        plus, minus = x.clone(), x.clone()
        plus[0, s, i] += eps
        minus[0, s, i] -= eps
        grad[i] = (norm_last(plus) - norm_last(minus)) / (2 * eps)
    assert float(r[s]) == pytest.approx(float(grad.norm()), rel=1e-6)


def test_variants_read_their_options_and_bad_ones_name_the_variant():
    layers = parse_layers(["gated_deltanet"], ["hope:eta_max=0.03", "titans_mlp:decay_init=0.0001,0.01:momentum=false"])
    assert layers[0] == ("gated_deltanet", "gated_deltanet", {})
    assert layers[1][1:] == ("hope", {"eta_max": 0.03})
    assert layers[2][1:] == ("titans_mlp", {"decay_init": (0.0001, 0.01), "momentum": False})
    with pytest.raises(ValueError, match="variant 'hope'"):
        parse_layers([], ["hope"])
    with pytest.raises(ValueError, match="no option 'nosuch'"):
        parse_layers([], ["hope:nosuch=1"])


def test_hope_at_its_defaults_expands_where_gated_deltanet_forgets():
    """The finding the command was written for (benchmarks/nested-learning.md, "Hope's backward at initialisation"):
    at T 128 Gated DeltaNet's sensitivity falls with the distance and Hope's grows."""
    result = run(ReachSettings(layers=(("gdn", "gated_deltanet", {}), ("hope", "hope", {})), seq_len=128,
                               d_model=32, n_heads=2, seeds=(0,)))
    assert result["layers"]["gdn"]["growth_per_token"] < 0 < result["layers"]["hope"]["growth_per_token"]


def test_the_command_writes_the_table_the_json_and_the_plot(tmp_path, capsys):
    main(["analyze", "reach", "--mixers", "gated_deltanet", "--variant", "gated_deltanet:short_conv=0",
          "--seq-len", "16", "--d-model", "16", "--n-heads", "2", "--seeds", "0", "--out-dir", str(tmp_path)])
    assert {p.name for p in tmp_path.iterdir()} == {"reach.md", "reach.json", "reach.png"}
    table = (tmp_path / "reach.md").read_text()
    assert "| gated_deltanet short_conv=0 |" in table and "growth per token" in table
