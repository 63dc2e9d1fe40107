"""The FFN of an LM as a tagged union of typed configs (regmem/models/ffn.py): kind names stand for their configs'
defaults, the JSON round trip keeps the kind, and checkpoints of the flat format written before these configs
(tests/models/old_configs, saved by the code at commit 32743a8 with its outputs) load as the same models."""

import json
import shutil
from pathlib import Path
from typing import get_args

import pytest
import torch
from safetensors.torch import load_file

from regmem.models import (
    FFN_CONFIGS,
    LM,
    CMSConfig,
    FFNKind,
    LMConfig,
    MemoryFFNConfig,
    MoEConfig,
    MultiHeadFFNConfig,
    NoFFN,
    SwiGLUConfig,
)
from regmem.models.config import DEFAULTS_BEFORE_2, DEFAULTS_BEFORE_7
from regmem.models.ffn import ffn_from_dict, ffn_to_dict

OLD = Path(__file__).parent / "old_configs"
GENERATORS_MEMORY = {"memory_expand": 0, "memory_activation": None}  # format 5 and before (DEFAULTS_BEFORE_6)
# What each old flat config.json means in the typed configs: every non-default flat field of its kind carried over.
OLD_FFNS = {
    "cms": CMSConfig(chunk_sizes=(2, 4), lr=(0.05, 0.01), hidden=21, variant="nested", objective="reconstruct",
                     step_rule="explicit"),  # the only step rule when they were written
    "moe": MoEConfig(expansion=3.0, activation="solu", temperature=2.0, experts=2, top_k=1),
    "moe_swiglu": MoEConfig(expansion=2.0, expert="swiglu", experts=4, top_k=2),
    "multihead": MultiHeadFFNConfig(expansion=2.0, heads=2),
    "swiglu": SwiGLUConfig(expansion=2.0),
    "none": NoFFN(),
}


def test_every_kind_names_its_config_with_the_defaults():
    assert tuple(FFN_CONFIGS) == get_args(FFNKind)
    for kind, config_class in FFN_CONFIGS.items():
        config = LMConfig(vocab_size=10, ffn=kind)
        assert config.ffn == config_class() and config.ffn.kind == kind
    assert LMConfig(vocab_size=10).ffn == SwiGLUConfig()


@pytest.mark.parametrize("ffn", [SwiGLUConfig(expansion=2.5), CMSConfig(chunk_sizes=(2, 8), lr=(0.1, 0.0)), NoFFN(),
                                 MemoryFFNConfig(activation="solu", temperature=2.0), MultiHeadFFNConfig(heads=2),
                                 MoEConfig(expert="swiglu", top_k=1)], ids=lambda ffn: ffn.kind)
def test_json_round_trip_keeps_the_kind_and_fields(ffn):
    config = LMConfig(vocab_size=10, d_model=16, ffn=ffn)
    d = json.loads(json.dumps(config.to_dict()))
    assert d["ffn"]["kind"] == ffn.kind
    assert LMConfig.from_dict(d) == config


@pytest.mark.parametrize("ffn,match", [
    ({"kind": "moe", "experts": 2, "top_k": 1, "dropout": 0.1}, "unknown ffn keys"),
    ({"kind": "swiglu", "activation": "solu"}, "unknown ffn keys"),  # a field of another kind
    ({"experts": 2}, "kind"),
    ({"kind": "mlp"}, "ffn must be one of"),
])
def test_bad_ffn_dicts_raise_value_error(ffn, match):
    with pytest.raises(ValueError, match=match):
        LMConfig.from_dict({"vocab_size": 10, "ffn": ffn})


def test_an_ffn_is_a_config_or_a_kind_name():
    with pytest.raises(ValueError, match="ffn must be one of"):
        LMConfig(vocab_size=10, ffn={"kind": "cms"})
    with pytest.raises(TypeError):
        SwiGLUConfig(activation="solu")  # a field of another kind cannot be set


@pytest.mark.parametrize("name", sorted(OLD_FFNS))
def test_old_flat_checkpoints_load_as_the_same_model(name, tmp_path):
    flat = json.loads((OLD / name / "config.json").read_text())
    assert isinstance(flat["ffn"], str) and "ffn_expansion" in flat  # the old format
    model = LM.from_pretrained(OLD / name).eval()
    assert model.config.ffn == OLD_FFNS[name]
    # A mixer whose defaults changed since keeps those of then (DEFAULTS_BEFORE_2), which the logits below need.
    assert model.config.norm_eps == flat["norm_eps"]
    assert all(model.config.mixer_kwargs[k].items() >= v.items() for k, v in flat["mixer_kwargs"].items())
    expected = load_file(str(OLD / name / "expected.safetensors"))
    with torch.no_grad():
        torch.testing.assert_close(model(expected["input_ids"]), expected["logits"])
    model.save_pretrained(tmp_path)  # the new format
    assert LM.from_pretrained(tmp_path).config == model.config


def test_the_old_cms_checkpoint_keeps_the_models_norm_eps_in_its_levels(tmp_path):
    """The flat format's CMS used LMConfig.norm_eps (1e-6 in this checkpoint); it still does."""
    model = LM.from_pretrained(OLD / "cms")
    assert model.blocks[0].ffn.norm_eps == 1e-6


def test_old_flat_dicts_with_some_keys_take_the_defaults_and_keep_their_checks(tmp_path):
    config = LMConfig.from_dict({"vocab_size": 10, "ffn": "moe", "moe_experts": 2, "moe_top_k": 1})
    assert config.ffn == MoEConfig(experts=2, top_k=1)
    assert LMConfig.from_dict({"vocab_size": 10, "ffn_expansion": 2.0}).ffn == SwiGLUConfig(expansion=2.0)
    with pytest.raises(ValueError, match="cms_levels"):
        LMConfig.from_dict({"vocab_size": 10, "ffn": "cms", "cms_levels": 2, "cms_chunk_sizes": [2, 4, 8]})
    with pytest.raises(ValueError, match="unknown LMConfig keys"):
        LMConfig.from_dict({"vocab_size": 10, "ffn": "cms", "cms_levels": 1, "cms_chunk_sizes": [2], "dropout": 0.1})
    shutil.copytree(OLD / "swiglu", tmp_path / "bad")
    flat = json.loads((tmp_path / "bad" / "config.json").read_text())
    (tmp_path / "bad" / "config.json").write_text(json.dumps({**flat, "moe_topk": 1}))
    with pytest.raises(ValueError, match="moe_topk"):
        LM.from_pretrained(tmp_path / "bad")


def test_an_old_flat_config_keeps_loading_with_options_of_mixers_no_layer_uses():
    """The flat format accepted mixer_kwargs of mixers no layer used (nothing read them); a new config rejects them."""
    flat = {"vocab_size": 10, "mixer": "gla", "ffn": "swiglu", "ffn_expansion": 4.0,
            "mixer_kwargs": {"gla": {"expand_v": 2.0}, "attn": {"qk_norm": True}}}
    assert LMConfig.from_dict(flat).mixer_kwargs == {"gla": {"expand_v": 2.0}}
    with pytest.raises(ValueError, match="no layer uses"):
        LMConfig(vocab_size=10, mixer="gla", mixer_kwargs={"attn": {"qk_norm": True}})


def _before_7(name: str, options: dict) -> dict:
    """A mixer's options as a config older than format 7 loads them: DEFAULTS_BEFORE_7 where they are not set."""
    return {**DEFAULTS_BEFORE_7[name], **options}


def test_a_cms_dict_without_a_step_rule_loads_with_the_rule_it_was_written_under():
    """ffn_to_dict writes every field, so a "cms" dict without step_rule predates it: eq. 71's explicit step."""
    assert ffn_from_dict({"kind": "cms", "chunk_sizes": [2, 4]}).step_rule == "explicit"
    assert ffn_from_dict(ffn_to_dict(CMSConfig())) == CMSConfig() and CMSConfig().step_rule == "normalized"


def test_a_config_written_before_format_2_keeps_the_defaults_it_was_trained_with():
    """Format 2 changed self-modifying Titans' and the CMS's defaults (step rules, input views, momentum, eta_max):
    a dict without "format" (any earlier release) loads with the old values, one with it with the new."""
    config = LMConfig(vocab_size=10, d_model=16, n_heads=2, n_layers=1, mixer="hope",
                      mixer_kwargs={"hope": {"mini_batch": 4}})
    d = config.to_dict()
    assert d["format"] == 7 and LMConfig.from_dict(d) == config
    old = LMConfig.from_dict({k: v for k, v in d.items() if k != "format"})
    assert old.mixer_kwargs["hope"] == _before_7("hope", {
        **DEFAULTS_BEFORE_2["hope"], "mini_batch": 4, "cms_step_rule": "explicit", "cms_hidden": round(8 / 3 * 16),
        "self_values": True, "ln_affine": False, "dgd": True, **GENERATORS_MEMORY})
    mixer = LM(old).blocks[0].mixer
    assert mixer.config.step_rule == "explicit" and mixer.cms.config.width(16) == 43 != CMSConfig().width(16)
    cms = LMConfig(vocab_size=10, d_model=16, n_heads=2, n_layers=1, mixer="attn", ffn="cms").to_dict()
    cms = {**cms, "ffn": {k: v for k, v in cms["ffn"].items() if k not in ("step_rule", "persistent")}}  # as then
    assert LMConfig.from_dict({k: v for k, v in cms.items() if k != "format"}).ffn == CMSConfig(
        hidden=43, step_rule="explicit")
    with pytest.raises(ValueError, match="format"):
        LMConfig.from_dict({**d, "format": 8})


def test_a_config_of_format_2_keeps_self_modifying_titans_own_values():
    """Format 3 made every memory of self-modifying Titans regress onto v_t (eq. 84): a format-2 config loads with
    eq. 87's own values, which it was trained with, unless it set them; other mixers are untouched."""
    config = LMConfig(vocab_size=10, d_model=16, n_heads=2, n_layers=2, mixer=("hope", "attn"),
                      mixer_kwargs={"hope": {"mini_batch": 4}})
    d = {**config.to_dict(), "format": 2}
    old = LMConfig.from_dict(d)
    assert old.mixer_kwargs == {"hope": _before_7("hope", {"mini_batch": 4, "self_values": True, "ln_affine": False,
                                                           "dgd": True, **GENERATORS_MEMORY})}
    assert LM(old).blocks[0].mixer.config.self_values
    explicit = {**d, "mixer_kwargs": {"hope": {"self_values": False}}}
    assert LMConfig.from_dict(explicit).mixer_kwargs["hope"] == _before_7("hope", {
        "self_values": False, "ln_affine": False, "dgd": True, **GENERATORS_MEMORY})


def test_a_config_of_format_3_keeps_self_modifying_titans_memories_without_an_ln_affine():
    """Format 4 gave the memories' layer norms a learnable affine (new parameters): a format-3 checkpoint loads into
    the layer it was trained as, without them, unless its config set ln_affine."""
    config = LMConfig(vocab_size=10, d_model=16, n_heads=2, n_layers=2, mixer=("self_modifying_titans", "attn"))
    old = LMConfig.from_dict({**config.to_dict(), "format": 3})
    assert old.mixer_kwargs == {"self_modifying_titans": _before_7("self_modifying_titans", {
        "ln_affine": False, "dgd": True, **GENERATORS_MEMORY})}
    assert len(LM(old).blocks[0].mixer.ln_weight) == 0 and len(LM(config).blocks[0].mixer.ln_weight) == 6
    set_it = {**config.to_dict(), "format": 3, "mixer_kwargs": {"self_modifying_titans": {"ln_affine": True}}}
    assert LMConfig.from_dict(set_it).mixer_kwargs["self_modifying_titans"] == _before_7("self_modifying_titans", {
        "ln_affine": True, "dgd": True, **GENERATORS_MEMORY})


def test_a_config_of_format_4_keeps_self_modifying_titans_dgd_term():
    """Format 5 dropped eq. 88's DGD term from self-modifying Titans' default: a format-4 config loads with it (it
    was trained with it) unless it set dgd; format 5 builds the layer without it."""
    config = LMConfig(vocab_size=10, d_model=16, n_heads=2, n_layers=2, mixer=("hope", "self_modifying_titans"))
    old = LMConfig.from_dict({**config.to_dict(), "format": 4})
    assert old.mixer_kwargs == {"hope": _before_7("hope", {"dgd": True, **GENERATORS_MEMORY}),
                                "self_modifying_titans": _before_7("self_modifying_titans",
                                                                   {"dgd": True, **GENERATORS_MEMORY})}
    assert all(block.mixer.config.dgd for block in LM(old).blocks)
    set_it = {**config.to_dict(), "format": 4, "mixer_kwargs": {"hope": {"dgd": False}}}
    assert LMConfig.from_dict(set_it).mixer_kwargs["hope"] == _before_7("hope", {"dgd": False, **GENERATORS_MEMORY})


def test_a_config_of_format_5_keeps_self_modifying_titans_main_memory_in_the_generators_shape():
    """Format 6 gave self-modifying Titans Titans-MLP's main memory (4 d wide, GELU; new parameter shapes): a
    format-5 checkpoint loads into the layer it was trained as, its main memory d wide with SiLU, unless it set
    them; format 6 builds the wider one."""
    config = LMConfig(vocab_size=10, d_model=16, n_heads=2, n_layers=2, mixer=("hope", "self_modifying_titans"))
    old = LMConfig.from_dict({**config.to_dict(), "format": 5})
    assert old.mixer_kwargs == {"hope": _before_7("hope", GENERATORS_MEMORY),
                                "self_modifying_titans": _before_7("self_modifying_titans", GENERATORS_MEMORY)}
    d = 8  # head dim
    for block in LM(old).blocks:
        assert block.mixer.config.model("memory", d) == block.mixer.config.model("k", d)
    for block in LM(config).blocks:
        model = block.mixer.config.model("memory", d)
        assert model.hidden == (4 * d,) and model.activation == "gelu"
        assert block.mixer.memory_init["memory"].shape[-1] == model.num_params(d, d)
    set_it = {**config.to_dict(), "format": 5, "mixer_kwargs": {"hope": {"memory_expand": 2}}}
    assert LMConfig.from_dict(set_it).mixer_kwargs["hope"] == _before_7("hope", {"memory_expand": 2,
                                                                                 "memory_activation": None})
