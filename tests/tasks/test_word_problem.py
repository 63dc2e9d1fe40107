"""The S_n word problem (src/regmem/tasks/word_problem.py) against brute force on permutation tuples: the
multiplication table, the prefix products of generated sequences, the worked example, seeding, validation and the
metric."""

from __future__ import annotations

import doctest
import itertools

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

import regmem.tasks.word_problem
from regmem.tasks import Task
from regmem.tasks.word_problem import (
    WordProblem,
    WordProblemConfig,
    multiplication_table,
    permutations,
    word_problem,
)


def compose(p: tuple[int, ...], q: tuple[int, ...]) -> tuple[int, ...]:
    """The module's convention, written out: q acts first."""
    return tuple(p[q[i]] for i in range(len(p)))


def brute_prefix_products(degree: int, row: list[int]) -> list[int]:
    perms = list(itertools.permutations(range(degree)))  # lexicographic, as the module claims
    product = tuple(range(degree))
    out = []
    for token in row:
        product = compose(product, perms[token])
        out.append(perms.index(product))
    return out


@pytest.mark.parametrize("degree", [2, 3, 4, 5])
def test_multiplication_table_is_composition_of_lexicographic_permutations(degree):
    perms = list(itertools.permutations(range(degree)))
    assert permutations(degree) == perms
    table = multiplication_table(degree).tolist()
    assert table == [[perms.index(compose(p, q)) for q in perms] for p in perms]


def test_s5_table_is_a_non_abelian_group_with_identity_zero():
    table = multiplication_table(5)  # [120, 120]
    V = table.shape[0]
    assert V == 120
    assert torch.equal(table[0], torch.arange(V)) and torch.equal(table[:, 0], torch.arange(V))  # identity
    assert all(torch.equal(table[a].sort().values, torch.arange(V)) for a in range(V))  # Latin square: rows
    assert all(torch.equal(table[:, b].sort().values, torch.arange(V)) for b in range(V))  # and columns
    a, b, c = torch.randint(V, (3, 2000), generator=torch.Generator().manual_seed(0))
    assert torch.equal(table[table[a, b], c], table[a, table[b, c]])  # associative
    assert not torch.equal(table, table.T)  # order matters: a bag of tokens cannot solve it


@given(degree=st.integers(2, 5), seq_len=st.integers(1, 40), num_examples=st.integers(1, 4), seed=st.integers(0, 99))
def test_targets_are_brute_force_prefix_products(degree, seq_len, num_examples, seed):
    inputs, targets = word_problem(WordProblemConfig(degree=degree, seq_len=seq_len), num_examples, seed=seed)
    assert inputs.dtype == targets.dtype == torch.int64
    assert inputs.shape == targets.shape == (num_examples, seq_len)
    assert int(inputs.min()) >= 0 and int(inputs.max()) < WordProblemConfig(degree=degree).vocab_size
    for row_inputs, row_targets in zip(inputs.tolist(), targets.tolist(), strict=True):
        assert row_targets == brute_prefix_products(degree, row_inputs)


def test_worked_example_and_doctest():
    table = multiplication_table(3)
    assert int(table[1, 2]) == 4  # the module docstring's S3 example: (0,2,1) after (1,0,2) is (2,0,1)
    assert brute_prefix_products(3, [1, 2]) == [1, 4]
    results = doctest.testmod(regmem.tasks.word_problem)
    assert results.attempted > 0 and results.failed == 0


def test_inputs_are_uniform_over_the_group():
    inputs, _ = word_problem(WordProblemConfig(degree=3, seq_len=100), 600, seed=1)  # 60,000 draws of 6 tokens
    counts = torch.bincount(inputs.flatten(), minlength=6).double()
    assert (counts / counts.sum() - 1 / 6).abs().max() < 0.01  # 6.6 standard deviations of a proportion


def test_seeding_is_pure():
    config = WordProblemConfig(seq_len=16)
    torch.manual_seed(123)
    before = torch.rand(1)
    a = word_problem(config, 3, seed=5)
    b = word_problem(config, 3, generator=torch.Generator().manual_seed(5))
    torch.manual_seed(123)
    assert torch.equal(torch.rand(1), before), "the global RNG is neither read nor advanced"
    assert all(torch.equal(x, y) for x, y in zip(a, b, strict=True))
    assert not torch.equal(a[0], word_problem(config, 3, seed=6)[0])


@pytest.mark.parametrize(("kwargs", "field"), [
    ({"degree": 1}, "degree"), ({"degree": 7}, "degree"), ({"degree": 5.0}, "degree"),
    ({"seq_len": 0}, "seq_len"), ({"seq_len": True}, "seq_len"),
])
def test_bad_config_raises_naming_the_field(kwargs, field):
    with pytest.raises(ValueError, match=field):
        WordProblemConfig(**kwargs)


def test_bad_generate_arguments_raise():
    with pytest.raises(ValueError, match="num_examples"):
        word_problem(WordProblemConfig(), 0, seed=0)
    with pytest.raises(ValueError, match="exactly one of seed and generator"):
        word_problem(WordProblemConfig(), 1)


def test_task_interface_length_split_and_metric():
    task = WordProblem(WordProblemConfig(degree=4, seq_len=8))
    assert isinstance(task, Task) and task.vocab_size == 24 and task.seq_len == 8
    longer = task.with_seq_len(32)
    assert longer.config.degree == 4 and longer.seq_len == 32
    inputs, targets = longer.generate(5, seed=0)
    assert inputs.shape == (5, 32)
    perfect = torch.nn.functional.one_hot(targets, 24).float()  # [N, T, V]
    assert task.metric(perfect, targets) == {"accuracy": 1.0, "final_accuracy": 1.0}
    wrong_last = perfect.clone()
    wrong_last[:, -1] = torch.nn.functional.one_hot((targets[:, -1] + 1) % 24, 24).float()
    metrics = task.metric(wrong_last, targets)
    assert metrics["final_accuracy"] == 0.0 and metrics["accuracy"] == pytest.approx(31 / 32)
