"""The FFNs as associative memories (regmem/layers/ffn.py) against Zhong et al., arXiv:2505.19488, Sec. 2.1:

- the eq. 14 FFN is the sum over its memories, sum_i v_i kappa(k_i . x), for kappa = ReLU and eq. 16's SoLU kernel,
  and probed with its own keys its retrieval noise is eq. 15's SNR^-1 = (m - 1) / (2 d);
- the MoE FFN (eq. 24) with one expert and top-1 is the plain FFN (ReLU experts) or the LM's SwiGLU (SwiGLU
  experts); its router keeps exactly the k most probable experts, and the layer is the literal sum over experts;
- the multi-head FFN with one head (and W_O = I) is the plain FFN; with several, it is the per-head memory sum;
- an LM with each FFN choice trains (gradients reach every parameter), decodes with states like a full recompute
  and round-trips through save/load; bad config values raise ValueError naming the field.
"""

import math

import pytest
import torch

from regmem.layers.ffn import MemoryFFN, MoEFFN, MultiHeadFFN
from regmem.models import LM, LMConfig, MemoryFFNConfig, MoEConfig, MultiHeadFFNConfig, SwiGLU, SwiGLUConfig

D, M = 8, 24


def _x(*shape, seed: int = 1) -> torch.Tensor:
    return torch.randn(*shape, dtype=torch.float64, generator=torch.Generator().manual_seed(seed))


def _close(actual, expected, what):
    torch.testing.assert_close(actual, expected, rtol=1e-12, atol=1e-14, msg=lambda m: f"{what}: {m}")


def _kappa(s: float, activation: str, tau: float) -> torch.Tensor:
    """Eq. 14's ReLU kernel or eq. 16's SoLU kernel, on one dot product."""
    return torch.clamp(s, min=0.0) if activation == "relu" else s * torch.exp(s / tau)


@pytest.mark.parametrize("activation", ["relu", "solu"])
def test_memory_ffn_is_the_sum_over_its_memories(activation):
    torch.manual_seed(0)
    ffn = MemoryFFN(D, M, activation=activation, temperature=2.0 if activation == "solu" else None).double()
    with torch.no_grad():
        ffn.up.weight.normal_()  # keys of norm ~ sqrt(D): many slots fire, SoLU far from linear
        keys, values = ffn.memories()
        assert keys.shape == values.shape == (M, D)
        x = _x(3, 5, D)
        expected = sum(values[i] * _kappa(x @ keys[i], activation, 2.0).unsqueeze(-1) for i in range(M))
        _close(ffn(x), expected, "FFN(x) vs sum_i v_i kappa(k_i . x)")


def test_probing_the_relu_ffn_with_its_keys_gives_eq_15_noise():
    """Keys and values of fixed norm sqrt(d), probe x = k_i: FFN(k_i) = |k_i|^2 v_i + noise, and the ratio of summed
    noise to summed signal energy is (m - 1) / (2 d) (eq. 15, exact form), within 10% over 8 x 256 probes."""
    m, d, num, den = 256, 64, 0.0, 0.0
    for seed in range(8):
        g = torch.Generator().manual_seed(seed)
        keys, values = (torch.randn(m, d, dtype=torch.float64, generator=g) for _ in range(2))
        keys, values = (w / w.norm(dim=1, keepdim=True) * math.sqrt(d) for w in (keys, values))
        ffn = MemoryFFN(d, m).double()
        with torch.no_grad():
            ffn.up.weight.copy_(keys)
            ffn.down.weight.copy_(values.t())
            out = ffn(keys)  # [m, d]: probe i is key i
        signal = keys.pow(2).sum(dim=1, keepdim=True) * values  # c v_i with c = relu(k_i . k_i)
        num += float((out - signal).pow(2).sum())
        den += float(signal.pow(2).sum())
    assert num / den == pytest.approx((m - 1) / (2 * d), rel=0.1)


def test_moe_with_one_expert_and_top1_is_the_plain_ffn():
    torch.manual_seed(0)
    moe, plain = MoEFFN(D, M, 1, 1).double(), MemoryFFN(D, M).double()
    plain.load_state_dict({"up.weight": moe.up.weight, "down.weight": moe.down.weight})
    swiglu_moe, swiglu = MoEFFN(D, M, 1, 1, expert="swiglu").double(), SwiGLU(D, M).double()
    swiglu.load_state_dict({"gate_up.weight": swiglu_moe.up.weight, "down.weight": swiglu_moe.down.weight})
    x = _x(3, 5, D)
    with torch.no_grad():
        assert torch.equal(moe(x), plain(x))
        assert torch.equal(swiglu_moe(x), swiglu(x))


@pytest.mark.parametrize("top_k", [1, 2, 4])
def test_router_keeps_the_k_most_probable_experts_and_the_layer_is_the_sum_over_experts(top_k):
    torch.manual_seed(0)
    moe = MoEFFN(D, 6, 4, top_k).double()
    with torch.no_grad():
        moe.router.weight.normal_()
        x = _x(2, 7, D)
        gates = moe.route(x)  # [2, 7, 4]
        probs = torch.softmax(moe.router(x), dim=-1)
        assert torch.equal((gates > 0).sum(-1), torch.full((2, 7), top_k))
        kept_min = probs.masked_fill(gates == 0, 2.0).amin(-1)
        dropped_max = probs.masked_fill(gates > 0, -1.0).amax(-1)
        assert torch.all(kept_min > dropped_max), "a dropped expert is more probable than a kept one"
        assert torch.equal(gates[gates > 0], probs[gates > 0])
        expected = 0.0  # eq. 24: sum_e g_e(x) W_V^(e)T relu(W_K^(e) x), expert e owning rows [6e, 6e + 6)
        for e in range(4):
            w_k, w_v = moe.up.weight[6 * e:6 * e + 6], moe.down.weight[:, 6 * e:6 * e + 6]
            expected = expected + gates[..., e:e + 1] * (torch.relu(x @ w_k.t()) @ w_v.t())
        _close(moe(x), expected, "MoE vs sum over experts")


def test_multihead_ffn_with_one_head_is_the_plain_ffn():
    torch.manual_seed(0)
    multi, plain = MultiHeadFFN(D, M, 1).double(), MemoryFFN(D, M).double()
    plain.load_state_dict({"up.weight": multi.up.weight, "down.weight": multi.down.weight})
    with torch.no_grad():
        multi.o_proj.weight.copy_(torch.eye(D))
        x = _x(3, 5, D)
        _close(multi(x), plain(x), "one head")


@pytest.mark.parametrize("activation", ["relu", "solu"])
def test_multihead_ffn_is_the_per_head_memory_sum(activation):
    """o_h = sum_i v_{i,h} kappa(k_{i,h} . x_h) with slot i's key and value cut into 4 slices, then W_O."""
    torch.manual_seed(0)
    multi = MultiHeadFFN(D, M, 4, activation=activation).double()
    with torch.no_grad():
        multi.up.weight.normal_()
        x = _x(3, 5, D)
        keys, values = multi.up.weight, multi.down.weight.t()  # [M, D] each
        heads = []
        for h in range(4):
            cut = slice(2 * h, 2 * h + 2)
            heads.append(sum(values[i, cut] * _kappa(x[..., cut] @ keys[i, cut], activation, math.sqrt(2))
                             .unsqueeze(-1) for i in range(M)))
        _close(multi(x), multi.o_proj(torch.cat(heads, dim=-1)), "per-head memories")


FFN_CASES = {
    "relu": {"ffn": "relu"},
    "relu-solu": {"ffn": MemoryFFNConfig(activation="solu")},
    "moe-relu": {"ffn": MoEConfig(experts=4, top_k=2)},
    "moe-swiglu-top1": {"ffn": MoEConfig(expert="swiglu", top_k=1)},
    "multihead-solu": {"ffn": MultiHeadFFNConfig(heads=2, activation="solu", temperature=3.0)},
}


def _lm(options) -> LM:
    torch.manual_seed(0)
    return LM(LMConfig(vocab_size=40, d_model=32, n_layers=2, n_heads=4, mixer="fox,gla", **options))


@pytest.mark.parametrize("options", list(FFN_CASES.values()), ids=list(FFN_CASES))
def test_lm_with_each_ffn_trains_a_step(options):
    model = _lm(options).train()
    ids = torch.randint(0, 40, (2, 12), generator=torch.Generator().manual_seed(0))
    loss = torch.nn.functional.cross_entropy(model(ids[:, :-1]).flatten(0, 1), ids[:, 1:].flatten())
    loss.backward()
    assert torch.isfinite(loss)
    for name, p in model.named_parameters():
        assert p.grad is not None and p.grad.abs().sum() > 0, f"no gradient reaches {name}"
    before = {name: p.detach().clone() for name, p in model.named_parameters()}
    torch.optim.AdamW(model.parameters(), lr=1e-3).step()
    assert all(not torch.equal(before[name], p) for name, p in model.named_parameters())


@pytest.mark.parametrize("options", list(FFN_CASES.values()), ids=list(FFN_CASES))
def test_lm_with_each_ffn_generates_with_states_and_round_trips(options, tmp_path):
    model = _lm(options).eval()
    prompt = torch.randint(0, 40, (2, 7), generator=torch.Generator().manual_seed(0))
    out = model.generate(prompt, 5, temperature=0)
    expected = prompt
    with torch.no_grad():
        for _ in range(5):
            expected = torch.cat([expected, model(expected)[:, -1].argmax(-1, keepdim=True)], dim=1)
    assert torch.equal(out, expected)
    model.save_pretrained(tmp_path)
    loaded = LM.from_pretrained(tmp_path).eval()
    assert loaded.config == model.config
    assert torch.equal(loaded(prompt), model(prompt))


@pytest.mark.parametrize("build, field", [
    (lambda: LMConfig(vocab_size=10, ffn="mlp"), "ffn"),
    (lambda: MemoryFFNConfig(activation="gelu"), "activation"),
    (lambda: MoEConfig(expert="swiglu", activation="solu"), "activation"),
    (lambda: MemoryFFNConfig(activation="solu", temperature=0.0), "temperature"),
    (lambda: SwiGLUConfig(expansion=0.0), "expansion"),
    (lambda: LMConfig(vocab_size=10, d_model=32, ffn=MultiHeadFFNConfig(heads=3)), "ffn.heads"),
    (lambda: MultiHeadFFNConfig(heads=0), "heads"),
    (lambda: MoEConfig(experts=0), "experts"),
    (lambda: MoEConfig(top_k=0), "top_k"),
    (lambda: MoEConfig(experts=2, top_k=3), "top_k"),
    (lambda: MoEConfig(expert="gelu"), "expert"),
], ids=["ffn", "activation", "swiglu-experts-activation", "temperature", "expansion", "lm-heads", "heads", "experts",
        "top_k", "top_k-experts", "expert"])
def test_bad_config_values_raise_naming_the_field(build, field):
    with pytest.raises(ValueError, match=rf"^{field} must"):
        build()


@pytest.mark.parametrize("build, argument", [
    (lambda: MemoryFFN(D, 0), "hidden"),
    (lambda: MemoryFFN(D, M, activation="gelu"), "activation"),
    (lambda: MemoryFFN(D, M, activation="solu", temperature=-1.0), "temperature"),
    (lambda: MemoryFFN(D, M, activation="relu", temperature=2.0), "temperature"),  # tau is solu's alone
    (lambda: MultiHeadFFN(D, M, 2, temperature=2.0), "temperature"),
    (lambda: MoEFFN(D, 4, 2, 1, temperature=2.0), "temperature"),
    (lambda: MoEFFN(D, 4, 2, 3), "top_k"),
    (lambda: MoEFFN(D, 4, 2, 1, expert="gelu"), "expert"),
    (lambda: MoEFFN(D, 4, 2, 1, expert="swiglu", activation="solu"), "activation"),
    (lambda: MultiHeadFFN(D, M, 3), "n_heads"),
], ids=["hidden", "activation", "temperature", "relu-temperature", "multihead-relu-temperature",
        "moe-relu-temperature", "top_k", "expert", "swiglu-activation", "n_heads"])
def test_bad_layer_arguments_raise_naming_them(build, argument):
    with pytest.raises(ValueError, match=rf"^{argument} "):
        build()
