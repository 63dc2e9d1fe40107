"""Text generation from a saved model (src/regmem/lab/experiments/generation.py) with a tiny untrained byte-level LM."""

from __future__ import annotations

import doctest

import pytest
import torch

import regmem.lab.experiments.generation
from regmem.lab.experiments.generation import generate_text
from regmem.models import LM, LMConfig


def save_tiny_lm(directory, vocab_size: int = 256) -> None:
    torch.manual_seed(0)
    LM(LMConfig(vocab_size=vocab_size, d_model=16, n_layers=1, n_heads=1, mixer="linear")).save_pretrained(directory)


def test_generate_text_is_seeded_and_pure(tmp_path):
    save_tiny_lm(tmp_path)
    torch.manual_seed(123)
    before = torch.rand(1)
    text = generate_text(tmp_path, "The ", max_new_bytes=20, seed=1)
    again = generate_text(str(tmp_path), "The ", max_new_bytes=20, seed=1)
    torch.manual_seed(123)
    assert torch.equal(torch.rand(1), before), "the global RNG is neither read nor advanced"
    assert isinstance(text, str) and text == again
    assert 0 < len(text) <= 20  # the new bytes only; several bytes may make one character
    assert text != generate_text(tmp_path, "The ", max_new_bytes=20, seed=2)


def test_greedy_and_top_k_decoding(tmp_path):
    save_tiny_lm(tmp_path)
    greedy = generate_text(tmp_path, "def f(x):", max_new_bytes=10, temperature=0, seed=0)
    assert greedy == generate_text(tmp_path, "def f(x):", max_new_bytes=10, temperature=0, seed=99)
    model = LM.from_pretrained(tmp_path)
    prompt = torch.tensor([list(b"def f(x):")])
    expected = model.eval().generate(prompt, 10, temperature=0)[0, prompt.shape[1]:]
    assert greedy == bytes(expected.tolist()).decode("utf-8", errors="replace")
    assert isinstance(generate_text(tmp_path, "é", max_new_bytes=5, top_k=1), str)  # a multi-byte prompt


def test_worked_example_doctest():
    results = doctest.testmod(regmem.lab.experiments.generation)
    assert results.attempted > 0 and results.failed == 0


def test_wrong_vocabulary_raises(tmp_path):
    save_tiny_lm(tmp_path, vocab_size=64)
    with pytest.raises(ValueError, match="vocab_size"):
        generate_text(tmp_path, "The ")


@pytest.mark.parametrize(("kwargs", "name"), [
    ({"prompt": ""}, "prompt"), ({"prompt": b"The"}, "prompt"), ({"max_new_bytes": 0}, "max_new_bytes"),
    ({"temperature": -1.0}, "temperature"), ({"top_k": 0}, "top_k"), ({"seed": None}, "seed"),
])
def test_bad_arguments_raise_naming_them(tmp_path, kwargs, name):
    save_tiny_lm(tmp_path)
    with pytest.raises(ValueError, match=name):
        generate_text(tmp_path, **{"prompt": "The ", **kwargs})
