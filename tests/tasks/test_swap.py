"""Swap tracking (src/regmem/tasks/swap.py), the S5 swap task of arXiv:2505.19488 Sec. 3.2: the worked example
token by token, targets against Listing 2's loop written out on Python lists, the lexicographic vocabulary,
seeding, validation, the task interface, and the doubling curriculum."""

from __future__ import annotations

import doctest

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

import regmem.tasks.swap
from regmem.tasks import TASKS, Task
from regmem.tasks.swap import (
    DoublingCurriculum,
    SwapTracking,
    SwapTrackingConfig,
    swap_pairs,
    swap_states,
    swap_tracking,
)


def listing2_labels(num_elements: int, row: list[int]) -> list[int]:
    """Listing 2's generator loop on Python lists: swap the two positions, record the element at position 0."""
    pairs = [(i, j) for i in range(num_elements) for j in range(i + 1, num_elements)]
    perm = list(range(num_elements))
    labels = []
    for token in row:
        i, j = pairs[token]
        perm[i], perm[j] = perm[j], perm[i]
        labels.append(perm[0])
    return labels


def test_vocabulary_is_the_ten_lexicographic_pairs_for_five_elements():
    assert swap_pairs(5) == [(0, 1), (0, 2), (0, 3), (0, 4), (1, 2), (1, 3), (1, 4), (2, 3), (2, 4), (3, 4)]
    config = SwapTrackingConfig()
    assert (config.num_elements, config.seq_len) == (5, 16)  # Listing 2's defaults
    assert (config.num_swaps, config.num_classes, config.vocab_size) == (10, 5, 10)
    inputs, targets = swap_tracking(config, 500, seed=0)  # 8000 draws
    assert sorted(set(inputs.flatten().tolist())) == list(range(10))
    assert sorted(set(targets.flatten().tolist())) == list(range(5))


def test_worked_example_token_by_token_and_doctests():
    inputs = torch.tensor([[0, 4, 9, 1]])  # (0,1), (1,2), (3,4), (0,2): the module docstring's example
    states = swap_states(inputs, 5)
    assert states.tolist() == [[[1, 0, 2, 3, 4], [1, 2, 0, 3, 4], [1, 2, 0, 4, 3], [0, 2, 1, 4, 3]]]
    assert states[..., 0].tolist() == [[1, 1, 1, 0]] == [listing2_labels(5, [0, 4, 9, 1])]
    generated_inputs, generated_targets = swap_tracking(SwapTrackingConfig(seq_len=6), 1, seed=0)
    assert generated_inputs.tolist() == [[4, 9, 3, 0, 3, 9]]  # the `swap_tracking` doctest
    assert generated_targets.tolist() == [[0, 0, 3, 2, 0, 0]] == [listing2_labels(5, [4, 9, 3, 0, 3, 9])]
    results = doctest.testmod(regmem.tasks.swap)
    assert results.attempted > 0 and results.failed == 0


@given(num_elements=st.integers(2, 16), seq_len=st.integers(1, 40), num_examples=st.integers(1, 4),
       seed=st.integers(0, 99))
def test_targets_equal_listing2_simulation(num_elements, seq_len, num_examples, seed):
    config = SwapTrackingConfig(num_elements=num_elements, seq_len=seq_len)
    inputs, targets = swap_tracking(config, num_examples, seed=seed)
    assert inputs.dtype == targets.dtype == torch.int64
    assert inputs.shape == targets.shape == (num_examples, seq_len)
    assert 0 <= int(inputs.min()) and int(inputs.max()) < config.num_swaps
    for row_inputs, row_targets in zip(inputs.tolist(), targets.tolist(), strict=True):
        assert row_targets == listing2_labels(num_elements, row_inputs)


def test_states_stay_permutations_and_each_swap_exchanges_its_two_positions():
    inputs, _ = swap_tracking(SwapTrackingConfig(num_elements=7, seq_len=30), 16, seed=3)
    states = swap_states(inputs, 7)  # [16, 30, 7]
    assert torch.equal(states.sort(dim=2).values, torch.arange(7).expand(16, 30, 7))
    before = torch.cat([torch.arange(7).expand(16, 1, 7), states[:, :-1]], dim=1)  # [16, 30, 7]
    pairs = torch.tensor(swap_pairs(7))[inputs]  # [16, 30, 2]
    i, j = pairs[..., 0:1], pairs[..., 1:2]
    assert torch.equal(states.gather(2, i), before.gather(2, j))
    assert torch.equal(states.gather(2, j), before.gather(2, i))
    untouched = torch.ones_like(states, dtype=torch.bool).scatter(2, pairs, False)
    assert torch.equal(states[untouched], before[untouched])


def test_swaps_are_uniform_and_six_in_ten_leave_position_zero_alone():
    inputs, _ = swap_tracking(SwapTrackingConfig(seq_len=100), 600, seed=1)  # 60,000 draws of 10 tokens
    counts = torch.bincount(inputs.flatten(), minlength=10).double()
    assert (counts / counts.sum() - 0.1).abs().max() < 0.008  # 6.5 standard deviations of a proportion
    touches_zero = torch.tensor([i == 0 for i, _ in swap_pairs(5)])[inputs]
    assert float(touches_zero.double().mean()) == pytest.approx(0.4, abs=0.01)  # the paper's "6/10 do not"


def test_seeding_is_pure():
    config = SwapTrackingConfig()
    torch.manual_seed(123)
    before = torch.rand(1)
    a = swap_tracking(config, 3, seed=5)
    b = swap_tracking(config, 3, generator=torch.Generator().manual_seed(5))
    torch.manual_seed(123)
    assert torch.equal(torch.rand(1), before), "the global RNG is neither read nor advanced"
    assert all(torch.equal(x, y) for x, y in zip(a, b, strict=True))
    assert not torch.equal(a[0], swap_tracking(config, 3, seed=6)[0])


@pytest.mark.parametrize(("kwargs", "field"), [
    ({"num_elements": 1}, "num_elements"), ({"num_elements": 129}, "num_elements"),
    ({"num_elements": 5.0}, "num_elements"), ({"seq_len": 0}, "seq_len"), ({"seq_len": True}, "seq_len"),
])
def test_bad_config_raises_naming_the_field(kwargs, field):
    with pytest.raises(ValueError, match=field):
        SwapTrackingConfig(**kwargs)


def test_bad_generate_and_state_arguments_raise():
    with pytest.raises(ValueError, match="num_examples"):
        swap_tracking(SwapTrackingConfig(), 0, seed=0)
    with pytest.raises(ValueError, match="exactly one of seed and generator"):
        swap_tracking(SwapTrackingConfig(), 1)
    with pytest.raises(ValueError, match="inputs must lie in"):
        swap_states(torch.tensor([[10]]), 5)
    with pytest.raises(ValueError, match="inputs must be int64"):
        swap_states(torch.tensor([0, 1]), 5)
    with pytest.raises(ValueError, match="num_elements"):
        swap_pairs(1)


def test_task_interface_length_split_and_metric():
    task = TASKS["swap"](SwapTrackingConfig(num_elements=3, seq_len=8))
    assert isinstance(task, Task) and isinstance(task, SwapTracking) and task.name == "swap"
    assert task.vocab_size == 3 and task.seq_len == 8  # C(3, 2) = 3 swaps, 3 classes
    assert SwapTracking(SwapTrackingConfig(num_elements=2)).vocab_size == 2  # one swap token, two classes
    longer = task.with_seq_len(32)
    assert longer.config.num_elements == 3 and longer.seq_len == 32
    _, targets = longer.generate(5, seed=0)
    perfect = torch.nn.functional.one_hot(targets, 3).float()  # [N, T, V]
    assert task.metric(perfect, targets) == {"accuracy": 1.0, "final_accuracy": 1.0}
    wrong_last = perfect.clone()
    wrong_last[:, -1] = torch.nn.functional.one_hot((targets[:, -1] + 1) % 3, 3).float()
    metrics = task.metric(wrong_last, targets)
    assert metrics["final_accuracy"] == 0.0 and metrics["accuracy"] == pytest.approx(31 / 32)


def test_listing2_curriculum_doubles_strictly_above_the_threshold_without_a_cap():
    curriculum = DoublingCurriculum()
    assert (curriculum.start, curriculum.threshold, curriculum.max_len, curriculum.seq_len) == (16, 0.999, None, 16)
    assert curriculum.update(0.999) is None and curriculum.seq_len == 16  # Listing 2 compares with `>`
    assert [curriculum.update(1.0) for _ in range(8)] == [32, 64, 128, 256, 512, 1024, 2048, 4096]
    assert curriculum.update(0.2) is None and curriculum.seq_len == 4096


def test_figure6_curriculum_stops_at_the_cap_and_clamps_a_doubling_past_it():
    curriculum = DoublingCurriculum(start=32, threshold=0.99, max_len=256)
    assert [curriculum.update(a) for a in (0.98, 0.995, 0.991, 0.999, 1.0, 1.0)] == [None, 64, 128, 256, None, None]
    assert curriculum.seq_len == 256
    odd = DoublingCurriculum(start=24, threshold=0.5, max_len=100)
    assert [odd.update(0.9) for _ in range(4)] == [48, 96, 100, None]
    assert repr(odd) == "DoublingCurriculum(start=24, threshold=0.5, max_len=100, seq_len=100)"


@pytest.mark.parametrize(("kwargs", "field"), [
    ({"start": 0}, "start"), ({"start": 16.0}, "start"), ({"threshold": 1.0}, "threshold"),
    ({"threshold": -0.1}, "threshold"), ({"threshold": True}, "threshold"), ({"max_len": 8}, "max_len"),
])
def test_bad_curriculum_arguments_raise_naming_the_field(kwargs, field):
    with pytest.raises(ValueError, match=field):
        DoublingCurriculum(**kwargs)


@pytest.mark.parametrize("value", [1.5, -0.1, float("nan"), True])
def test_curriculum_rejects_an_accuracy_outside_zero_one(value):
    with pytest.raises(ValueError, match="accuracy"):
        DoublingCurriculum().update(value)
