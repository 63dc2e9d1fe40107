"""Constructor options of layers, nested modules and model configs: every choice is a `Literal` (checked over the
mixer registry and the configs), and a bad value or an argument the layer would not use raises ValueError naming it
instead of passing silently."""

import dataclasses
import inspect
import re

import pytest
import torch

from regmem.layers import MIXERS, DeltaFormer, LinearAttention, Mamba, Mesa, TitansMLP, build_mixer
from regmem.models import FFN_CONFIGS, LMConfig, MemoryFFNConfig
from regmem.nested import CMSConfig, LinearAttentionPP, SelfModifyingConfig

D, H = 16, 2


def _str_options(annotations: dict) -> list[str]:
    return [name for name, annotation in annotations.items() if re.search(r"\bstr\b", str(annotation))]


@pytest.mark.parametrize("name", sorted(MIXERS))
def test_no_mixer_option_is_a_bare_string(name):
    found = []
    for cls in MIXERS[name].__mro__:
        if "__init__" in vars(cls):
            parameters = inspect.signature(cls.__init__).parameters
            found += _str_options({p: v.annotation for p, v in parameters.items() if p != "self"})
    assert not found, f"{name}: {found} typed str (use a Literal)"


@pytest.mark.parametrize("config", [CMSConfig, SelfModifyingConfig, LMConfig, *FFN_CONFIGS.values()],
                         ids=lambda c: c.__name__)
def test_no_config_field_is_a_bare_string(config):
    names = {"mixer", "mixer_kwargs"}  # mixer names: keys of the registry MIXERS
    fields = {f.name: f.type for f in dataclasses.fields(config) if f.name not in names}
    assert not _str_options(fields)


@pytest.mark.parametrize("build,match", [
    (lambda: build_mixer("deltaformer", D, H, decimals=2), "decimals applies"),  # no "round" kernel reads it
    (lambda: DeltaFormer(D, H, erase_kernel="gauss"), "erase_kernel"),
    (lambda: Mamba(D, discretization="euler"), "discretization"),
    (lambda: Mesa(D, H, cg_steps=10), "cg_steps applies"),  # the exact solver has no steps
    (lambda: Mesa(D, H, solver="lu"), "solver"),
    (lambda: LinearAttention(D, H, short_conv_on="kq"), "short_conv_on"),
    (lambda: LinearAttention(D, H, feature_map="softmax"), "feature_map"),
    (lambda: TitansMLP(D, H, loss="l1"), "loss must"),
    (lambda: MemoryFFNConfig(temperature=2.0), "temperature applies"),  # relu has no temperature
    (lambda: LMConfig(vocab_size=8, mixer="gla", mixer_kwargs={"attn": {"qk_norm": True}}), "no layer uses"),
], ids=["deltaformer-decimals", "deltaformer-kernel", "mamba-discretization", "mesa-cg_steps", "mesa-solver",
        "short_conv_on", "feature_map", "deep-memory-loss", "ffn-temperature", "lm-mixer_kwargs"])
def test_bad_or_unusable_options_raise_value_error(build, match):
    with pytest.raises(ValueError, match=match):
        build()


def test_linear_attention_pp_checks_mode_even_without_updates():
    with pytest.raises(ValueError, match="mode"):
        LinearAttentionPP(4, 3, update=False)(torch.zeros(1, 2, 4), mode="fast")


def test_mesa_cg_steps_reach_the_cg_solver():
    torch.manual_seed(0)
    x = torch.randn(1, 9, D)
    default, few = (Mesa(D, H, solver="cg", **steps) for steps in ({}, {"cg_steps": 1}))
    few.load_state_dict(default.state_dict())
    assert (default(x)[0] - few(x)[0]).abs().max() > 1e-6
