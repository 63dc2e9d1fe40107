"""Hope and Hope-Attention (Nested Learning, arXiv:2512.24695, Sec. 8.3, eqs. 94-97): "w/o CMS" is self-modifying
Titans (or attention) alone; one frozen CMS level is a SwiGLU on the mixer's output; q and k are unit vectors when
the memories use them; outputs are causal; every outer parameter, the CMS's initial levels included, gets a
gradient. The mixer contract (prefill + steps, padding, state size) is in test_mixers.py."""

import pytest
import torch

import regmem.nested.self_modifying as smt
from regmem.layers import HopeAttention, SelfModifyingTitans, SoftmaxAttention, build_mixer
from regmem.models import SwiGLU
from regmem.nested import CMSConfig, SelfModifyingConfig

D, H = 16, 2
SMALL = {"mini_batch": 2, "cms_chunk_sizes": (2, 4)}


def _x(B=2, T=9, seed=1):
    return torch.randn(B, T, D, dtype=torch.float64, generator=torch.Generator().manual_seed(seed))


def _hope(**kwargs):
    torch.manual_seed(0)
    options = {**SMALL, **kwargs}
    if not options.get("cms", True):  # without a CMS its options are errors
        options = {name: value for name, value in options.items() if not name.startswith("cms_")}
    return build_mixer("hope", D, H, **options).double()


@pytest.mark.parametrize("name,alone", [("hope", SelfModifyingTitans), ("hope_attention", SoftmaxAttention)])
def test_without_cms_it_is_the_inner_mixer(name, alone):
    torch.manual_seed(0)
    kwargs = {"mini_batch": 2} if name == "hope" else {"short_conv": 4}  # Hope-Attention's conv is on by default
    hope = build_mixer(name, D, H, cms=False).double() if name == "hope_attention" else build_mixer(
        name, D, H, cms=False, **kwargs).double()
    inner = alone(D, H, **kwargs).double()
    inner.load_state_dict(hope.state_dict())
    x = _x()
    torch.testing.assert_close(hope(x)[0], inner(x)[0], rtol=1e-12, atol=1e-12)


def test_hope_attention_with_one_frozen_level_is_attention_then_a_residual_swiglu():
    torch.manual_seed(0)
    hope = HopeAttention(D, H, cms_chunk_sizes=(4,), cms_lr=0.0, cms_hidden=8).double()
    attention = SoftmaxAttention(D, H, short_conv=4).double()
    attention.load_state_dict({k: v for k, v in hope.state_dict().items() if not k.startswith("cms.")})
    ffn, norm = SwiGLU(D, 8).double(), torch.nn.RMSNorm(D, eps=1e-5).double()
    with torch.no_grad():
        ffn.gate_up.weight.copy_(torch.cat([hope.cms.gate[0].T, hope.cms.up[0].T]))
        ffn.down.weight.copy_(hope.cms.down[0].T)
        norm.weight.copy_(hope.cms.norm_weight[0])
    x = _x()
    o, _ = attention(x)
    torch.testing.assert_close(hope(x)[0], o + ffn(norm(o)), rtol=1e-12, atol=1e-12)


def test_the_cms_and_each_ablation_flag_change_the_computation():
    x = _x()
    y = _hope()(x)[0]
    for flag in ({"cms": False}, {"cms_lr": 0.0}, {"dgd": False}, {"self_values": False}, {"weight_decay": False},
                 {"static": ("k",)},
                 {"adaptive_q": False}, {"momentum": False}, {"cms_variant": "independent"}):
        assert (_hope(**flag)(x)[0] - y).abs().max() > 1e-8, f"{flag} changed nothing"


def test_keys_and_queries_reach_the_memories_as_unit_vectors(monkeypatch):
    seen = []

    def spy(engine):
        def call(q, k, *args, **kwargs):
            seen.append((engine.__name__, q, k))
            return engine(q, k, *args, **kwargs)
        return call

    # T = 9 in mini-batches of 2: four whole ones run stacked (ttt_mini_batch), the last token the engine (ttt);
    # each as two calls, the five generators (not read: q None on the stacked path) and the wider main memory
    monkeypatch.setattr(smt, "ttt", spy(smt.ttt))
    monkeypatch.setattr(smt, "ttt_mini_batch", spy(smt.ttt_mini_batch))
    _hope(normalize_v=True)(_x())
    assert [name for name, _, _ in seen] == ["ttt_mini_batch"] * 8 + ["ttt"] * 2
    assert sum(q is None for _, q, _ in seen) == 4
    for _, q, k in seen:
        torch.testing.assert_close(k.norm(dim=-1), torch.ones_like(k[..., 0]))
        if q is not None:
            torch.testing.assert_close(q.norm(dim=-1), torch.ones_like(q[..., 0]))


@pytest.mark.parametrize("name", ["hope", "hope_attention"])
def test_causal(name):
    torch.manual_seed(0)
    mixer = build_mixer(name, D, H, **(SMALL if name == "hope" else {"cms_chunk_sizes": (2, 4)})).double()
    x = _x(1, 10)
    y, _ = mixer(x)
    for t in (0, 3, 6):
        changed = x.clone()
        changed[:, t + 1:] += 1.0
        torch.testing.assert_close(mixer(changed)[0][:, :t + 1], y[:, :t + 1], rtol=1e-10, atol=1e-10)


def test_gradients_reach_every_initial_state():
    hope = _hope(momentum=True)
    x = _x(T=12)
    hope(x)[0].square().sum().backward()
    for name, p in hope.named_parameters():
        assert p.grad is not None and p.grad.abs().sum() > 0, name


def test_the_layers_defaults_are_their_configs():
    """One set of defaults: SelfModifyingConfig's and CMSConfig's (regmem/nested), which the layers only read."""
    assert SelfModifyingTitans(D, H).config == SelfModifyingConfig()
    assert _hope().config == SelfModifyingConfig(mini_batch=2)
    assert build_mixer("hope", D, H).cms.config == CMSConfig()
    assert HopeAttention(D, H).cms.config == CMSConfig()
    assert SelfModifyingConfig().read == "updated" and SelfModifyingConfig().normalize_v  # the trained defaults


@pytest.mark.parametrize("name", ["hope", "hope_attention"])
def test_each_cms_option_is_that_field_of_the_cms_config(name):
    """The JSON form of mixer_kwargs ({"hope": {"cms_chunk_sizes": [2, 8], ...}}: lists for tuples) included."""
    options = {"chunk_sizes": [2, 8], "lr": [0.1, 0.0], "hidden": 12, "variant": "nested", "objective": "reconstruct",
               "step_rule": "explicit", "persistent": [True, True]}
    mixer = build_mixer(name, D, H, **{f"cms_{field}": value for field, value in options.items()})
    assert mixer.cms.config == CMSConfig(**options)


@pytest.mark.parametrize("name,options,match", [
    ("self_modifying_titans", {"chunk_size": 64}, "chunk_size"),  # was accepted and dropped
    ("hope", {"mini_batch": 2, "chunk_sizes": (2,)}, "chunk_sizes"),
    ("hope", {"cms": False, "cms_lr": 0.05}, "cms=False"),
    ("hope_attention", {"cms": False, "cms_chunk_sizes": (2,)}, "cms=False"),
    ("hope", {"read": "later"}, "read must"),
    ("hope", {"cms_variant": "chain"}, "variant must"),
    ("hope", {"cms_step_rule": "adam"}, "step_rule must"),
])
def test_options_a_layer_cannot_use_raise_value_error(name, options, match):
    with pytest.raises(ValueError, match=match):
        build_mixer(name, D, H, **options)


@pytest.mark.parametrize("scale", [1.0, 30.0])
def test_the_default_memories_stay_bounded_where_the_printed_step_overflows(scale):
    """Self-modifying Titans' six memories at init, 256 tokens: with the default proximal step they stay bounded at
    any input scale, with or without DGD; eq. 88 as printed (the explicit step with DGD, at the same eta_max 1 and
    momentum) overflows."""
    x = scale * _x(2, 256)
    for options, bounded in (({}, True), ({"dgd": True}, True), ({"step_rule": "explicit", "dgd": True}, False)):
        torch.manual_seed(0)
        _, (_, memories) = SelfModifyingTitans(D, H, **options).double()(x)
        largest = torch.stack([s.params.abs().max() for s in memories if s is not None]).max()
        assert bool(torch.isfinite(largest) & (largest < 10)) == bounded, (options, largest)


@pytest.mark.parametrize("ln_affine", [True, False])
def test_the_generating_memories_start_near_the_layers_views(ln_affine):
    """Each memory is x + LN(MLP(x)): without an affine the branch has norm sqrt(d) whatever x, four times a unit
    k, v, q at d = 16, so k, v, q started as a random function of the views. With the default affine the generating
    memories' branch starts at generator_gain sqrt(d) and the main memory's at sqrt(d)."""
    layer = SelfModifyingTitans(64, 4, ln_affine=ln_affine).double()
    d = layer.head_dim
    state = smt.initial_state(layer.config, layer._outer(), 1)
    rows = torch.nn.functional.normalize(torch.randn(1, 5, 4, d, dtype=torch.float64), dim=-1)
    for name in layer.config.used():
        branch = smt._read(layer.config, name, getattr(state, name), rows, layer._outer()) - rows
        gain = layer.config.generator_gain if ln_affine and name != "memory" else 1.0
        torch.testing.assert_close(branch.norm(dim=-1), torch.full((1, 5, 4), gain * d**0.5, dtype=torch.float64),
                                   rtol=1e-3, atol=0.0, msg=name)  # LN eps
