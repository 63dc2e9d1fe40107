"""The state-tracking tasks (src/regmem/tasks/state_tracking.py) against brute-force oracles written in plain Python:
a running count for parity, a walk on the cycle for cycle navigation, and Python's `eval` of every prefix with
exact integers for modular arithmetic; plus the worked examples, seeding, validation and the metric."""

from __future__ import annotations

import doctest

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

import regmem.tasks.state_tracking
from regmem.tasks import Task
from regmem.tasks.base import IGNORE_INDEX
from regmem.tasks.state_tracking import (
    STATE_TRACKING_TASKS,
    CycleNavigation,
    CycleNavigationConfig,
    ModularArithmetic,
    ModularArithmeticConfig,
    Parity,
    ParityConfig,
    cycle_navigation,
    cycle_navigation_targets,
    modular_arithmetic,
    modular_arithmetic_targets,
    parity,
    parity_targets,
)

SYMBOL = {0: "0", 1: "1", 2: "2", 3: "3", 4: "4", 5: "+", 6: "-", 7: "*"}  # the documented token layout


def brute_parity(row: list[int]) -> list[int]:
    ones, out = 0, []
    for bit in row:
        ones += bit == 1
        out.append(ones % 2)
    return out


def brute_cycle(row: list[int]) -> list[int]:
    position, out = 0, []
    for action in row:
        position = (position + {0: -1, 1: 0, 2: +1}[action]) % 5
        out.append(position)
    return out


def brute_modular(row: list[int]) -> list[int]:
    """Python evaluates `*` before `+` and `-`, left to right, in exact integers; `%` then maps into 0..4."""
    text = "".join(SYMBOL[token] for token in row)
    return [eval(text[: t + 1]) % 5 if t % 2 == 0 else IGNORE_INDEX for t in range(len(row))]  # noqa: S307


def check_rows(inputs, targets, oracle):
    assert inputs.dtype == targets.dtype == torch.int64 and inputs.shape == targets.shape
    for row_inputs, row_targets in zip(inputs.tolist(), targets.tolist(), strict=True):
        assert row_targets == oracle(row_inputs)


# --------------------------------------------------------------------------------------------- brute force oracles


def test_parity_matches_brute_force_on_many_rows():
    inputs, targets = parity(ParityConfig(seq_len=64), 200, seed=0)
    assert set(inputs.unique().tolist()) == {0, 1}
    check_rows(inputs, targets, brute_parity)


def test_cycle_navigation_matches_brute_force_on_many_rows():
    inputs, targets = cycle_navigation(CycleNavigationConfig(seq_len=64), 200, seed=0)
    assert set(inputs.unique().tolist()) == {0, 1, 2} and set(targets.unique().tolist()) == {0, 1, 2, 3, 4}
    check_rows(inputs, targets, brute_cycle)


def test_modular_arithmetic_matches_eval_on_many_rows():
    inputs, targets = modular_arithmetic(ModularArithmeticConfig(seq_len=65), 200, seed=0)
    assert set(inputs[:, 0::2].unique().tolist()) == {0, 1, 2, 3, 4}
    assert set(inputs[:, 1::2].unique().tolist()) == {5, 6, 7}
    assert bool((targets[:, 1::2] == IGNORE_INDEX).all())
    check_rows(inputs, targets, brute_modular)


@given(seq_len=st.integers(1, 40), num_examples=st.integers(1, 4), seed=st.integers(0, 99))
def test_parity_and_cycle_targets_are_brute_force_property(seq_len, num_examples, seed):
    inputs, targets = parity(ParityConfig(seq_len=seq_len), num_examples, seed=seed)
    assert inputs.shape == (num_examples, seq_len)
    check_rows(inputs, targets, brute_parity)
    inputs, targets = cycle_navigation(CycleNavigationConfig(seq_len=seq_len), num_examples, seed=seed)
    assert inputs.shape == (num_examples, seq_len)
    check_rows(inputs, targets, brute_cycle)


@given(half=st.integers(0, 20), num_examples=st.integers(1, 4), seed=st.integers(0, 99))
def test_modular_arithmetic_targets_are_eval_property(half, num_examples, seed):
    seq_len = 2 * half + 1
    inputs, targets = modular_arithmetic(ModularArithmeticConfig(seq_len=seq_len), num_examples, seed=seed)
    assert inputs.shape == (num_examples, seq_len)
    check_rows(inputs, targets, brute_modular)


@given(rows=st.lists(st.lists(st.integers(0, 7), min_size=1, max_size=15).map(lambda r: r[: len(r) - 1 + len(r) % 2]),
                     min_size=1, max_size=3))
def test_modular_targets_of_hand_drawn_expressions(rows):
    """Any alternation of numbers and operators, not only the generator's draws (rows padded to one odd length)."""
    length = max(len(r) for r in rows)
    rows = [[(t % 5 if i % 2 == 0 else 5 + t % 3) for i, t in enumerate(r + [0] * (length - len(r)))] for r in rows]
    assert modular_arithmetic_targets(torch.tensor(rows)).tolist() == [brute_modular(r) for r in rows]


def test_inputs_are_uniform():
    bits, _ = parity(ParityConfig(seq_len=100), 300, seed=1)
    assert abs(bits.double().mean().item() - 0.5) < 0.01
    actions, _ = cycle_navigation(CycleNavigationConfig(seq_len=100), 300, seed=1)
    assert (torch.bincount(actions.flatten(), minlength=3).double() / actions.numel() - 1 / 3).abs().max() < 0.01
    expressions, _ = modular_arithmetic(ModularArithmeticConfig(seq_len=201), 300, seed=1)
    numbers, operators = expressions[:, 0::2].flatten(), expressions[:, 1::2].flatten() - 5
    assert (torch.bincount(numbers, minlength=5).double() / numbers.numel() - 1 / 5).abs().max() < 0.01
    assert (torch.bincount(operators, minlength=3).double() / operators.numel() - 1 / 3).abs().max() < 0.01


# ------------------------------------------------------------------------------------------------ worked examples


def test_worked_examples_token_by_token():
    assert parity_targets(torch.tensor([[1, 0, 1, 1]])).tolist() == [[1, 1, 0, 1]]
    assert brute_parity([1, 0, 1, 1]) == [1, 1, 0, 1]
    assert cycle_navigation_targets(torch.tensor([[2, 2, 0, 1, 0, 0, 0]])).tolist() == [[1, 2, 1, 1, 0, 4, 3]]
    assert brute_cycle([2, 2, 0, 1, 0, 0, 0]) == [1, 2, 1, 1, 0, 4, 3]
    expression = [1, 5, 2, 7, 3, 6, 4]  # 1 + 2 × 3 - 4
    assert "".join(SYMBOL[t] for t in expression) == "1+2*3-4"
    assert modular_arithmetic_targets(torch.tensor([expression])).tolist() == [[1, -100, 3, -100, 2, -100, 3]]
    assert brute_modular(expression) == [1, -100, 3, -100, 2, -100, 3]


def test_precedence_and_negative_values():
    """× binds tighter (1 + 2 × 3 = 2, not (1 + 2) × 3 = 4); negative values wrap (Delétang et al.: 1 - 1 - 1 = 4)."""
    assert modular_arithmetic_targets(torch.tensor([[1, 5, 2, 7, 3]]))[0, -1].item() == 2
    assert modular_arithmetic_targets(torch.tensor([[1, 6, 1, 6, 1]]))[0, -1].item() == 4
    assert modular_arithmetic_targets(torch.tensor([[0, 7, 1, 5, 4, 7, 3, 6, 2]]))[0, -1].item() == 0
    assert modular_arithmetic_targets(torch.tensor([[3, 6, 4, 7, 2, 7, 4]]))[0, -1].item() == (3 - 32) % 5


def test_doctests():
    results = doctest.testmod(regmem.tasks.state_tracking)
    assert results.attempted >= 3 and results.failed == 0


# ----------------------------------------------------------------------------------------- seeding and validation

GENERATORS = [
    (parity, ParityConfig(seq_len=16)),
    (cycle_navigation, CycleNavigationConfig(seq_len=16)),
    (modular_arithmetic, ModularArithmeticConfig(seq_len=17)),
]


@pytest.mark.parametrize(("fn", "config"), GENERATORS)
def test_seeding_is_pure(fn, config):
    state = torch.get_rng_state()
    a = fn(config, 4, seed=5)
    b = fn(config, 4, generator=torch.Generator().manual_seed(5))
    assert torch.equal(torch.get_rng_state(), state), "the global RNG is neither read nor advanced"
    assert all(torch.equal(x, y) for x, y in zip(a, b, strict=True))
    assert not torch.equal(a[0], fn(config, 4, seed=6)[0])


@pytest.mark.parametrize(("fn", "config"), GENERATORS)
def test_bad_generate_arguments_raise(fn, config):
    with pytest.raises(ValueError, match="num_examples"):
        fn(config, 0, seed=0)
    with pytest.raises(ValueError, match="exactly one of seed and generator"):
        fn(config, 1)
    with pytest.raises(ValueError, match="exactly one of seed and generator"):
        fn(config, 1, seed=0, generator=torch.Generator())


@pytest.mark.parametrize("config_class", [ParityConfig, CycleNavigationConfig, ModularArithmeticConfig])
@pytest.mark.parametrize("seq_len", [0, -3, True, 5.0])
def test_bad_config_raises_naming_the_field(config_class, seq_len):
    with pytest.raises(ValueError, match="seq_len"):
        config_class(seq_len=seq_len)


@pytest.mark.parametrize("seq_len", [2, 64])
def test_even_modular_arithmetic_length_raises(seq_len):
    with pytest.raises(ValueError, match="seq_len must be odd"):
        ModularArithmeticConfig(seq_len=seq_len)
    with pytest.raises(ValueError, match="odd"):
        modular_arithmetic_targets(torch.zeros(1, seq_len, dtype=torch.int64))


@pytest.mark.parametrize("targets_fn", [parity_targets, cycle_navigation_targets, modular_arithmetic_targets])
def test_bad_target_inputs_raise(targets_fn):
    with pytest.raises(ValueError, match=r"inputs must be an int64 tensor of shape \[N, T\]"):
        targets_fn(torch.zeros(5, dtype=torch.int64))
    with pytest.raises(ValueError, match="inputs"):
        targets_fn(torch.zeros(1, 5))


# ------------------------------------------------------------------------------------- task interface and metric


@pytest.mark.parametrize(("task_class", "vocab_size", "seq_len", "longer"), [
    (Parity, 2, 64, 128), (CycleNavigation, 5, 64, 256), (ModularArithmetic, 8, 65, 129),
])
def test_task_interface_and_length_split(task_class, vocab_size, seq_len, longer):
    task = task_class()
    assert isinstance(task, Task) and STATE_TRACKING_TASKS[task.name] is task_class
    assert task.vocab_size == vocab_size and task.seq_len == seq_len
    assert task_class.config_class(**{"seq_len": seq_len}) == task.config
    split = task.with_seq_len(longer)
    assert isinstance(split, task_class) and split.seq_len == longer and task.seq_len == seq_len
    inputs, targets = split.generate(3, seed=0)
    assert inputs.shape == targets.shape == (3, longer)
    assert int(inputs.min()) >= 0 and int(inputs.max()) < vocab_size
    labelled = targets[targets != IGNORE_INDEX]
    assert int(labelled.min()) >= 0 and int(labelled.max()) < vocab_size
    assert torch.equal(split.generate(3, generator=torch.Generator().manual_seed(0))[0], inputs)


def test_registry_names():
    assert set(STATE_TRACKING_TASKS) == {"parity", "cycle_navigation", "modular_arithmetic"}
    with pytest.raises(ValueError, match="seq_len"):
        ModularArithmetic().with_seq_len(128)


@pytest.mark.parametrize("task", [Parity(ParityConfig(8)), CycleNavigation(CycleNavigationConfig(8))])
def test_metric_on_hand_made_logits_every_position_labelled(task):
    _, targets = task.generate(4, seed=0)  # [4, 8]
    perfect = torch.nn.functional.one_hot(targets, task.vocab_size).float()  # [N, T, V]
    assert task.metric(perfect, targets) == {"accuracy": 1.0, "final_accuracy": 1.0}
    wrong_last = perfect.clone()
    wrong_last[:, -1] = torch.nn.functional.one_hot((targets[:, -1] + 1) % task.vocab_size, task.vocab_size).float()
    assert task.metric(wrong_last, targets) == {"accuracy": pytest.approx(7 / 8), "final_accuracy": 0.0}


def test_metric_of_modular_arithmetic_counts_number_positions_only():
    task = ModularArithmetic(ModularArithmeticConfig(seq_len=7))
    targets = torch.tensor([[1, -100, 3, -100, 2, -100, 3], [0, -100, 4, -100, 4, -100, 1]])
    logits = torch.zeros(2, 7, 8)  # argmax 0 everywhere: right only at row 1, position 0
    assert task.metric(logits, targets) == {"accuracy": pytest.approx(1 / 8), "final_accuracy": 0.0}
    logits[:, -1] = torch.nn.functional.one_hot(targets[:, -1], 8).float()  # the whole expression right in both rows
    logits[0, 1] = torch.nn.functional.one_hot(torch.tensor(7), 8).float()  # operator positions do not count
    assert task.metric(logits, targets) == {"accuracy": pytest.approx(3 / 8), "final_accuracy": 1.0}
