"""fla's GatedDeltaNet, DeltaNet and GatedLinearAttention -> regmem (regmem/interop/fla.py): state dicts built by
fla's documented key names and shapes, converted, compute what fla's layers compute (written out here token by token
from their forward passes: conv + silu, L2 norm, gates, the recurrence, RMSNorm ⊙ silu gate), in float64.

With the L2 norm written as regmem's (x / |x|) the outputs agree to round-off; with fla's (x / sqrt(|x|^2 + 1e-6))
they differ by its epsilon, ~1e-6 relative (docs/interop.md)."""

import pytest
import torch
import torch.nn.functional as F

from regmem.interop import convert, from_fla_deltanet, from_fla_gated_deltanet, from_fla_gla

FLA_EPS = 1e-6  # fla's l2norm: x / sqrt(sum x^2 + eps)


def _randn(g, *shape, scale=1.0):
    return torch.randn(*shape, generator=g) * scale


def gdn_state_dict(d=32, H=2, HV=2, K=16, V=32, W=4, gate=True, conv_bias=False, seed=0) -> dict:
    g = torch.Generator().manual_seed(seed)
    sd = {"A_log": torch.log(torch.rand(HV, generator=g) * 15 + 1), "dt_bias": _randn(g, HV, scale=0.5),
          "q_proj.weight": _randn(g, H * K, d, scale=d**-0.5), "k_proj.weight": _randn(g, H * K, d, scale=d**-0.5),
          "v_proj.weight": _randn(g, HV * V, d, scale=d**-0.5), "a_proj.weight": _randn(g, HV, d, scale=d**-0.5),
          "b_proj.weight": _randn(g, HV, d, scale=d**-0.5), "o_norm.weight": 1 + _randn(g, V, scale=0.1),
          "o_proj.weight": _randn(g, d, HV * V, scale=(HV * V) ** -0.5)}
    for name, rows in (("q", H * K), ("k", H * K), ("v", HV * V)):
        sd[f"{name}_conv1d.weight"] = _randn(g, rows, 1, W, scale=0.5)
        if conv_bias:
            sd[f"{name}_conv1d.bias"] = _randn(g, rows, scale=0.1)
    if gate:
        sd["g_proj.weight"] = _randn(g, HV * V, d, scale=d**-0.5)
    return sd


def _conv_silu(x, sd, name):
    w = sd[f"{name}_conv1d.weight"]
    out = F.conv1d(x.transpose(1, 2), w, sd.get(f"{name}_conv1d.bias"), padding=w.shape[-1] - 1, groups=w.shape[0])
    return F.silu(out[..., :x.shape[1]]).transpose(1, 2)


def _l2(x, eps):
    return x / torch.sqrt((x * x).sum(-1, keepdim=True) + eps)


def _output(o, x, sd, norm_key, eps=1e-5):
    """RMSNorm over each head's values with one weight for all heads, times silu(g_proj x) if gated; o_proj."""
    o = o * torch.rsqrt(o.pow(2).mean(-1, keepdim=True) + eps) * sd[norm_key]
    if "g_proj.weight" in sd:
        o = o * F.silu(x @ sd["g_proj.weight"].T).unflatten(-1, o.shape[-2:])
    return o.flatten(-2) @ sd["o_proj.weight"].T


def fla_delta_reference(sd, x, H, *, gated, allow_neg_eigval=False, l2_eps=FLA_EPS):
    """fla's GatedDeltaNet (gated) or DeltaNet forward, from its layer code."""
    sd = {k: v.double() for k, v in sd.items()}
    HV = sd["A_log"].shape[0] if gated else H
    q, k, v = (_conv_silu(x @ sd[f"{n}_proj.weight"].T, sd, n) for n in "qkv")
    q, k, v = q.unflatten(-1, (H, -1)), k.unflatten(-1, (H, -1)), v.unflatten(-1, (HV, -1))
    q, k = _l2(q, l2_eps).repeat_interleave(HV // H, 2), _l2(k, l2_eps).repeat_interleave(HV // H, 2)
    beta = torch.sigmoid(x @ sd["b_proj.weight"].T) if "b_proj.weight" in sd else x.new_ones(*x.shape[:2], HV)
    beta = beta * (2 if allow_neg_eigval else 1)
    if gated:
        g = -torch.exp(sd["A_log"]) * F.softplus(x @ sd["a_proj.weight"].T + sd["dt_bias"])
    scale = q.shape[-1] ** -0.5
    S = x.new_zeros(x.shape[0], HV, q.shape[-1], v.shape[-1])
    outs = []
    for t in range(x.shape[1]):
        if gated:
            S = torch.exp(g[:, t, :, None, None]) * S
        kt, vt = k[:, t], v[:, t]
        u = beta[:, t, :, None] * (vt - torch.einsum("bhkv,bhk->bhv", S, kt))
        S = S + kt[..., None] * u[..., None, :]
        outs.append(torch.einsum("bhkv,bhk->bhv", S, scale * q[:, t]))
    return _output(torch.stack(outs, 1), x, sd, "o_norm.weight")


@pytest.mark.parametrize(("H", "HV", "gate", "conv_bias", "neg"), [
    (2, 2, True, False, False), (2, 4, True, True, True), (2, 2, False, False, False)])
def test_gated_deltanet_equals_fla_s_math(H, HV, gate, conv_bias, neg):
    sd = gdn_state_dict(H=H, HV=HV, gate=gate, conv_bias=conv_bias)
    layer = from_fla_gated_deltanet(sd, num_heads=H, allow_neg_eigval=neg, chunk_size=8).double()
    x = torch.randn(2, 29, 32, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    got = layer(x)[0]
    exact = fla_delta_reference(sd, x, H, gated=True, allow_neg_eigval=neg, l2_eps=0.0)
    torch.testing.assert_close(got, exact, rtol=1e-10, atol=1e-10)
    with_eps = fla_delta_reference(sd, x, H, gated=True, allow_neg_eigval=neg)
    assert 0 < (got - with_eps).abs().max() < 1e-5 * with_eps.abs().max()
    outs, state = layer(x[:, :20])  # the decoding path: a prefill, then one token at a time
    outs = [outs]
    for t in range(20, x.shape[1]):
        o, state = layer(x[:, t:t + 1], state)
        outs.append(o)
    torch.testing.assert_close(torch.cat(outs, 1), exact, rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("beta", [True, False])
def test_deltanet_equals_fla_s_math(beta):
    sd = gdn_state_dict(H=4, HV=4, K=8, V=8, gate=False)
    sd = {k: v for k, v in sd.items() if k not in ("A_log", "dt_bias", "a_proj.weight")}
    if not beta:
        del sd["b_proj.weight"]
    layer = from_fla_deltanet(sd, num_heads=4).double()
    x = torch.randn(1, 21, 32, dtype=torch.float64, generator=torch.Generator().manual_seed(2))
    exact = fla_delta_reference({**sd, "A_log": torch.zeros(4)}, x, 4, gated=False, l2_eps=0.0)
    torch.testing.assert_close(layer(x)[0], exact, rtol=1e-10, atol=1e-10)


def gla_state_dict(d=32, H=4, Hkv=2, K=8, V=16, rank=4, conv=False, gate=True, seed=0) -> dict:
    g = torch.Generator().manual_seed(seed)
    sd = {"q_proj.weight": _randn(g, H * K, d, scale=d**-0.5), "k_proj.weight": _randn(g, Hkv * K, d, scale=d**-0.5),
          "v_proj.weight": _randn(g, Hkv * V, d, scale=d**-0.5), "gk_proj.0.weight": _randn(g, rank, d, scale=d**-0.5),
          "gk_proj.1.weight": _randn(g, Hkv * K, rank, scale=rank**-0.5), "gk_proj.1.bias": _randn(g, Hkv * K),
          "o_proj.weight": _randn(g, d, H * V, scale=(H * V) ** -0.5)}
    if gate:
        sd["g_proj.weight"], sd["g_norm_swish_gate.weight"] = _randn(g, H * V, d, scale=d**-0.5), 1 + _randn(g, V)
    else:
        sd["g_norm.weight"] = 1 + _randn(g, V, scale=0.1)
    if conv:
        for name, rows in (("q", H * K), ("k", Hkv * K), ("v", Hkv * V)):
            sd[f"{name}_conv1d.weight"] = _randn(g, rows, 1, 4, scale=0.5)
    return sd


def fla_gla_reference(sd, x, H, normalizer=16):
    sd = {k: v.double() for k, v in sd.items()}
    q, k, v = (x @ sd[f"{n}_proj.weight"].T for n in "qkv")
    if "q_conv1d.weight" in sd:
        q, k, v = (_conv_silu(t, sd, n) for t, n in zip((q, k, v), "qkv", strict=True))
    K = q.shape[-1] // H
    Hkv = k.shape[-1] // K
    gk = F.logsigmoid(x @ sd["gk_proj.0.weight"].T @ sd["gk_proj.1.weight"].T + sd["gk_proj.1.bias"]) / normalizer
    q = q.unflatten(-1, (H, K))
    k, v, gk = (t.unflatten(-1, (Hkv, -1)).repeat_interleave(H // Hkv, 2) for t in (k, v, gk))
    S = x.new_zeros(x.shape[0], H, K, v.shape[-1])
    outs = []
    for t in range(x.shape[1]):
        S = torch.exp(gk[:, t, :, :, None]) * S + k[:, t, :, :, None] * v[:, t, :, None, :]
        outs.append(torch.einsum("bhkv,bhk->bhv", S, K**-0.5 * q[:, t]))
    norm = "g_norm_swish_gate.weight" if "g_norm_swish_gate.weight" in sd else "g_norm.weight"
    return _output(torch.stack(outs, 1), x, sd, norm)


@pytest.mark.parametrize(("Hkv", "conv", "gate"), [(4, False, True), (2, False, True), (2, True, False)])
def test_gla_equals_fla_s_math(Hkv, conv, gate):
    sd = gla_state_dict(Hkv=Hkv, conv=conv, gate=gate)
    layer = convert("fla.layers.GatedLinearAttention", sd, num_heads=4, chunk_size=8).double()
    x = torch.randn(2, 19, 32, dtype=torch.float64, generator=torch.Generator().manual_seed(3))
    torch.testing.assert_close(layer(x)[0], fla_gla_reference(sd, x, 4), rtol=1e-10, atol=1e-10)


def test_what_regmem_cannot_express_is_refused_by_name():
    sd = gdn_state_dict()
    with pytest.raises(ValueError, match="without short convolutions .* applies silu"):
        from_fla_gated_deltanet({k: v for k, v in sd.items() if "conv1d" not in k}, num_heads=2)
    with pytest.raises(ValueError, match="does not know: \\['extra'\\]"):
        from_fla_gated_deltanet({**sd, "extra": torch.zeros(1)}, num_heads=2)
    with pytest.raises(ValueError, match="qk_activation 'relu'"):
        from_fla_deltanet(sd, num_heads=2, qk_activation="relu")
    with pytest.raises(ValueError, match="feature_map 'relu'"):
        from_fla_gla(gla_state_dict(), num_heads=4, feature_map="relu")
