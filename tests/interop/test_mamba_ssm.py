"""mamba_ssm's Mamba -> regmem (regmem/interop/mamba_ssm.py): a state dict built by mamba_ssm's documented key names
and shapes, converted, computes what mamba_ssm's reference path computes (written out here token by token from
`mamba_simple.Mamba.forward`'s slow path and `selective_scan_ref`), in float64."""

import math

import pytest
import torch
import torch.nn.functional as F

from regmem.interop import convert, from_mamba_ssm_mamba


def mamba_ssm_state_dict(d_model=16, d_state=8, d_conv=4, expand=2, conv_bias=True, seed=0) -> dict:
    """Random weights under mamba_ssm's names and shapes (dt_rank "auto" = ceil(d_model / 16))."""
    g = torch.Generator().manual_seed(seed)
    D, R = expand * d_model, math.ceil(d_model / 16)
    sd = {"in_proj.weight": torch.randn(2 * D, d_model, generator=g) / d_model**0.5,
          "conv1d.weight": torch.randn(D, 1, d_conv, generator=g) / d_conv**0.5,
          "x_proj.weight": torch.randn(R + 2 * d_state, D, generator=g) / D**0.5,
          "dt_proj.weight": torch.randn(D, R, generator=g) / R**0.5,
          "dt_proj.bias": torch.log(torch.expm1(torch.rand(D, generator=g) * 0.09 + 0.01)),
          "A_log": torch.log(torch.arange(1, d_state + 1, dtype=torch.float32).repeat(D, 1)),
          "D": torch.randn(D, generator=g), "out_proj.weight": torch.randn(d_model, D, generator=g) / D**0.5}
    if conv_bias:
        sd["conv1d.bias"] = torch.randn(D, generator=g) * 0.1
    return sd


def mamba_ssm_reference(sd: dict, u: torch.Tensor) -> torch.Tensor:
    """mamba_ssm's Mamba forward without its CUDA path: in_proj -> (x, z); causal depthwise conv1d (padding W - 1,
    first T outputs) + silu; x_proj -> (dt, B, C); delta = softplus(dt_proj(dt) + dt_proj.bias); A = -exp(A_log);
    h_t = exp(delta_t A) h_{t-1} + delta_t B_t x_t; y_t = C_t h_t + D x_t; out_proj(y * silu(z))."""
    sd = {k: v.double() for k, v in sd.items()}
    Bsz, T, _ = u.shape
    D, N = sd["A_log"].shape
    R = sd["dt_proj.weight"].shape[1]
    W = sd["conv1d.weight"].shape[-1]
    x, z = (u @ sd["in_proj.weight"].T).chunk(2, dim=-1)
    x = F.conv1d(x.transpose(1, 2), sd["conv1d.weight"], sd.get("conv1d.bias"), padding=W - 1, groups=D)[..., :T]
    x = F.silu(x).transpose(1, 2)  # [B, T, D]
    dt, Bm, Cm = (x @ sd["x_proj.weight"].T).split([R, N, N], dim=-1)
    delta = F.softplus(dt @ sd["dt_proj.weight"].T + sd["dt_proj.bias"])  # [B, T, D]
    A = -torch.exp(sd["A_log"])  # [D, N]
    h = u.new_zeros(Bsz, D, N)
    ys = []
    for t in range(T):
        h = torch.exp(delta[:, t, :, None] * A) * h + delta[:, t, :, None] * Bm[:, t, None, :] * x[:, t, :, None]
        ys.append((h * Cm[:, t, None, :]).sum(-1) + sd["D"] * x[:, t])
    y = torch.stack(ys, dim=1)
    return (y * F.silu(z)) @ sd["out_proj.weight"].T


@pytest.mark.parametrize("conv_bias", [True, False])
@pytest.mark.parametrize(("d_model", "d_state", "d_conv", "expand"), [(16, 8, 4, 2), (32, 16, 3, 1)])
def test_converted_mamba_equals_mamba_ssm_reference(conv_bias, d_model, d_state, d_conv, expand):
    sd = mamba_ssm_state_dict(d_model, d_state, d_conv, expand, conv_bias)
    layer = from_mamba_ssm_mamba(sd, chunk_size=8).double()
    assert layer.discretization == "simple"
    u = torch.randn(2, 37, d_model, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    expected = mamba_ssm_reference(sd, u)
    got, _ = layer(u)
    torch.testing.assert_close(got, expected, rtol=1e-10, atol=1e-10)
    steps = [layer(u[:, :20])]  # prefill, then the recurrent steps: the decoding path agrees too
    state = steps[0][1]
    outs = [steps[0][0]]
    for t in range(20, 37):
        o, state = layer(u[:, t:t + 1], state)
        outs.append(o)
    torch.testing.assert_close(torch.cat(outs, 1), expected, rtol=1e-10, atol=1e-10)


def test_regmem_s_default_zoh_differs_from_mamba_ssm_by_the_discretisation_of_b():
    """The convention the converter bridges: with zoh (regmem's default) the same weights give other outputs."""
    sd = mamba_ssm_state_dict()
    layer = from_mamba_ssm_mamba(sd).double()
    u = torch.randn(1, 16, 16, dtype=torch.float64, generator=torch.Generator().manual_seed(2))
    expected = mamba_ssm_reference(sd, u)
    layer.discretization = "zoh"
    relative = (layer(u)[0] - expected).norm() / expected.norm()
    assert relative > 1e-3


def test_unknown_or_missing_keys_are_refused():
    sd = mamba_ssm_state_dict()
    with pytest.raises(ValueError, match=r"keys mamba_ssm.Mamba's converter does not know: \['in_proj.bias'\]"):
        from_mamba_ssm_mamba({**sd, "in_proj.bias": torch.zeros(64)})
    with pytest.raises(ValueError, match=r"lacks mamba_ssm.Mamba's keys \['A_log'\]"):
        from_mamba_ssm_mamba({k: v for k, v in sd.items() if k != "A_log"})
    with pytest.raises(ValueError, match="upstream must be one of"):
        convert("mamba_ssm.Nope", sd)
