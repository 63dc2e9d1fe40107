"""Issue 44, "nothing silently wrong", for every mixer of the registry:

- `build_mixer(name, d_model, n_heads)` raises ValueError naming the argument for sizes that are not positive ints,
  and naming both for a d_model that n_heads does not divide (unless head_dim sets the width of a head);
- a forward on an empty batch (B = 0) or an empty sequence (T = 0) raises ValueError naming x, with or without a
  state, rather than failing inside an op (the mixer contract, regmem/layers/base.py).
"""

import inspect

import pytest
import torch

from helpers import one_intra_op_thread  # noqa: F401 -- the fixture, used by pytestmark
from regmem.layers import MIXERS, build_mixer

D_MODEL, HEADS = 16, 2
NOT_INTS = [16.0, "16", True, None]


pytestmark = pytest.mark.usefixtures("one_intra_op_thread")


def _takes_head_dim(cls) -> bool:
    return any("head_dim" in inspect.signature(c.__init__).parameters for c in cls.__mro__ if "__init__" in vars(c))


HEAD_DIM_MIXERS = [name for name in MIXERS if _takes_head_dim(MIXERS[name])]


@pytest.mark.parametrize("name", list(MIXERS))
@pytest.mark.parametrize("d_model", [0, -16, *NOT_INTS])
def test_a_d_model_that_is_not_a_positive_int_raises_naming_it(name, d_model):
    with pytest.raises(ValueError, match="d_model"):
        build_mixer(name, d_model, HEADS)


@pytest.mark.parametrize("name", list(MIXERS))
@pytest.mark.parametrize("n_heads", [0, -2, 2.0, "2", True, None])
def test_an_n_heads_that_is_not_a_positive_int_raises_naming_it(name, n_heads):
    with pytest.raises(ValueError, match="n_heads"):
        build_mixer(name, D_MODEL, n_heads)


@pytest.mark.parametrize("name", [*MIXERS, "recipe:uniform/linear/dgd"])
def test_n_heads_not_dividing_d_model_raises_naming_both(name):
    with pytest.raises(ValueError) as raised:
        build_mixer(name, D_MODEL, 3)
    assert "d_model" in str(raised.value) and "n_heads" in str(raised.value), str(raised.value)


def test_some_mixers_take_head_dim():
    """The head_dim tests below run over these; an empty list would make them vacuous."""
    assert {"attn", "deltanet", "mamba2", "deltaformer", "self_modifying_titans"} <= set(HEAD_DIM_MIXERS)


@pytest.mark.parametrize("name", HEAD_DIM_MIXERS)
def test_a_given_head_dim_lifts_the_divisibility_rule(name):
    """With head_dim set, n_heads need not divide d_model: the mixer builds and maps [B, T, d_model] to itself."""
    torch.manual_seed(0)
    mixer = build_mixer(name, D_MODEL, 3, head_dim=4).eval()
    with torch.no_grad():
        y, _ = mixer(torch.randn(2, 5, D_MODEL))
    assert y.shape == (2, 5, D_MODEL)


@pytest.mark.parametrize("name", HEAD_DIM_MIXERS)
@pytest.mark.parametrize("head_dim", [0, -4, 4.0, True])
def test_a_head_dim_that_is_not_a_positive_int_raises_naming_it(name, head_dim):
    with pytest.raises(ValueError, match="head_dim"):
        build_mixer(name, D_MODEL, HEADS, head_dim=head_dim)


def _mixer(name):
    torch.manual_seed(0)
    return build_mixer(name, D_MODEL, HEADS).eval()


@pytest.mark.parametrize("name", list(MIXERS))
@pytest.mark.parametrize("shape", [(2, 0, D_MODEL), (0, 5, D_MODEL), (0, 0, D_MODEL)])
def test_an_empty_batch_or_sequence_raises_naming_x(name, shape):
    mixer = _mixer(name)
    with pytest.raises(ValueError, match=r"^x must hold"):
        mixer(torch.randn(shape))
    with pytest.raises(ValueError, match=r"^x must hold"):
        mixer(torch.randn(shape), attention_mask=torch.ones(shape[:2], dtype=torch.bool))


@pytest.mark.parametrize("name", list(MIXERS))
def test_an_empty_step_after_a_prefill_raises_naming_x(name):
    mixer = _mixer(name)
    with torch.no_grad():
        _, state = mixer(torch.randn(2, 5, D_MODEL))
    with pytest.raises(ValueError, match=r"^x must hold"):
        mixer(torch.randn(2, 0, D_MODEL), state)
