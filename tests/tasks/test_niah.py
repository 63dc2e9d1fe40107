"""The tiny-vocabulary NIAH (src/regmem/tasks/niah.py) against a brute-force oracle that scans each generated row
for its needles and query: placement at the requested depth, the queried key and its value(s) as the answer
targets, distractors with other keys, values in haystack order; plus the token layout, the worked example,
seeding, validation and the metric."""

from __future__ import annotations

import doctest
from dataclasses import replace

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

import regmem.tasks.niah
from regmem.tasks import Task
from regmem.tasks.base import IGNORE_INDEX
from regmem.tasks.niah import (
    IS,
    NEEDLE,
    NIAH_TASKS,
    QUERY,
    MultikeyNIAH,
    MultikeyNIAHConfig,
    MultivalueNIAH,
    MultivalueNIAHConfig,
    NIAHConfig,
    SingleNIAH,
    niah,
)


def scan(config: NIAHConfig, row: list[int]) -> tuple[list[tuple[int, list[int], list[int]]], list[int]]:
    """The oracle: every needle of the haystack as (start, key, value), and the tail's queried key."""
    K, L, H = config.key_len, config.value_len, config.haystack_len
    needles = []
    for p in range(H):
        if row[p] == NEEDLE:
            assert row[p + 1 + K] == IS, "a NEEDLE marker is followed by a key and IS"
            needles.append((p, row[p + 1 : p + 1 + K], row[p + 2 + K : p + 2 + K + L]))
    assert row[H] == QUERY and row[H + 1 + K] == IS, "the tail is QUERY key IS"
    return needles, row[H + 1 : H + 1 + K]


def oracle_answer(config: NIAHConfig, row: list[int]) -> tuple[list[int], list[int]]:
    """(the answer the row asks for, the starts of the needles carrying the queried key), by brute force."""
    needles, query = scan(config, row)
    assert len(needles) == config.num_needles
    queried = [(start, value) for start, key, value in needles if key == query]
    others = [key for _, key, _ in needles if key != query]
    if config.variant == "multivalue":
        assert len(queried) == config.num_needles, "every needle carries the one key"
        assert len({tuple(v) for _, v in queried}) == config.num_needles, "values are distinct"
    else:
        assert len(queried) == 1, "exactly one needle carries the queried key"
        assert len({tuple(k) for k in others}) == len(others) == config.num_needles - 1, "distractor keys differ"
    return [token for _, value in sorted(queried) for token in value], [start for start, _ in queried]


configs = st.builds(
    lambda variant, needles, key_len, value_len, extra, depth: NIAHConfig(
        variant=variant, num_needles=1 if variant == "single" else needles, key_len=key_len, value_len=value_len,
        num_key_tokens=5, num_value_tokens=5, num_filler_tokens=7, depth=depth,
        seq_len=key_len + value_len * (needles if variant == "multivalue" else 1) + 1
        + ((1 if variant == "single" else needles) + 1) * (key_len + value_len + 2) + extra,
    ),
    st.sampled_from(["single", "multikey", "multivalue"]), st.integers(1, 4), st.integers(1, 3), st.integers(1, 3),
    st.integers(0, 40), st.one_of(st.none(), st.floats(0, 1)),
)


@given(config=configs, num_examples=st.integers(1, 6), seed=st.integers(0, 99))
def test_answer_targets_are_the_brute_force_needles(config, num_examples, seed):
    inputs, targets = niah(config, num_examples, seed=seed)
    assert inputs.dtype == targets.dtype == torch.int64
    assert inputs.shape == targets.shape == (num_examples, config.seq_len)
    A, T, H, n = config.answer_len, config.seq_len, config.haystack_len, config.needle_len
    for row, row_targets in zip(inputs.tolist(), targets.tolist(), strict=True):
        answer, starts = oracle_answer(config, row)
        assert row_targets[T - A :] == answer
        assert row_targets[: T - A] == [IGNORE_INDEX] * (T - A), "no loss outside the answer"
        assert row[T - A + 1 :] == answer[:-1], "the answer is fed back token by token"
        if config.depth is not None:
            assert round(config.depth * (H - n)) in starts, "the queried needle sits at the requested depth"
        needle_positions = {p + i for p, _, _ in scan(config, row)[0] for i in range(n)}
        assert len(needle_positions) == config.num_needles * n, "needles never overlap"
        filler = [row[p] for p in range(H) if p not in needle_positions]
        assert all(config.filler_offset <= token < config.vocab_size for token in filler)


@pytest.mark.parametrize("task_class", [SingleNIAH, MultikeyNIAH, MultivalueNIAH])
@pytest.mark.parametrize("seq_len", [64, 97, 256])
def test_depth_puts_the_queried_needle_at_its_relative_position(task_class, seq_len):
    task = task_class().with_seq_len(seq_len)
    H, n = task.config.haystack_len, task.config.needle_len
    for depth in (0.0, 0.1, 0.25, 0.5, 0.75, 0.9, 1.0):
        inputs, _ = task.with_depth(depth).generate(8, seed=3)
        expected = round(depth * (H - n))
        for row in inputs.tolist():
            _, starts = oracle_answer(task.config, row)
            assert expected in starts
        assert abs(expected / (H - n) - depth) <= 0.5 / (H - n) + 1e-12, "± rounding: half a token"
    first, last = (task.with_depth(d).generate(4, seed=0)[0] for d in (0.0, 1.0))
    assert (first[:, 0] == NEEDLE).all(), "depth 0: the needle is the first token"
    assert (last[:, H - n] == NEEDLE).all(), "depth 1: the needle ends where the tail begins"


def test_uniform_depth_spreads_the_queried_needle_over_the_haystack():
    config = MultikeyNIAHConfig(seq_len=96)
    inputs, _ = niah(config, 800, seed=0)
    starts = torch.tensor([oracle_answer(config, row)[1][0] for row in inputs.tolist()], dtype=torch.float64)
    span = config.haystack_len - config.needle_len
    assert abs(starts.mean().item() / span - 0.5) < 0.05  # uniform on [0, span]: sd of the mean 0.29/sqrt(800)
    assert starts.min().item() < 0.05 * span and starts.max().item() > 0.95 * span


def test_multivalue_returns_every_value_in_haystack_order():
    config = MultivalueNIAHConfig(seq_len=128, num_needles=3, value_len=2)
    inputs, targets = niah(config, 20, seed=4)
    for row, row_targets in zip(inputs.tolist(), targets.tolist(), strict=True):
        needles, query = scan(config, row)
        assert [key for _, key, _ in needles] == [query] * 3
        assert row_targets[-6:] == [token for _, _, value in needles for token in value]


def test_token_ranges_are_disjoint_and_cover_the_vocabulary():
    config = NIAHConfig()
    assert (NEEDLE, IS, QUERY) == (0, 1, 2)
    assert config.key_offset == 3 and config.value_offset == 3 + 16 and config.filler_offset == 3 + 32
    assert config.vocab_size == 3 + 16 + 16 + 32 == 67
    inputs, targets = niah(MultikeyNIAHConfig(), 50, seed=1)
    keys = inputs[:, 1:3][inputs[:, 0] == NEEDLE]
    assert int(inputs.max()) < config.vocab_size and int(inputs.min()) >= 0
    answers = targets[targets != IGNORE_INDEX]
    assert ((answers >= config.value_offset) & (answers < config.filler_offset)).all()
    tail_keys = inputs[:, -4:-2]  # QUERY k1 k2 IS v1 in the last five tokens
    assert ((tail_keys >= config.key_offset) & (tail_keys < config.value_offset)).all()
    assert ((keys >= config.key_offset) & (keys < config.value_offset)).all()


def test_worked_example_token_by_token_and_doctests():
    config = NIAHConfig(variant="multikey", seq_len=17, num_needles=2, key_len=1, value_len=1, num_key_tokens=4,
                        num_value_tokens=4, num_filler_tokens=4, depth=0.5)
    inputs, targets = niah(config, 1, seed=0)
    assert inputs.tolist() == [[11, 14, 12, 11, 14, 0, 3, 1, 8, 14, 0, 5, 1, 9, 2, 3, 1]]
    assert targets.tolist() == [[-100] * 16 + [8]]
    assert config.haystack_len == 14 and config.needle_len == 4 and round(0.5 * (14 - 4)) == 5
    assert oracle_answer(config, inputs[0].tolist()) == ([8], [5])
    results = doctest.testmod(regmem.tasks.niah)
    assert results.attempted > 0 and results.failed == 0


def test_seeding_is_pure():
    config = MultivalueNIAHConfig(seq_len=64)
    before = torch.get_rng_state()
    a = niah(config, 5, seed=7)
    b = niah(config, 5, generator=torch.Generator().manual_seed(7))
    assert torch.equal(torch.get_rng_state(), before), "the global RNG is neither read nor advanced"
    assert all(torch.equal(x, y) for x, y in zip(a, b, strict=True))
    assert not torch.equal(a[0], niah(config, 5, seed=8)[0])


@pytest.mark.parametrize(("kwargs", "field"), [
    ({"variant": "multi"}, "variant"), ({"seq_len": 16}, "seq_len"), ({"seq_len": 128.0}, "seq_len"),
    ({"num_needles": 2}, "num_needles"), ({"variant": "multikey", "num_needles": 0}, "num_needles"),
    ({"key_len": 0}, "key_len"), ({"value_len": True}, "value_len"), ({"num_key_tokens": 0}, "num_key_tokens"),
    ({"num_value_tokens": 0}, "num_value_tokens"), ({"num_filler_tokens": 0}, "num_filler_tokens"),
    ({"depth": 1.5}, "depth"), ({"depth": -0.1}, "depth"), ({"depth": True}, "depth"), ({"depth": "0.5"}, "depth"),
    ({"variant": "multikey", "num_needles": 5, "key_len": 1, "num_key_tokens": 4}, "num_key_tokens"),
    ({"variant": "multivalue", "num_needles": 5, "value_len": 1, "num_value_tokens": 4}, "num_value_tokens"),
])
def test_bad_config_raises_naming_the_field(kwargs, field):
    with pytest.raises(ValueError, match=field):
        NIAHConfig(**kwargs)


def test_bad_generate_arguments_raise():
    with pytest.raises(ValueError, match="num_examples"):
        niah(NIAHConfig(), 0, seed=0)
    with pytest.raises(ValueError, match="exactly one of seed and generator"):
        niah(NIAHConfig(), 1)
    with pytest.raises(ValueError, match="variant"):
        MultikeyNIAH(NIAHConfig())


def test_registry_task_interface_and_length_and_depth_splits():
    assert NIAH_TASKS == {"niah_single": SingleNIAH, "niah_multikey": MultikeyNIAH,
                          "niah_multivalue": MultivalueNIAH}
    for name, task_class in NIAH_TASKS.items():
        task = task_class()
        assert isinstance(task, Task) and task.name == name and task.config.variant == name.removeprefix("niah_")
        assert isinstance(task.config, task_class.config_class) and task.seq_len == 128 and task.vocab_size == 67
        moved = task.with_seq_len(256).with_depth(0.25)
        assert type(moved) is task_class and moved.seq_len == 256 and moved.config.depth == 0.25
        assert moved.config == replace(task.config, seq_len=256, depth=0.25)
        assert moved.with_depth(None).config.depth is None
    assert MultikeyNIAHConfig().num_needles == MultivalueNIAHConfig().num_needles == 4
    inputs, targets = MultivalueNIAH().generate(3, seed=0)
    assert inputs.shape == targets.shape == (3, 128)


def test_metric_scores_answer_tokens_and_whole_answers():
    task = MultivalueNIAH(MultivalueNIAHConfig(seq_len=64, num_needles=2, value_len=2))  # 4 answer tokens
    _, targets = task.generate(4, seed=0)
    perfect = torch.nn.functional.one_hot(targets.clamp(min=0), task.vocab_size).float()  # [N, T, V]
    assert task.metric(perfect, targets) == {"accuracy": 1.0, "exact_match": 1.0}
    one_wrong = perfect.clone()
    one_wrong[0, -1] = one_wrong[0, -1].roll(1)  # row 0: its last answer token wrong
    one_wrong[1, :-4] = one_wrong[1, :-4].roll(1, dims=-1)  # row 1: only unlabelled positions wrong
    assert task.metric(one_wrong, targets) == {"accuracy": 15 / 16, "exact_match": 3 / 4}
    every_row = perfect.clone()
    every_row[:, -2] = every_row[:, -2].roll(1, dims=-1)  # one token of every answer wrong
    assert task.metric(every_row, targets) == {"accuracy": 0.75, "exact_match": 0.0}
