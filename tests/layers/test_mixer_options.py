"""Every mixer's options (regmem/layers/options.py): each is a real constructor argument at its stated default,
`help` and `inspect.signature` list them, and values from text or TOML read as their types."""

import inspect
import pydoc

import pytest
import torch

from regmem.layers import MIXERS, build_mixer
from regmem.layers.options import check_mixer_options, coerce, mixer_options

D_MODEL, N_HEADS = 16, 2


def _built(name: str, **options):
    torch.manual_seed(0)
    return build_mixer(name, D_MODEL, N_HEADS, **options)


@pytest.mark.parametrize("name", [*MIXERS, "recipe:uniform/linear/sgd_momentum"])
def test_every_option_given_at_its_default_builds_the_default_mixer(name):
    """An option a constructor fixes for its parent, or a wrong default, would fail here: giving every option
    explicitly at its stated default builds the same parameters and the same outputs as giving none."""
    options = {o.name: o.default for o in mixer_options(name).values() if o.default is not inspect.Parameter.empty}
    assert options, name
    plain, explicit = _built(name), _built(name, **options)
    assert {k: v.shape for k, v in plain.state_dict().items()} == {k: v.shape for k, v in explicit.state_dict().items()}
    for key, value in plain.state_dict().items():
        assert torch.equal(value, explicit.state_dict()[key]), key
    x = torch.randn(1, 5, D_MODEL, generator=torch.Generator().manual_seed(1))
    torch.testing.assert_close(plain(x)[0], explicit(x)[0], rtol=0, atol=0)


def test_options_follow_the_constructors_and_what_they_fix():
    gdn = mixer_options("gated_deltanet")
    assert gdn["allow_neg_eigval"].owner == "DeltaNet" and gdn["chunk_size"].owner == "MemoryMixer"
    assert gdn["qk_norm"].default is True  # DeltaNet's default, not MemoryMixer's False
    assert "qk_norm" not in mixer_options("delta_product")  # DeltaProduct passes qk_norm=True to its parent
    assert "inner_model" not in mixer_options("ttt_mlp")  # made by TTTMLP from its own options
    hope = mixer_options("hope")
    assert hope["dgd"].owner == "SelfModifyingConfig" and hope["cms_chunk_sizes"].default == (16, 64, 256)
    assert hope["self_values"].default is True and mixer_options("hope_standin")["self_values"].default is False
    assert "recipe" not in mixer_options("recipe:uniform/linear/sgd_momentum")


def test_help_and_signature_list_the_options():
    signature = inspect.signature(MIXERS["gated_deltanet"])
    assert list(signature.parameters)[:2] == ["d_model", "n_heads"]
    assert signature.parameters["chunk_size"].default == 64
    text = pydoc.render_doc(MIXERS["moba"], renderer=pydoc.plaintext)
    assert "block_size: 'int' = 64" in text and "top_k: 'int' = 3" in text


@pytest.mark.parametrize(("option", "value", "expected"), [
    ("cms_lr", "0.1", 0.1), ("cms_lr", "0.1,0.2", (0.1, 0.2)), ("cms_lr", [0.1, 1], (0.1, 1.0)),
    ("cms_chunk_sizes", "8,32", (8, 32)), ("head_dim", "none", None), ("head_dim", "16", 16),
    ("cms_compile_chunks", "true", True), ("cms_compile_chunks", "inductor", "inductor"), ("bptt", 128, 128),
    ("static", "k,eta", ("eta", "k")), ("static", ["q"], ("q",)), ("dgd", "false", False),
])
def test_values_read_as_the_option_type(option, value, expected):
    got = coerce(mixer_options("hope")[option].kind, value, option)
    assert got == expected and type(got) is type(expected)


@pytest.mark.parametrize(("option", "value"), [
    ("bptt", "x"), ("cms_variant", "foo"), ("dgd", 1), ("static", "memory"), ("cms_lr", "nan"), ("bptt", 1.5),
    ("cms_chunk_sizes", True),
])
def test_a_value_that_is_not_the_option_type_is_refused_by_name(option, value):
    with pytest.raises(ValueError, match=f"{option}: expected"):
        coerce(mixer_options("hope")[option].kind, value, option)


def test_unknown_options_are_refused_with_the_list_of_known_ones():
    with pytest.raises(ValueError, match="mixer 'moba' has no option 'blok'; its options: head_dim, .*block_size"):
        check_mixer_options("moba", {"blok": 3})
    assert check_mixer_options("moba", {"block_size": "16", "top_k": 2}) == {"block_size": 16, "top_k": 2}
    with pytest.raises(ValueError, match=r"option 'memory_model': expected InnerModel \| None"):
        check_mixer_options("hope", {"memory_model": "x"})  # only None is given as text; a model from Python
