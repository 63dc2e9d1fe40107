"""Issue 44, "nothing silently wrong", for the language model: `LM.forward`, `LM.generate` and `sample` raise
ValueError naming the argument for input they cannot take (an empty batch or sequence, a negative temperature, a
top_k below 1, a max_new_tokens that is not an int >= 0, a prompt that is not a non-empty [B, T] int64 tensor),
rather than accept it or fail deep inside a mixer."""

import math

import pytest
import torch

from helpers import one_intra_op_thread  # noqa: F401 -- the fixture, used by pytestmark
from regmem.layers import MIXERS
from regmem.models import LM, LMConfig, sample

VOCAB = 50


pytestmark = pytest.mark.usefixtures("one_intra_op_thread")


def _lm(mixer="gla,attn"):
    torch.manual_seed(0)
    return LM(LMConfig(vocab_size=VOCAB, d_model=16, n_layers=len(mixer.split(",")), n_heads=2, mixer=mixer)).eval()


def _ids(B, T):
    return torch.randint(0, VOCAB, (B, T))


@pytest.mark.parametrize("mixer", list(MIXERS))
@pytest.mark.parametrize("shape", [(2, 0), (0, 3)])
def test_forward_on_an_empty_batch_or_sequence_raises_naming_input_ids(mixer, shape):
    model = _lm(mixer)
    with pytest.raises(ValueError, match=r"^input_ids"):
        model(_ids(*shape))


@pytest.mark.parametrize("input_ids", [_ids(1, 3)[0], _ids(1, 3)[None]], ids=["1d", "3d"])
def test_forward_on_input_ids_that_are_not_2d_raises_naming_them(input_ids):
    with pytest.raises(ValueError, match=r"^input_ids"):
        _lm()(input_ids)


@pytest.mark.parametrize("temperature", [-1, -0.5, math.nan, math.inf, "1", True, None])
def test_generate_refuses_a_temperature_that_is_not_a_finite_number_at_least_0(temperature):
    with pytest.raises(ValueError, match=r"^temperature"):
        _lm().generate(_ids(1, 3), 2, temperature=temperature)


@pytest.mark.parametrize("top_k", [0, -1, 2.0, True])
def test_generate_refuses_a_top_k_that_is_not_none_or_an_int_at_least_1(top_k):
    with pytest.raises(ValueError, match=r"^top_k"):
        _lm().generate(_ids(1, 3), 2, top_k=top_k)


@pytest.mark.parametrize("max_new_tokens", [-1, 1.5, 2.0, True, None])
def test_generate_refuses_a_max_new_tokens_that_is_not_an_int_at_least_0(max_new_tokens):
    with pytest.raises(ValueError, match=r"^max_new_tokens"):
        _lm().generate(_ids(1, 3), max_new_tokens)


def test_generate_with_no_new_tokens_returns_the_prompt():
    prompt = _ids(2, 4)
    assert torch.equal(_lm().generate(prompt, 0), prompt)


@pytest.mark.parametrize("prompt", [
    _ids(1, 0), _ids(0, 3), _ids(1, 3)[0], _ids(1, 3)[None], _ids(1, 3).int(), _ids(1, 3).float(), [[1, 2, 3]],
], ids=["empty-T", "empty-B", "1d", "3d", "int32", "float", "list"])
def test_generate_refuses_a_prompt_that_is_not_a_nonempty_2d_int64_tensor(prompt):
    with pytest.raises(ValueError, match=r"^prompt"):
        _lm().generate(prompt, 2)


@pytest.mark.parametrize(("option", "value"), [("temperature", -1.0), ("temperature", math.nan), ("top_k", 0),
                                               ("top_k", 1.0)])
def test_sample_refuses_the_options_generate_refuses(option, value):
    options = {"temperature": 1.0, "top_k": None} | {option: value}
    with pytest.raises(ValueError, match=f"^{option}"):
        sample(torch.randn(2, VOCAB), options["temperature"], options["top_k"], None)


@pytest.mark.parametrize("logits", [torch.randn(VOCAB), torch.randn(2, 3, VOCAB), torch.randn(0, VOCAB),
                                    torch.randn(2, 0), torch.randint(0, 5, (2, VOCAB))],
                         ids=["1d", "3d", "empty-B", "empty-vocab", "int"])
def test_sample_refuses_logits_that_are_not_a_nonempty_2d_float_tensor(logits):
    with pytest.raises(ValueError, match=r"^logits"):
        sample(logits, 1.0, None, None)


def test_sample_with_top_k_1_or_temperature_0_is_the_argmax():
    logits = torch.randn(4, VOCAB)
    argmax = logits.argmax(-1, keepdim=True)
    assert torch.equal(sample(logits, 0, None, None), argmax)
    assert torch.equal(sample(logits, 1.0, 1, torch.Generator().manual_seed(0)), argmax)
