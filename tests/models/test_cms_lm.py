"""A regmem LM with CMS FFNs (Nested Learning, arXiv:2512.24695, Sec. 7): the Transformer block as the one-level CMS
that never updates (Sec. 7.1), ad-hoc level stacking from a trained model (Sec. 7.3), decoding with the CMS state,
save/load, and config validation."""

import pytest
import torch

from regmem.models import LM, CMSConfig, LMConfig, SwiGLUConfig, stack_levels
from regmem.nested import CMS

VOCAB = 24


def _trained_like(mixer="attn", seed=0):
    """An LM with random (not zero-init) weights everywhere, standing in for a trained checkpoint."""
    torch.manual_seed(seed)
    model = LM(LMConfig(vocab_size=VOCAB, d_model=16, n_layers=2, n_heads=2, mixer=mixer)).double()
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.1 * torch.randn_like(p))
    return model


def _ids(B=2, T=13, seed=1):
    return torch.randint(0, VOCAB, (B, T), generator=torch.Generator().manual_seed(seed))


@pytest.mark.parametrize("extra", ["zero", "copy"])
def test_stacking_with_zero_learning_rate_reproduces_the_trained_model(extra):
    """Hope-Attention with one level and lr 0 is the Transformer (attention + SwiGLU) with the same weights."""
    model = _trained_like()
    levels = (4,) if extra == "copy" else (4, 8, 16)
    stacked = stack_levels(model, levels, lr=0.0, extra=extra).double()
    ids = _ids()
    torch.testing.assert_close(stacked(ids), model(ids), rtol=1e-12, atol=1e-12)


def test_stacking_with_updates_keeps_the_first_chunk_and_then_adapts():
    model = _trained_like(mixer="gla")
    stacked = stack_levels(model, (4, 8), lr=0.05).double()
    ids = _ids(T=12)
    base, new = model(ids), stacked(ids)
    torch.testing.assert_close(new[:, :4], base[:, :4], rtol=1e-12, atol=1e-12)
    assert (new[:, 4:] - base[:, 4:]).abs().max() > 1e-6


def test_stacking_refuses_a_model_without_swiglu_and_unknown_options():
    with pytest.raises(ValueError, match="SwiGLU"):
        stack_levels(LM(LMConfig(vocab_size=VOCAB, d_model=16, n_heads=2, ffn="none")), (4,))
    with pytest.raises(ValueError, match="extra"):
        stack_levels(_trained_like(), (4,), extra="random")


@pytest.mark.parametrize("mixer", ["gla", "attn", "hope"])
def test_generation_steps_with_the_cms_state_equal_the_full_forward(mixer):
    torch.manual_seed(0)
    kwargs = {"hope": {"mini_batch": 2, "cms_chunk_sizes": (2, 4)}} if mixer == "hope" else {}
    model = LM(LMConfig(vocab_size=VOCAB, d_model=16, n_layers=2, n_heads=2, mixer=mixer, mixer_kwargs=kwargs,
                        ffn=CMSConfig(chunk_sizes=(2, 3), lr=0.05))).double()
    ids = _ids(T=11)
    full = model(ids)
    logits, state = model(ids[:, :4], return_state=True)
    steps = [logits]
    for t in range(4, 11):
        logits, state = model(ids[:, t:t + 1], state, return_state=True)
        steps.append(logits)
    torch.testing.assert_close(torch.cat(steps, 1), full, rtol=1e-9, atol=1e-9)
    assert model.state_floats(100) == model.state_floats(10) or mixer == "attn"


def test_left_padded_prompts_generate_as_if_alone():
    torch.manual_seed(0)
    model = LM(LMConfig(vocab_size=VOCAB, d_model=16, n_layers=1, n_heads=2, mixer="gla",
                        ffn=CMSConfig(chunk_sizes=(2, 4), lr=0.05))).double()
    ids = _ids(B=2, T=7)
    mask = torch.ones(2, 7, dtype=torch.long)
    mask[0, :3] = 0
    batch = model.generate(ids, 5, temperature=0, attention_mask=mask)
    alone = model.generate(ids[:1, 3:], 5, temperature=0)
    assert torch.equal(batch[0, 3:], alone[0])


def test_save_and_load_round_trip(tmp_path):
    torch.manual_seed(0)
    config = LMConfig(vocab_size=VOCAB, d_model=16, n_heads=2, mixer="hope",
                      ffn=CMSConfig(chunk_sizes=(2, 8), lr=(0.01, 0.001), variant="nested"))
    model = LM(config)
    model.save_pretrained(tmp_path)
    loaded = LM.from_pretrained(tmp_path)
    assert loaded.config == config
    ids = _ids()
    torch.testing.assert_close(loaded(ids), model(ids))


@pytest.mark.parametrize("build,match", [
    (lambda: CMSConfig(chunk_sizes=(0,)), "chunk_sizes"),
    (lambda: CMSConfig(chunk_sizes=(2, 4), lr=(0.1,)), "lr lists 1 levels"),
    (lambda: CMSConfig(variant="chain"), "variant"),
    (lambda: LMConfig(vocab_size=VOCAB, ffn="mlp"), "ffn must be"),
])
def test_bad_cms_configs_raise_value_error(build, match):
    with pytest.raises(ValueError, match=match):
        build()


def test_stacked_levels_are_as_wide_as_the_trained_swiglu():
    torch.manual_seed(0)
    model = LM(LMConfig(vocab_size=VOCAB, d_model=16, n_heads=2, mixer="attn", ffn=SwiGLUConfig(expansion=2.0)))
    stacked = stack_levels(model, (4, 8), lr=0.0)
    assert stacked.config.ffn == CMSConfig(chunk_sizes=(4, 8), lr=0.0, hidden=model.blocks[0].ffn.down.in_features)
    ids = _ids()
    torch.testing.assert_close(stacked(ids), model(ids))


def _branch_rms(block, x):
    """rms of what a block's FFN adds to its input x [B, T, D] (a CMS: its output minus its input)."""
    if isinstance(block.ffn, CMS):
        return (block.ffn(x)[0] - x).pow(2).mean().sqrt()
    return block.ffn(block.ffn_norm(x)).pow(2).mean().sqrt()


@pytest.mark.parametrize("levels", [1, 3])
def test_a_cms_level_starts_at_the_scale_of_the_swiglu_ffn_it_stands_for(levels):
    """LM initialises a CMS's levels like its SwiGLU FFN (N(0, init_std^2), CMS.reset_parameters): at d_model 64 the
    fan-in scale of a standalone CMS made the branch ~100x louder than the FFN's, and Hope learned no recall."""
    torch.manual_seed(0)
    x = torch.randn(4, 32, 64)
    sizes = (4, 8, 16)[:levels]
    rms = {}
    for name, ffn in (("swiglu", SwiGLUConfig()), ("cms", CMSConfig(chunk_sizes=sizes, hidden=171 // levels))):
        torch.manual_seed(1)
        model = LM(LMConfig(vocab_size=VOCAB, d_model=64, n_layers=1, n_heads=4, mixer="attn", ffn=ffn))
        with torch.no_grad():
            rms[name] = _branch_rms(model.blocks[0], x)
    assert 0.3 < rms["cms"] / rms["swiglu"] < 3, rms
    torch.manual_seed(1)
    with torch.no_grad():
        standalone = CMS(64, CMSConfig(chunk_sizes=sizes, hidden=171 // levels))
        assert (standalone(x)[0] - x).pow(2).mean().sqrt() > 30 * rms["swiglu"]  # the fan-in scale it replaced
