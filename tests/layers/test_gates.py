"""The shared gates of regmem/layers/gates.py: the mixers that use Mamba-2's gate keep their state-dict keys and
draw the same initial values as the gate written out by hand (in the order each constructor draws); the
initial values lie where the initialisation says; and the gate and QK-norm formulas are written only once."""

import ast
import math
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import regmem.layers
from regmem.layers import DeltaNet, GatedDeltaNet, Mamba2, MemoryMixer, Mesa, ShortConvolution
from regmem.layers.gates import a_log_parameter, dt_bias_parameter, log_retention, time_step

D_MODEL, HEADS = 16, 4


def _hand_a_log(n):
    return torch.log(torch.empty(n).uniform_(1.0, 16.0))


def _hand_dt_bias(n, low, high):
    dt = torch.exp(torch.empty(n).uniform_(low, high))
    return dt + torch.log(-torch.expm1(-dt))


def _replay_gated_deltanet():
    """GatedDeltaNet's draws: DeltaNet's, then a_proj, A_log, dt_bias."""
    DeltaNet(D_MODEL, HEADS)
    nn.Linear(D_MODEL, HEADS, bias=False)
    return _hand_a_log(HEADS), _hand_dt_bias(HEADS, -6.9, -2.3)


def _replay_mesa():
    """Mesa's draws: the memory skeleton's (QK-norm on), then a_proj, A_log, dt_bias."""
    MemoryMixer(D_MODEL, HEADS, qk_norm=True)
    nn.Linear(D_MODEL, HEADS, bias=False)
    return _hand_a_log(HEADS), _hand_dt_bias(HEADS, -6.9, -2.3)


def _replay_mamba2():
    """Mamba2's draws (state_size 8, inner 2 * d_model): in_proj, the conv, then dt_bias before A_log."""
    inner, conv_dim = 2 * D_MODEL, 2 * D_MODEL + 2 * 8
    nn.Linear(D_MODEL, inner + conv_dim + HEADS, bias=False)
    ShortConvolution(conv_dim, 4)
    dt_bias = _hand_dt_bias(HEADS, math.log(1e-3), math.log(1e-1))
    return _hand_a_log(HEADS), dt_bias


CASES = {
    "gated_deltanet": (lambda: GatedDeltaNet(D_MODEL, HEADS), _replay_gated_deltanet),
    "mesa": (lambda: Mesa(D_MODEL, HEADS), _replay_mesa),
    "mamba2": (lambda: Mamba2(D_MODEL, HEADS, state_size=8), _replay_mamba2),
}
GATE_KEYS = {"A_log", "dt_bias"}


@pytest.mark.parametrize("name", list(CASES))
@pytest.mark.parametrize("seed", [0, 7])
def test_gate_parameters_keep_their_keys_and_initial_values(name, seed):
    build, replay = CASES[name]
    torch.manual_seed(seed)
    mixer = build()
    torch.manual_seed(seed)
    a_log, dt_bias = replay()
    assert GATE_KEYS <= set(mixer.state_dict()), "A_log and dt_bias are top-level keys of the mixer"
    assert not any(k.endswith((".A_log", ".dt_bias")) for k in mixer.state_dict()), "no nested gate module"
    assert torch.equal(mixer.A_log.detach(), a_log)
    assert torch.equal(mixer.dt_bias.detach(), dt_bias)


def test_gate_parameters_lie_in_their_initial_ranges():
    torch.manual_seed(0)
    a_log, dt_bias = a_log_parameter(1000), dt_bias_parameter(1000)
    A, dt = torch.exp(a_log.detach()), F.softplus(dt_bias.detach())
    assert 1.0 <= A.min() and A.max() <= 16.0 and A.max() - A.min() > 14.0
    assert math.exp(-6.9) * 0.999 <= dt.min() and dt.max() <= math.exp(-2.3) * 1.001
    assert dt.min() < 2e-3 and dt.max() > 5e-2, "dt spans the log range"
    low, high = math.log(2e-3), math.log(5e-2)
    dt = F.softplus(dt_bias_parameter(1000, (low, high)).detach())
    assert 2e-3 * 0.999 <= dt.min() and dt.max() <= 5e-2 * 1.001


def test_log_retention_is_minus_A_times_softplus():
    torch.manual_seed(0)
    a_log, dt_bias, logits = torch.randn(3), torch.randn(3), torch.randn(2, 5, 3)
    dt = time_step(logits, dt_bias)
    torch.testing.assert_close(dt, torch.log1p(torch.exp(logits + dt_bias)))
    torch.testing.assert_close(log_retention(a_log, dt), -torch.exp(a_log) * dt)


def _normalize_calls(tree):
    """Calls of F.normalize / torch.nn.functional.normalize (not attributes such as HLA's `self.normalize`)."""
    return [
        n for n in ast.walk(tree)
        if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr == "normalize"
        and ast.unparse(n.func.value) in ("F", "torch.nn.functional", "functional")
    ]


def test_gate_and_qk_norm_formulas_live_once():
    """Only gates.py draws A (uniform_(1.0, 16.0)) or inverts softplus (expm1 of a dt), and only norm.py calls
    F.normalize; every other layer uses them through those modules."""
    layers = Path(regmem.layers.__file__).parent
    for path in layers.glob("*.py"):
        source = path.read_text()
        if path.name != "gates.py":
            assert "uniform_(1.0, 16.0)" not in source and "expm1(-dt)" not in source, f"{path.name} redefines the gate"
        if path.name != "norm.py":
            assert not _normalize_calls(ast.parse(source)), f"{path.name} normalises q/k itself"
