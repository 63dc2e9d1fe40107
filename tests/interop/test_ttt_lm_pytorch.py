"""Official TTT -> regmem (regmem/interop/ttt_lm_pytorch.py): a state dict built by ttt-lm-pytorch's key names and
shapes (`TTTBase`, `TTTLinear`, `TTTMLP` in its ttt.py), converted, computes what official TTT's layer computes,
written out here token by token from its equations in float64: inner gradients by autograd at each mini-batch's
start, the position factors, RoPE on neighbouring channel pairs at t mod C, post_norm over all heads, the
gelu_tanh gate."""

import pytest
import torch
import torch.nn.functional as F

from regmem.interop import convert, from_ttt_lm_pytorch_linear, from_ttt_lm_pytorch_mlp


def ttt_state_dict(kind="linear", width=16, heads=2, mini_batch=4, gate=True, seed=0) -> dict:
    """Random weights under official TTT's names and shapes; token offsets small enough that every c_i > 0."""
    g = torch.Generator().manual_seed(seed)
    D = width // heads
    r = lambda *shape, s=1.0: torch.randn(*shape, generator=g, dtype=torch.float64) * s  # noqa: E731
    sd = {f"{p}.weight": r(width, width, s=width ** -0.5) for p in ("q_proj", "k_proj", "v_proj", "o_proj")}
    sd |= {"learnable_ttt_lr_weight": r(heads, width, 1, s=0.3), "learnable_ttt_lr_bias": r(heads, 1, s=0.3),
           "learnable_token_idx": r(mini_batch, s=0.05), "ttt_norm_weight": 1 + r(heads, D, s=0.1),
           "ttt_norm_bias": r(heads, D, s=0.1), "post_norm.weight": 1 + r(width, s=0.1),
           "post_norm.bias": r(width, s=0.1)}
    if kind == "linear":
        sd |= {"W1": r(heads, D, D, s=0.3), "b1": r(heads, 1, D, s=0.1)}
    else:
        sd |= {"W1": r(heads, D, 4 * D, s=0.3), "b1": r(heads, 1, 4 * D, s=0.1),
               "W2": r(heads, 4 * D, D, s=0.15), "b2": r(heads, 1, D, s=0.1)}
    if gate:
        sd["g_proj.weight"] = r(width, width, s=width ** -0.5)
    return sd


def rope_pairs(x, positions, base=10000.0):
    """x: [T, D]; channels (2i, 2i + 1) rotated by positions * base^(-2i / D) (official TTT's permute_qk layout)."""
    D = x.shape[-1]
    angles = positions[:, None].double() * base ** (-torch.arange(0, D, 2, dtype=torch.float64) / D)
    z = torch.complex(x[:, 0::2], x[:, 1::2]) * torch.polar(torch.ones_like(angles), angles)
    return torch.stack([z.real, z.imag], dim=-1).flatten(-2)


def inner(params, z, ln):
    """f(z) = z + LN(g(z)) per head; params (W1, b1[, W2, b2]); g linear, or an MLP with gelu_tanh."""
    h = z @ params[0] + params[1][0]
    if len(params) == 4:
        h = F.gelu(h, approximate="tanh") @ params[2] + params[3][0]
    return z + F.layer_norm(h, h.shape[-1:], ln[0], ln[1], eps=1e-6)


def official_ttt(sd: dict, x: torch.Tensor, *, base_lr=1.0) -> torch.Tensor:
    """Official TTT's layer on x [B, T, W], token by token (module docstring)."""
    heads, width = sd["learnable_ttt_lr_weight"].shape[:2]
    D, C = width // heads, sd["learnable_token_idx"].shape[0]
    Bsz, T, _ = x.shape
    names = ["W1", "b1", "W2", "b2"] if "W2" in sd else ["W1", "b1"]
    q, k, v = (x @ sd[f"{p}_proj.weight"].T for p in "qkv")
    c = (1.0 / torch.arange(1, C + 1, dtype=torch.float64) + sd["learnable_token_idx"]).clamp(min=0)
    positions = torch.arange(T) % C
    out = torch.zeros(Bsz, T, width, dtype=torch.float64)
    for b in range(Bsz):
        for h in range(heads):
            cols = slice(h * D, (h + 1) * D)
            qh, kh, vh = rope_pairs(q[b, :, cols], positions), rope_pairs(k[b, :, cols], positions), v[b, :, cols]
            lr = torch.sigmoid(x[b] @ sd["learnable_ttt_lr_weight"][h, :, 0] + sd["learnable_ttt_lr_bias"][h, 0])
            eta = base_lr * lr / D  # [T]
            ln = (sd["ttt_norm_weight"][h], sd["ttt_norm_bias"][h])
            theta = [sd[n][h].clone() for n in names]
            for start in range(0, T, C):
                grads = []
                for j in range(start, min(start + C, T)):
                    p = [t.clone().requires_grad_() for t in theta]
                    loss = 0.5 * (inner(p, kh[j], ln) - vh[j]).pow(2).sum()
                    grads.append(torch.autograd.grad(loss, p))
                for i in range(len(grads)):
                    step = [sum(eta[start + j] * grads[j][n] for j in range(i + 1)) for n in range(len(theta))]
                    read = [t - c[i] * s for t, s in zip(theta, step, strict=True)]
                    out[b, start + i, cols] = inner(read, qh[start + i], ln)
                theta = [t - c[len(grads) - 1] * s for t, s in zip(theta, step, strict=True)]
    y = F.layer_norm(out, (width,), sd["post_norm.weight"], sd["post_norm.bias"], eps=1e-6)
    if "g_proj.weight" in sd:
        y = y * F.gelu(x @ sd["g_proj.weight"].T, approximate="tanh")
    return y @ sd["o_proj.weight"].T


@pytest.mark.parametrize("gate", [True, False])
@pytest.mark.parametrize(("kind", "convert_fn"), [("linear", from_ttt_lm_pytorch_linear),
                                                  ("mlp", from_ttt_lm_pytorch_mlp)])
def test_converted_ttt_equals_official_ttt(kind, convert_fn, gate):
    """T = 11 with mini-batches of 4: two full ones and a remainder of 3, as official TTT splits it."""
    sd = ttt_state_dict(kind, gate=gate)
    layer = convert_fn(sd)
    x = torch.randn(2, 11, 16, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    expected = official_ttt(sd, x)
    torch.testing.assert_close(layer(x)[0], expected, rtol=1e-10, atol=1e-10)
    outs, state = layer(x[:, :6])  # a prefill that ends inside a mini-batch, then one token at a time
    outs = [outs]
    for t in range(6, 11):
        o, state = layer(x[:, t:t + 1], state)
        outs.append(o)
    torch.testing.assert_close(torch.cat(outs, 1), expected, rtol=1e-10, atol=1e-10)


def test_each_bridged_convention_changes_the_function():
    """Without RoPE, with regmem's per-head output norm, or with a silu gate the converted layer computes another
    function: each option the converter sets is needed."""
    sd = ttt_state_dict("linear")
    x = torch.randn(1, 8, 16, dtype=torch.float64, generator=torch.Generator().manual_seed(2))
    expected = official_ttt(sd, x)
    for change in ({"rotary": None}, {"gate_activation": "silu"}):
        layer = from_ttt_lm_pytorch_linear(sd)
        for name, value in change.items():
            setattr(layer, name, value)
        assert (layer(x)[0] - expected).abs().max() > 1e-3, change


def test_converter_refuses_unknown_missing_and_share_qk_keys():
    sd = ttt_state_dict("linear")
    with pytest.raises(ValueError, match="does not know"):
        from_ttt_lm_pytorch_linear({**sd, "extra.weight": torch.zeros(1)})
    with pytest.raises(ValueError, match="lacks"):
        from_ttt_lm_pytorch_linear({k: v for k, v in sd.items() if k != "post_norm.bias"})
    with pytest.raises(ValueError, match="share_qk"):
        from_ttt_lm_pytorch_linear({**sd, "conv_q.weight": torch.zeros(16, 1, 4)})
    with pytest.raises(ValueError, match="W1 must have shape"):
        from_ttt_lm_pytorch_linear({**sd, "W1": torch.zeros(2, 8, 9)})
    with pytest.raises(ValueError, match="last factor"):
        from_ttt_lm_pytorch_linear({**sd, "learnable_token_idx": torch.full((4,), -1.0)})
    with pytest.raises(ValueError, match="upstream must be one of"):
        convert("ttt.TTTLinear", sd)
    assert convert("ttt_lm_pytorch.TTTMLP", ttt_state_dict("mlp")).inner_model.activation == "gelu_tanh"
