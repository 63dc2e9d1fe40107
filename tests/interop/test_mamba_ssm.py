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


def assert_forward_and_decoding(layer, u, expected, *, prefill: int):
    """The layer's full forward, and a prefill of `prefill` tokens followed by one-token steps, both equal
    `expected` to 1e-10."""
    torch.testing.assert_close(layer(u)[0], expected, rtol=1e-10, atol=1e-10)
    outs, state = layer(u[:, :prefill])
    outs = [outs]
    for t in range(prefill, u.shape[1]):
        o, state = layer(u[:, t:t + 1], state)
        outs.append(o)
    torch.testing.assert_close(torch.cat(outs, 1), expected, rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("conv_bias", [True, False])
@pytest.mark.parametrize(("d_model", "d_state", "d_conv", "expand"), [(16, 8, 4, 2), (32, 16, 3, 1)])
def test_converted_mamba_equals_mamba_ssm_reference(conv_bias, d_model, d_state, d_conv, expand):
    sd = mamba_ssm_state_dict(d_model, d_state, d_conv, expand, conv_bias)
    layer = from_mamba_ssm_mamba(sd, chunk_size=8).double()
    assert layer.discretization == "simple"
    u = torch.randn(2, 37, d_model, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    expected = mamba_ssm_reference(sd, u)
    assert_forward_and_decoding(layer, u, expected, prefill=20)


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


def mamba2_state_dict(d_model=16, H=4, P=8, N=8, G=2, W=4, seed=0) -> dict:
    """Random weights under mamba_ssm Mamba2's names and shapes (d_ssm = d_inner = H P, D per head)."""
    g = torch.Generator().manual_seed(seed)
    d_inner, conv_dim = H * P, H * P + 2 * G * N
    return {"in_proj.weight": torch.randn(2 * d_inner + 2 * G * N + H, d_model, generator=g) / d_model**0.5,
            "conv1d.weight": torch.randn(conv_dim, 1, W, generator=g) / W**0.5,
            "conv1d.bias": torch.randn(conv_dim, generator=g) * 0.1,
            "dt_bias": torch.log(torch.expm1(torch.rand(H, generator=g) * 0.09 + 0.01)),
            "A_log": torch.log(torch.rand(H, generator=g) * 15 + 1), "D": torch.randn(H, generator=g),
            "norm.weight": 1 + 0.1 * torch.randn(d_inner, generator=g),
            "out_proj.weight": torch.randn(d_model, d_inner, generator=g) / d_inner**0.5}


def mamba2_reference(sd: dict, u: torch.Tensor, G: int, norm_before_gate: bool, eps: float = 1e-5) -> torch.Tensor:
    """mamba_ssm's Mamba2 forward (reference path): in_proj -> z, xBC, dt; conv1d + silu on xBC; x, B, C; dt =
    softplus(dt + dt_bias); per head h of group h // (H / G): S_t = exp(dt A) S_{t-1} + dt x_t B_t^T,
    y_t = S_t C_t + D x_t; RMSNormGated over groups of d_inner / G channels; out_proj."""
    sd = {k: v.double() for k, v in sd.items()}
    T = u.shape[1]
    H, d_inner = sd["A_log"].shape[0], sd["out_proj.weight"].shape[1]
    P, W = d_inner // H, sd["conv1d.weight"].shape[-1]
    N = (sd["conv1d.weight"].shape[0] - d_inner) // (2 * G)
    z, xbc, dt = (u @ sd["in_proj.weight"].T).split([d_inner, d_inner + 2 * G * N, H], dim=-1)
    xbc = F.conv1d(xbc.transpose(1, 2), sd["conv1d.weight"], sd["conv1d.bias"], padding=W - 1,
                   groups=xbc.shape[-1])[..., :T]
    x, Bm, Cm = F.silu(xbc).transpose(1, 2).split([d_inner, G * N, G * N], dim=-1)
    x, Bm, Cm = x.unflatten(-1, (H, P)), Bm.unflatten(-1, (G, N)), Cm.unflatten(-1, (G, N))
    dt = F.softplus(dt + sd["dt_bias"])  # [B, T, H]
    A = -torch.exp(sd["A_log"])
    S = u.new_zeros(u.shape[0], H, P, N)
    ys = []
    for t in range(T):
        Bt, Ct = Bm[:, t].repeat_interleave(H // G, 1), Cm[:, t].repeat_interleave(H // G, 1)  # [B, H, N]
        S = torch.exp(dt[:, t] * A)[..., None, None] * S + (dt[:, t, :, None] * x[:, t])[..., None] * Bt[:, :, None]
        ys.append((S * Ct[:, :, None]).sum(-1) + sd["D"][:, None] * x[:, t])
    y = torch.stack(ys, 1).flatten(-2)  # [B, T, d_inner]
    if not norm_before_gate:
        y = y * F.silu(z)
    grouped = y.unflatten(-1, (G, -1))
    y = (grouped * torch.rsqrt(grouped.pow(2).mean(-1, keepdim=True) + eps)).flatten(-2) * sd["norm.weight"]
    if norm_before_gate:
        y = y * F.silu(z)
    return y @ sd["out_proj.weight"].T


@pytest.mark.parametrize(("G", "norm_before_gate"), [(1, False), (2, False), (2, True)])
def test_converted_mamba2_equals_mamba_ssm_reference(G, norm_before_gate):
    sd = mamba2_state_dict(G=G)
    layer = convert("mamba_ssm.Mamba2", sd, ngroups=G, norm_before_gate=norm_before_gate, chunk_size=8).double()
    u = torch.randn(2, 27, 16, dtype=torch.float64, generator=torch.Generator().manual_seed(3))
    assert_forward_and_decoding(layer, u, mamba2_reference(sd, u, G, norm_before_gate), prefill=20)


def test_mamba2_options_regmem_cannot_express_are_refused():
    sd = mamba2_state_dict()
    with pytest.raises(ValueError, match="D_has_hdim=False"):
        convert("mamba_ssm.Mamba2", {**sd, "D": torch.ones(32)}, ngroups=2)
    with pytest.raises(ValueError, match=r"lacks mamba_ssm.Mamba2's keys \['norm.weight'\]"):
        convert("mamba_ssm.Mamba2", {k: v for k, v in sd.items() if k != "norm.weight"}, ngroups=2)
