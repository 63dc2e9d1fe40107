"""MQAR generator (zoology's, src/regmem/tasks/mqar.py) and the task interface: worked example, label/key invariants,
seeding, validation, the gap law, and the accuracy metric."""

from __future__ import annotations

import doctest
import itertools

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

import regmem.tasks.mqar
from regmem.tasks import MQAR, TASKS, MQARConfig, Task, accuracy, multiquery_ar

WORKED_CONFIG = MQARConfig(vocab_size=20, seq_len=16, num_kv_pairs=2, random_non_queries=False)
WORKED_INPUTS = [9, 13, 8, 17, 9, 0, 0, 0, 0, 0, 0, 0, 8, 0, 0, 0]
WORKED_TARGETS = [-100, -100, -100, -100, 13, -100, -100, -100, -100, -100, -100, -100, 17, -100, -100, -100]


def check_mqar_invariants(config: MQARConfig, inputs: torch.Tensor, targets: torch.Tensor) -> None:
    """Everything the generator fixes about one batch, checked row by row."""
    P, C, V = config.num_kv_pairs, config.context_size, config.vocab_size
    assert inputs.dtype == targets.dtype == torch.int64
    assert inputs.shape == targets.shape and inputs.shape[1] == config.seq_len
    for row_inputs, row_targets in zip(inputs.tolist(), targets.tolist(), strict=True):
        keys, values = row_inputs[0 : 2 * P : 2], row_inputs[1 : 2 * P : 2]
        assert len(set(keys)) == P and len(set(values)) == P, "keys and values are distinct within a sequence"
        assert all(1 <= k < V // 2 for k in keys), f"keys {keys} outside [1, {V // 2})"
        assert all(V // 2 <= v < V for v in values), f"values {values} outside [{V // 2}, {V})"
        assert row_inputs[:C] == row_inputs[: 2 * P] * config.num_passes, "context is k1 v1 k2 v2 ... tiled"
        bound = dict(zip(keys, values, strict=True))
        labelled = [t for t, y in enumerate(row_targets) if y != -100]
        assert len(labelled) == P
        assert all(t >= C and (t - C) % 2 == 0 for t in labelled), "queries sit at even offsets after C"
        assert sorted(row_inputs[t] for t in labelled) == sorted(keys), "each key is queried exactly once"
        assert all(row_targets[t] == bound[row_inputs[t]] for t in labelled), "label = value bound to the key"
        if not config.random_non_queries:
            filler = [x for t, x in enumerate(row_inputs) if t >= C and t not in labelled]
            assert filler == [0] * len(filler)


def test_worked_example_token_by_token():
    inputs, targets = multiquery_ar(WORKED_CONFIG, 1, seed=0)
    assert inputs.tolist() == [WORKED_INPUTS]
    assert targets.tolist() == [WORKED_TARGETS]
    task_inputs, task_targets = MQAR(WORKED_CONFIG).generate(1, seed=0)
    assert torch.equal(task_inputs, inputs) and torch.equal(task_targets, targets)


def test_docstring_examples_hold():
    results = doctest.testmod(regmem.tasks.mqar, optionflags=doctest.NORMALIZE_WHITESPACE)
    assert results.attempted > 0 and results.failed == 0
    assert str(WORKED_INPUTS) in regmem.tasks.mqar.__doc__ and str(WORKED_TARGETS) in regmem.tasks.mqar.__doc__


@pytest.mark.parametrize("random_non_queries", [False, True], ids=["zero-filler", "random-filler"])
@pytest.mark.parametrize(
    "config_args",
    [(8192, 64, 4, 1), (8192, 128, 8, 1), (8192, 256, 16, 1), (512, 256, 32, 3), (65, 64, 16, 1)],
    ids=["V8192-T64-P4", "V8192-T128-P8", "V8192-T256-P16", "V512-T256-P32-passes3", "V65-T64-P16-tight"],
)
def test_batch_satisfies_spec_invariants(config_args, random_non_queries):
    vocab_size, seq_len, num_kv_pairs, num_passes = config_args
    config = MQARConfig(vocab_size, seq_len, num_kv_pairs, num_passes=num_passes, random_non_queries=random_non_queries)
    inputs, targets = multiquery_ar(config, 64, seed=7)
    check_mqar_invariants(config, inputs, targets)


@given(
    num_kv_pairs=st.integers(1, 4),
    num_passes=st.integers(1, 3),
    extra_pairs=st.integers(0, 6),
    extra_vocab=st.integers(0, 20),
    power_a=st.floats(0.01, 2.0),
    random_non_queries=st.booleans(),
    num_examples=st.integers(1, 8),
    seed=st.integers(0, 2**31 - 1),
)
def test_small_configs_satisfy_spec_invariants(
    num_kv_pairs, num_passes, extra_pairs, extra_vocab, power_a, random_non_queries, num_examples, seed
):
    seq_len = 2 * num_kv_pairs * (num_passes + 1) + 2 * extra_pairs
    config = MQARConfig(seq_len + 1 + extra_vocab, seq_len, num_kv_pairs, power_a, num_passes, random_non_queries)
    inputs, targets = multiquery_ar(config, num_examples, seed=seed)
    check_mqar_invariants(config, inputs, targets)


def test_zero_filler_without_random_non_queries():
    config = MQARConfig(vocab_size=8192, seq_len=64, num_kv_pairs=4, random_non_queries=False)
    inputs, targets = multiquery_ar(config, 32, seed=3)
    query_region = inputs[:, config.context_size :]
    is_query = targets[:, config.context_size :] != -100
    assert (query_region[~is_query] == 0).all()
    assert (query_region[is_query] != 0).all()


def test_random_non_queries_replaces_only_filler():
    zero = MQARConfig(vocab_size=8192, seq_len=64, num_kv_pairs=4, random_non_queries=False)
    noisy = MQARConfig(vocab_size=8192, seq_len=64, num_kv_pairs=4, random_non_queries=True)
    zero_inputs, zero_targets = multiquery_ar(zero, 32, seed=3)
    noisy_inputs, noisy_targets = multiquery_ar(noisy, 32, seed=3)
    assert torch.equal(zero_targets, noisy_targets)
    kept = zero_inputs != 0
    assert torch.equal(noisy_inputs[kept], zero_inputs[kept])
    assert (noisy_inputs[~kept] != 0).float().mean() > 0.99, "filler is uniform over [0, V), rarely 0"


def test_same_seed_same_batch_different_seed_different_batch():
    config = MQARConfig()
    first, second, other = (multiquery_ar(config, 16, seed=s) for s in (5, 5, 6))
    assert torch.equal(first[0], second[0]) and torch.equal(first[1], second[1])
    assert not torch.equal(first[0], other[0])


def test_generator_argument_matches_seed_and_advances():
    config = MQARConfig()
    generator = torch.Generator().manual_seed(11)
    from_generator = multiquery_ar(config, 8, generator=generator)
    from_seed = multiquery_ar(config, 8, seed=11)
    assert torch.equal(from_generator[0], from_seed[0]) and torch.equal(from_generator[1], from_seed[1])
    next_batch = multiquery_ar(config, 8, generator=generator)
    assert not torch.equal(next_batch[0], from_seed[0])


def test_global_rng_state_untouched():
    torch_state, numpy_state = torch.get_rng_state(), np.random.get_state()
    multiquery_ar(MQARConfig(), 8, seed=1)
    MQAR().generate(8, generator=torch.Generator().manual_seed(2))
    assert torch.equal(torch.get_rng_state(), torch_state)
    after = np.random.get_state()
    assert after[0] == numpy_state[0] and np.array_equal(after[1], numpy_state[1]) and after[2:] == numpy_state[2:]


@pytest.mark.parametrize(
    "kwargs",
    [{}, {"seed": 0, "generator": torch.Generator()}, {"seed": 1.5}, {"generator": 3}],
    ids=["neither", "both", "float-seed", "int-generator"],
)
def test_seed_xor_generator_required(kwargs):
    with pytest.raises(ValueError, match="seed|generator"):
        multiquery_ar(MQARConfig(), 4, **kwargs)


@pytest.mark.parametrize(
    "kwargs, field",
    [
        ({"seq_len": 63, "vocab_size": 8192}, "seq_len"),
        ({"seq_len": 0}, "seq_len"),
        ({"vocab_size": 64, "seq_len": 64}, "vocab_size"),
        ({"num_kv_pairs": 0}, "num_kv_pairs"),
        ({"num_kv_pairs": 17, "seq_len": 64}, "num_kv_pairs"),
        ({"num_kv_pairs": 8, "num_passes": 4, "seq_len": 64}, "num_passes"),
        ({"num_passes": 0}, "num_passes"),
        ({"power_a": 0.0}, "power_a"),
        ({"power_a": -1.0}, "power_a"),
        ({"random_non_queries": 1}, "random_non_queries"),
        ({"num_kv_pairs": 2.0}, "num_kv_pairs"),
    ],
    ids=[
        "odd-T",
        "zero-T",
        "V-not-above-T",
        "P0",
        "P-too-many",
        "passes-too-many",
        "passes0",
        "a0",
        "a-neg",
        "flag-int",
        "P-float",
    ],
)
def test_invalid_config_names_field(kwargs, field):
    with pytest.raises(ValueError, match=field):
        MQARConfig(**kwargs)


def test_invalid_num_examples_names_argument():
    with pytest.raises(ValueError, match="num_examples"):
        multiquery_ar(MQARConfig(), 0, seed=0)


def test_gaps_favour_small_offsets():
    config = MQARConfig(vocab_size=8192, seq_len=256, num_kv_pairs=4, power_a=0.01)
    space = (config.seq_len - config.context_size) // 2
    gaps = _query_gaps(config, multiquery_ar(config, 2000, seed=0)[1])
    # p_i ∝ i^(a−1) with a = 0.01 is close to 1/i: mean gap ~ space / ln(space), against (space − 1)/2 if uniform.
    assert gaps.float().mean() < 0.5 * (space - 1) / 2
    assert (gaps < space // 8).float().mean() > 0.5
    uniform = MQARConfig(vocab_size=8192, seq_len=256, num_kv_pairs=4, power_a=1.0)
    uniform_gaps = _query_gaps(uniform, multiquery_ar(uniform, 2000, seed=0)[1])
    assert abs(uniform_gaps.float().mean() - (space - 1) / 2) < 0.05 * space


def _query_gaps(config: MQARConfig, targets: torch.Tensor) -> torch.Tensor:
    positions = (targets != -100).nonzero()[:, 1]  # [N·P]
    return (positions - config.context_size) // 2


def test_gap_order_follows_successive_sampling():
    # numpy.random.choice(replace=False, p=p) draws gap 1 from p, then gap 2 from p renormalised without gap 1.
    config = MQARConfig(vocab_size=20, seq_len=12, num_kv_pairs=2, power_a=0.5, random_non_queries=False)
    space = (config.seq_len - config.context_size) // 2
    i = np.arange(1, space + 1)
    p = config.power_a * i ** (config.power_a - 1)
    p = p / p.sum()
    inputs, _ = multiquery_ar(config, 40_000, seed=0)
    first_key, second_key = inputs[:, 0], inputs[:, 2]
    query_gaps = (torch.arange(config.seq_len) - config.context_size) // 2  # [T]
    first_gap = query_gaps[_last_match(inputs, first_key)]
    second_gap = query_gaps[_last_match(inputs, second_key)]
    counts = torch.bincount(first_gap * space + second_gap, minlength=space * space).reshape(space, space)
    for a, b in itertools.product(range(space), repeat=2):
        expected = 0.0 if a == b else p[a] * p[b] / (1 - p[a])
        assert abs(counts[a, b].item() / 40_000 - expected) < 0.01, f"P(gap1={a}, gap2={b})"


def _last_match(inputs: torch.Tensor, key: torch.Tensor) -> torch.Tensor:
    """Position of the query of `key` `[N]` in `inputs` `[N, T]`: its last occurrence (zero filler)."""
    T = inputs.shape[1]
    hits = (inputs == key[:, None]) * torch.arange(T)  # [N, T]
    return hits.argmax(dim=1)


def test_key_and_value_draws_are_uniform_over_ordered_pairs():
    config = MQARConfig(vocab_size=9, seq_len=8, num_kv_pairs=2, random_non_queries=False)
    inputs, _ = multiquery_ar(config, 30_000, seed=0)
    for first, second, pool in ((0, 2, range(1, 4)), (1, 3, range(4, 9))):
        pairs = list(zip(inputs[:, first].tolist(), inputs[:, second].tolist(), strict=True))
        expected = 1 / (len(pool) * (len(pool) - 1))
        for a, b in itertools.permutations(pool, 2):
            assert abs(pairs.count((a, b)) / 30_000 - expected) < 0.01, f"P({a}, {b})"


def test_accuracy_on_hand_made_logits():
    targets = torch.tensor([[-100, 2, -100, 0], [1, -100, -100, 3]])  # [N=2, T=4], 4 labelled
    logits = torch.zeros(2, 4, 5)  # [N, T, V]
    logits[0, 1, 2] = 1.0  # correct
    logits[0, 3, 4] = 1.0  # wrong: predicts 4, target 0
    logits[1, 0, 1] = 1.0  # correct
    logits[1, 3, 3] = 1.0  # correct
    logits[0, 0, 1] = 9.0  # unlabelled position: ignored
    assert accuracy(logits, targets) == 0.75
    assert MQAR().metric(logits, targets) == {"accuracy": 0.75}


def test_accuracy_rejects_bad_shapes_and_no_labels():
    with pytest.raises(ValueError, match=r"\[N, T, V\]"):
        accuracy(torch.zeros(2, 4), torch.zeros(2, 4, dtype=torch.int64))
    with pytest.raises(ValueError, match=r"\[N, T\]"):
        accuracy(torch.zeros(2, 4, 5), torch.zeros(2, 3, dtype=torch.int64))
    with pytest.raises(ValueError, match="labelled"):
        accuracy(torch.zeros(2, 4, 5), torch.full((2, 4), -100))


def test_mqar_implements_task_and_is_registered():
    task = TASKS["mqar"](MQARConfig(vocab_size=1024, seq_len=128, num_kv_pairs=8))
    assert isinstance(task, Task) and isinstance(task, MQAR)
    assert (task.name, task.vocab_size, task.seq_len) == ("mqar", 1024, 128)
