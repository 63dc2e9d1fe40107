"""The text task (src/regmem/tasks/text.py) against brute force on the corpus bytes: the corpus, the split, the
windows, seeding, validation, the metric and the worked example."""

from __future__ import annotations

import doctest
import math
import sys

import pytest
import torch

import regmem.tasks.text
from regmem.tasks import Task
from regmem.tasks.text import (
    SEPARATOR,
    Text,
    TextConfig,
    bits_per_byte,
    corpus_bytes,
    decode,
    encode,
    sample_windows,
    shift_windows,
    split_boundaries,
    split_corpus,
    topics,
)


def test_corpus_is_the_sorted_topics_joined_and_deterministic():
    from pydoc_data.topics import topics as pydoc_topics

    corpus = corpus_bytes()
    assert corpus == b"\n\n".join(pydoc_topics[name].encode("utf-8") for name in sorted(pydoc_topics))
    assert corpus.startswith(pydoc_topics["assert"].encode("utf-8"))  # "assert" sorts first
    assert len(pydoc_topics) > 50 and len(corpus) > 300_000  # ~79 topics, ~466k bytes
    assert "statement" in corpus.decode("utf-8")  # valid UTF-8 prose
    corpus_bytes.cache_clear()
    assert corpus_bytes() == corpus  # rebuilt from scratch, byte for byte


def test_missing_pydoc_data_raises_naming_it(monkeypatch):
    corpus_bytes.cache_clear()
    monkeypatch.setitem(sys.modules, "pydoc_data.topics", None)  # import of it now raises ImportError
    with pytest.raises(RuntimeError, match="pydoc_data"):
        corpus_bytes()
    monkeypatch.undo()
    assert corpus_bytes()  # nothing broken was cached


def _starts():
    return {len(SEPARATOR.join(topics()[n].encode("utf-8") for n in sorted(topics())[:k])) + len(SEPARATOR)
            for k in range(1, len(topics()))}


@pytest.mark.parametrize(("valid", "test"), [(0.04, 0.06), (0.05, 0.05), (0.1, 0.2)])
def test_splits_are_disjoint_cover_the_corpus_and_cut_at_topic_starts(valid, test):
    corpus = corpus_bytes()
    train, validation, held_out = split_corpus(valid, test)
    assert train.dtype == validation.dtype == held_out.dtype == torch.uint8
    v, t = split_boundaries(valid, test)
    assert (train.numel(), validation.numel(), held_out.numel()) == (v, t - v, len(corpus) - t)
    assert bytes(train.tolist()) + bytes(validation.tolist()) + bytes(held_out.tolist()) == corpus
    starts = _starts()
    for boundary, share in ((v, 1 - valid - test), (t, 1 - test)):
        assert corpus[boundary - len(SEPARATOR):boundary] == SEPARATOR
        assert boundary in starts  # no topic straddles two splits
        gaps = [abs(start - share * len(corpus)) for start in starts]
        assert abs(boundary - share * len(corpus)) == min(gaps)  # the nearest topic start


def test_default_split_sizes():
    train, validation, test = split_corpus()
    assert 0.85 < train.numel() / len(corpus_bytes()) < 0.95
    assert validation.numel() > 10_000 and test.numel() > 20_000


def test_fractions_that_cut_at_one_topic_start_raise():
    with pytest.raises(ValueError, match="validation split would be empty"):
        split_boundaries(0.001, 0.06)


def test_windows_come_from_their_own_split_and_targets_are_shifted_inputs():
    task = Text(TextConfig(seq_len=64))
    train, validation, test = (bytes(split.tolist()) for split in split_corpus())
    for generate, own, others in [(task.generate_train, train, (validation, test)),
                                  (task.generate, validation, (train, test)),
                                  (task.generate_test, test, (train, validation))]:
        inputs, targets = generate(8, seed=3)
        assert inputs.dtype == targets.dtype == torch.int64 and inputs.shape == targets.shape == (8, 64)
        assert torch.equal(inputs[:, 1:], targets[:, :-1])  # every position labelled, shifted by one
        for row_inputs, row_targets in zip(inputs.tolist(), targets.tolist(), strict=True):
            window = bytes(row_inputs + row_targets[-1:])
            assert window in own  # brute force: the seq_len + 1 bytes occur in this split
            assert not any(window in other for other in others)


def test_worked_example_and_doctest():
    inputs, targets = shift_windows(torch.tensor([list(b"def f")]))
    assert inputs.tolist() == [[100, 101, 102, 32]] and targets.tolist() == [[101, 102, 32, 102]]
    assert decode(inputs[0]) == "def " and decode(targets[0]) == "ef f"
    results = doctest.testmod(regmem.tasks.text)
    assert results.attempted > 0 and results.failed == 0


def test_every_offset_can_be_drawn_including_the_last():
    data = torch.arange(6, dtype=torch.uint8)  # windows of 3 bytes: offsets 0..3
    inputs, _ = sample_windows(data, 400, 2, seed=0)
    assert sorted(set(inputs[:, 0].tolist())) == [0, 1, 2, 3]


def test_seeding_is_pure():
    task = Text(TextConfig(seq_len=16))
    torch.manual_seed(123)
    before = torch.rand(1)
    a = task.generate(4, seed=5)
    b = task.generate(4, generator=torch.Generator().manual_seed(5))
    c = task.generate_train(4, seed=5)
    torch.manual_seed(123)
    assert torch.equal(torch.rand(1), before), "the global RNG is neither read nor advanced"
    assert all(torch.equal(x, y) for x, y in zip(a, b, strict=True))
    assert all(torch.equal(x, y) for x, y in zip(c, task.generate_train(4, seed=5), strict=True))
    assert not torch.equal(a[0], task.generate(4, seed=6)[0])


@pytest.mark.parametrize(("kwargs", "field"), [
    ({"seq_len": 0}, "seq_len"), ({"seq_len": True}, "seq_len"), ({"seq_len": 8.0}, "seq_len"),
    ({"validation_fraction": 0}, "validation_fraction"), ({"validation_fraction": 1.0}, "validation_fraction"),
    ({"validation_fraction": -0.1}, "validation_fraction"), ({"validation_fraction": "0.1"}, "validation_fraction"),
    ({"validation_fraction": True}, "validation_fraction"), ({"test_fraction": 0}, "test_fraction"),
    ({"validation_fraction": 0.5, "test_fraction": 0.5}, "validation_fraction \\+ test_fraction"),
])
def test_bad_config_raises_naming_the_field(kwargs, field):
    with pytest.raises(ValueError, match=field):
        TextConfig(**kwargs)


def test_bad_generate_arguments_raise():
    with pytest.raises(ValueError, match="num_examples"):
        Text().generate(0, seed=0)
    with pytest.raises(ValueError, match="exactly one of seed and generator"):
        Text().generate_train(1)
    with pytest.raises(ValueError, match="seq_len"):
        Text(TextConfig(seq_len=10_000_000)).generate(1, seed=0)
    with pytest.raises(ValueError, match="validation_fraction"):
        split_corpus(1.5)
    with pytest.raises(ValueError, match="test_fraction"):
        split_corpus(0.04, -1)


def test_task_interface():
    task = Text()
    assert isinstance(task, Task) and task.name == "text"
    assert task.vocab_size == 256 and task.seq_len == 128 and TextConfig().validation_fraction == 0.04


def test_metric_uniform_is_eight_bits_and_perfect_is_zero():
    task = Text(TextConfig(seq_len=16))
    inputs, targets = task.generate(6, seed=0)
    assert task.metric(torch.zeros(6, 16, 256), targets)["bits_per_byte"] == 8.0  # log2(256), exactly
    perfect = 100.0 * torch.nn.functional.one_hot(targets, 256).float()  # [N, T, V]
    metrics = task.metric(perfect, targets)
    assert metrics["accuracy"] == 1.0 and metrics["bits_per_byte"] == pytest.approx(0.0, abs=1e-30)
    assert set(metrics) == {"bits_per_byte", "accuracy"}


def test_metric_is_cross_entropy_over_ln2_on_labelled_positions_only():
    generator = torch.Generator().manual_seed(0)
    logits = torch.randn(70, 5, 256, generator=generator)  # 70 rows: more than one chunk
    targets = torch.randint(256, (70, 5), generator=generator)
    expected = torch.nn.functional.cross_entropy(logits.double().flatten(0, 1), targets.flatten()) / math.log(2)
    assert bits_per_byte(logits, targets) == pytest.approx(float(expected), rel=1e-12)
    masked = targets.clone()
    masked[:, :2] = -100  # IGNORE_INDEX
    kept = torch.nn.functional.cross_entropy(logits[:, 2:].double().flatten(0, 1), targets[:, 2:].flatten())
    assert bits_per_byte(logits, masked) == pytest.approx(float(kept) / math.log(2), rel=1e-12)
    with pytest.raises(ValueError, match="targets"):
        bits_per_byte(logits, targets[:, :3])


@pytest.mark.parametrize("text", ["", "hello", "naïve café — λx. x ∘ f ✓", "line\nbreak\ttab"])
def test_encode_decode_round_trip(text):
    ids = encode(text)
    assert ids.dtype == torch.int64 and ids.tolist() == list(text.encode("utf-8"))
    assert decode(ids) == text and decode(ids.tolist()) == text


def test_decode_replaces_invalid_utf8_and_rejects_bad_ids():
    assert decode([104, 0xE2, 0x80]) == "h\ufffd"  # a truncated 3-byte character
    with pytest.raises(ValueError, match="ids"):
        decode([256])
    with pytest.raises(ValueError, match="text"):
        encode(b"bytes")
