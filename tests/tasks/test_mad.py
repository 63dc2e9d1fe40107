"""The six MAD tasks (src/regmem/tasks/mad.py, src/regmem/tasks/mad_recall.py) against brute-force oracles that
re-derive every target from the generated inputs with Python loops; the worked examples token by token; train
against scored targets; the fixed memorization map; seeding; validation; the registry and every mad-lab setting."""

from __future__ import annotations

import doctest
import itertools
from collections import Counter

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

import regmem.tasks.mad
import regmem.tasks.mad_recall
from regmem.tasks import Task
from regmem.tasks.base import IGNORE_INDEX
from regmem.tasks.mad import (
    MAD_SETTINGS,
    MAD_TASKS,
    Compression,
    CompressionConfig,
    Memorization,
    MemorizationConfig,
    SelectiveCopyingConfig,
    compression,
    memorization,
    memorization_map,
    selective_copying,
)
from regmem.tasks.mad_recall import (
    FuzzyInContextRecallConfig,
    InContextRecall,
    InContextRecallConfig,
    NoisyInContextRecallConfig,
    _distinct_tokens,
    fuzzy_in_context_recall,
    in_context_recall,
    noisy_in_context_recall,
)

X = IGNORE_INDEX
RECALL = ("icr", "noisy_icr", "fuzzy_icr")
SMALL = {  # a small config of every task, for the tests that run over all six
    "icr": InContextRecallConfig(vocab_size=8, seq_len=16),
    "noisy_icr": NoisyInContextRecallConfig(vocab_size=12, seq_len=16, noise_vocab_size=4, frac_noise=0.5),
    "fuzzy_icr": FuzzyInContextRecallConfig(vocab_size=9, seq_len=24, k_motif_size=2, v_motif_size=2),
    "selective_copy": SelectiveCopyingConfig(vocab_size=6, seq_len=16, num_tokens_to_copy=3),
    "compression": CompressionConfig(vocab_size=5, input_len=6),
    "memorization": MemorizationConfig(vocab_size=9, seq_len=8),
}


def rows(inputs: torch.Tensor, targets: torch.Tensor):
    return zip(inputs.tolist(), targets.tolist(), strict=True)


def next_tokens(row: list[int]) -> list[int]:
    return row[1:] + [X]


# ------------------------------------------------------------------------------------------------------- oracles


def pair_oracle(row: list[int], vocab_size: int, noise_vocab_size: int) -> list[int]:
    """icr / noisy icr: walk the pairs with a dict; a value is expected at its key's position once the key was seen.
    Also checks the layout: token ranges, one value per key, the probe's key seen before."""
    content = vocab_size - noise_vocab_size
    K = content // 2
    bound, expected = {}, []
    for slot in range(len(row) // 2):
        key, value = row[2 * slot], row[2 * slot + 1]
        if key >= content:  # a noise pair
            assert content <= key < vocab_size and content <= value < vocab_size
            assert slot < len(row) // 2 - 1, "the probe slot is never noise"
            expected += [X, X]
            continue
        assert 0 <= key < K <= value < content
        if key in bound:
            assert bound[key] == value, "a key's value is fixed within the row"
            expected += [value, X]
        else:
            assert slot < len(row) // 2 - 1, "the probe asks for a key of the context"
            bound[key] = value
            expected += [X, X]
    return expected


def fuzzy_oracle(row: list[int], config: FuzzyInContextRecallConfig, split: str) -> list[int]:
    """fuzzy icr: strip the pads, cut the rest into alternating key and value runs (their ids never overlap), walk
    the pairs with a dict; a repeated key's value is expected token by token from the key's last token on."""
    K, pad = config.num_keys, config.vocab_size - 1
    n_pad = next(i for i, token in enumerate(row) if token != pad)
    assert n_pad < config.k_motif_size + config.v_motif_size, "mad-lab's rule: stop while a largest pair overflows"
    runs = [list(group) for _, group in itertools.groupby(row[n_pad:], key=lambda token: token < K)]
    assert len(runs) % 2 == 0 and all(token < K for token in runs[0])
    expected, bound = [X] * n_pad, {}
    for key, value in zip(runs[0::2], runs[1::2], strict=True):
        key, value = tuple(key), tuple(value)
        assert all(K <= token < pad for token in value)
        assert len(set(key)) == len(key) and len(set(value)) == len(value), "motif tokens are distinct"
        if split == "test":
            assert len(key) == config.k_motif_size
        assert 1 <= len(key) <= config.k_motif_size and 1 <= len(value) <= config.v_motif_size
        answer = [X] * len(value)
        if key in bound:
            assert bound[key] == value, "a key's value is fixed within the row"
            answer = list(value)
        bound[key] = value
        expected += [X] * (len(key) - 1) + answer + [X]
    assert expected[-len(value) - 1:-1] == list(value), "the final probe repeats a key of the context"
    return expected


def selective_copy_oracle(row: list[int], config: SelectiveCopyingConfig) -> list[int]:
    """The data region's non-blank tokens, in order, at the last n positions."""
    V, T, n = config.vocab_size, config.seq_len, config.num_tokens_to_copy
    region = row[:T - n - 1]
    assert row[T - n - 1] == V - 1 and row[T - n:] == [V - 2] * n
    data = [token for token in region if token != V - 2]
    assert len(data) == n and all(0 <= token < V - 2 for token in data)
    assert region[-1] != V - 2, "as mad-lab's np.insert, no blank follows the last data token"
    return [X] * (T - n) + data


def compression_oracle(row: list[int], config: CompressionConfig) -> list[int]:
    L, C = config.input_len, config.vocab_size - 1
    assert all(0 <= token < C for token in row[:L - 1]) and row[L - 1:] == [C] * L
    return [X] * L + row[:L - 1]


# ------------------------------------------------------------------------------------------ generators vs oracles


@given(vocab=st.integers(2, 20), pairs=st.integers(2, 12), n=st.integers(1, 4), seed=st.integers(0, 999))
def test_icr_targets_are_the_brute_force_recall_targets(vocab, pairs, n, seed):
    config = InContextRecallConfig(vocab_size=vocab, seq_len=2 * pairs)
    inputs, scored = in_context_recall(config, n, seed=seed)
    train_inputs, train = in_context_recall(config, n, seed=seed, split="train")
    assert inputs.dtype == scored.dtype == torch.int64 and inputs.shape == scored.shape == (n, 2 * pairs)
    assert torch.equal(inputs, train_inputs), "train and test draw the same rows for the same seed"
    for (row, targets), train_row in zip(rows(inputs, scored), train.tolist(), strict=True):
        assert targets == pair_oracle(row, vocab, 0)
        assert train_row == next_tokens(row)


@given(noise=st.integers(1, 6), content=st.integers(2, 12), pairs=st.integers(2, 12),
       frac=st.sampled_from([0.0, 0.3, 0.9]), seed=st.integers(0, 999))
def test_noisy_icr_targets_are_the_brute_force_recall_targets(noise, content, pairs, frac, seed):
    config = NoisyInContextRecallConfig(vocab_size=content + noise, seq_len=2 * pairs, noise_vocab_size=noise,
                                        frac_noise=frac)
    inputs, scored = noisy_in_context_recall(config, 3, seed=seed)
    _, train = noisy_in_context_recall(config, 3, seed=seed, split="train")
    for (row, targets), train_row in zip(rows(inputs, scored), train.tolist(), strict=True):
        assert targets == pair_oracle(row, content + noise, noise)
        assert any(key < content for key in row[:-2:2]), "one context slot is always a real pair"
        assert train_row == next_tokens(row)


@given(vocab=st.integers(5, 20), k_motif=st.integers(1, 3), v_motif=st.integers(1, 3), extra=st.integers(0, 30),
       split=st.sampled_from(["train", "test"]), seed=st.integers(0, 999))
def test_fuzzy_icr_targets_are_the_brute_force_recall_targets(vocab, k_motif, v_motif, extra, split, seed):
    if (vocab - 1) // 2 < k_motif or vocab - 1 - (vocab - 1) // 2 < v_motif:
        return
    config = FuzzyInContextRecallConfig(vocab_size=vocab, seq_len=2 * (k_motif + v_motif) + extra,
                                        k_motif_size=k_motif, v_motif_size=v_motif)
    inputs, targets = fuzzy_in_context_recall(config, 3, seed=seed, split=split)
    assert inputs.shape == targets.shape == (3, config.seq_len)
    for row, row_targets in rows(inputs, targets):
        expected = fuzzy_oracle(row, config, split)
        assert row_targets == (expected if split == "test" else next_tokens(row))


def test_fuzzy_training_keys_vary_in_size_and_test_keys_do_not():
    config = FuzzyInContextRecallConfig()
    sizes = {}
    for split in ("train", "test"):
        inputs, _ = fuzzy_in_context_recall(config, 20, seed=0, split=split)
        runs = (list(g) for row in inputs.tolist() for k, g in itertools.groupby(row, key=lambda t: t < 7) if k)
        sizes[split] = Counter(len(run) for run in runs)
    assert set(sizes["train"]) == {1, 2, 3} and set(sizes["test"]) == {3}


def test_distinct_tokens_are_uniform_over_ordered_tuples():
    picks = _distinct_tokens(5, 3, (60_000,), torch.Generator().manual_seed(0))  # 60 tuples, 1000 draws each
    counts = Counter(map(tuple, picks.tolist()))
    assert set(counts) == set(itertools.permutations(range(5), 3))
    assert max(abs(c - 1000) for c in counts.values()) < 150  # 4.7 standard deviations


@given(vocab=st.integers(3, 12), n=st.integers(1, 5), blanks=st.integers(1, 20), seed=st.integers(0, 999))
def test_selective_copy_targets_are_the_non_blank_tokens_in_order(vocab, n, blanks, seed):
    config = SelectiveCopyingConfig(vocab_size=vocab, seq_len=2 * n + 1 + blanks, num_tokens_to_copy=n)
    inputs, targets = selective_copying(config, 3, seed=seed)
    assert inputs.shape == targets.shape == (3, config.seq_len)
    for row, row_targets in rows(inputs, targets):
        assert row_targets == selective_copy_oracle(row, config)


def test_selective_copy_blanks_spread_over_the_gaps_before_each_token():
    config = SelectiveCopyingConfig(vocab_size=6, seq_len=40, num_tokens_to_copy=4)  # 31 blanks in 4 gaps
    inputs, _ = selective_copying(config, 2000, seed=0)
    region = inputs[:, :35] != 4  # [N, 35], data tokens
    position = region.nonzero()[:, 1].reshape(2000, 4)  # [N, 4], the data tokens' positions
    gaps = torch.diff(position, prepend=torch.full((2000, 1), -1)) - 1  # [N, 4], blanks before each token
    assert torch.all(gaps.sum(1) == 31)
    assert (gaps.double().mean(0) - 31 / 4).abs().max() < 0.3  # multinomial: 7.75 each, sd of a mean ~0.05


@given(vocab=st.integers(2, 12), L=st.integers(2, 20), seed=st.integers(0, 999))
def test_compression_targets_are_the_input_tokens_after_the_compression_token(vocab, L, seed):
    config = CompressionConfig(vocab_size=vocab, input_len=L)
    inputs, targets = compression(config, 3, seed=seed)
    assert inputs.shape == targets.shape == (3, 2 * L - 1) and config.seq_len == 2 * L - 1
    for row, row_targets in rows(inputs, targets):
        assert row_targets == compression_oracle(row, config)


@given(vocab=st.integers(3, 40), pairs=st.integers(1, 10), seed=st.integers(0, 999))
def test_memorization_targets_follow_one_fixed_map(vocab, pairs, seed):
    config = MemorizationConfig(vocab_size=vocab, seq_len=2 * pairs)
    K = (vocab - 1) // 2
    table = memorization_map(config).tolist()
    assert len(set(table)) == K and all(K <= v < vocab - 1 for v in table), "an injection into the values"
    inputs, targets = memorization(config, 3, seed=seed)
    for row, row_targets in rows(inputs, targets):
        assert row[1::2] == [vocab - 1] * pairs and all(0 <= key < K for key in row[0::2])
        assert row_targets == [t for key in row[0::2] for t in (X, table[key])]


def test_memorization_map_is_shared_across_seeds_and_set_by_map_seed():
    config = MemorizationConfig()
    seen = {}
    for seed in range(4):  # the map read off the rows of different seeds is one and the same function
        inputs, targets = memorization(config, 64, seed=seed)
        for key, value in zip(inputs[:, 0::2].flatten().tolist(), targets[:, 1::2].flatten().tolist(), strict=True):
            assert seen.setdefault(key, value) == value
    assert len(seen) > 100  # 127 keys, 4096 draws
    assert torch.equal(memorization_map(config), memorization_map(MemorizationConfig()))
    assert not torch.equal(memorization_map(config), memorization_map(MemorizationConfig(map_seed=0)))
    task = Memorization(config)
    assert torch.equal(task.generate(8, seed=1)[1], task.with_seq_len(32).generate(8, seed=1)[1])


def test_noise_fraction_and_probe_are_as_configured():
    config = NoisyInContextRecallConfig(frac_noise=0.4)  # P = 64 slots, 63 context slots, one kept real
    inputs, _ = noisy_in_context_recall(config, 400, seed=0)
    noise = (inputs[:, 0:-2:2] >= 16).double().mean()
    assert abs(float(noise) - 0.4 * 62 / 63) < 0.01
    inputs, _ = in_context_recall(InContextRecallConfig(vocab_size=8, seq_len=6), 4000, seed=0)
    both = inputs[:, 0] != inputs[:, 2]  # two distinct context keys: the probe picks each with probability 1/2
    assert abs(float((inputs[both, 4] == inputs[both, 0]).double().mean()) - 0.5) < 0.03


# ---------------------------------------------------------------------------------------------- worked examples


def test_worked_examples_token_by_token_and_doctests():
    inputs, scored = in_context_recall(InContextRecallConfig(vocab_size=8, seq_len=8), 1, seed=5)
    assert inputs.tolist() == [[3, 5, 2, 4, 3, 5, 2, 4]]
    assert scored.tolist() == [[X, X, X, X, 5, X, 4, X]]
    assert InContextRecall(InContextRecallConfig(vocab_size=8, seq_len=8)).generate_train(1, seed=5)[1].tolist() == [
        [5, 2, 4, 3, 5, 2, 4, X]]
    config = NoisyInContextRecallConfig(vocab_size=12, seq_len=10, noise_vocab_size=4, frac_noise=0.5)
    inputs, scored = noisy_in_context_recall(config, 1, seed=5)
    assert inputs.tolist() == [[3, 4, 2, 5, 3, 4, 11, 8, 2, 5]]
    assert scored.tolist() == [[X, X, X, X, 4, X, X, X, 5, X]]
    config = FuzzyInContextRecallConfig(vocab_size=9, seq_len=16, k_motif_size=2, v_motif_size=2)
    inputs, scored = fuzzy_in_context_recall(config, 1, seed=34)
    assert inputs.tolist() == [[8, 8, 2, 3, 5, 1, 2, 6, 4, 2, 3, 5, 1, 2, 6, 4]]
    assert scored.tolist() == [[X, X, X, X, X, X, X, X, X, X, 5, X, X, 6, 4, X]]
    inputs, targets = selective_copying(SelectiveCopyingConfig(vocab_size=6, seq_len=12, num_tokens_to_copy=3), 1,
                                        seed=6)
    assert inputs.tolist() == [[4, 4, 2, 4, 1, 4, 4, 3, 5, 4, 4, 4]]
    assert targets.tolist() == [[X, X, X, X, X, X, X, X, X, 2, 1, 3]]
    inputs, targets = compression(CompressionConfig(vocab_size=5, input_len=4), 1, seed=0)
    assert inputs.tolist() == [[0, 3, 1, 4, 4, 4, 4]] and targets.tolist() == [[X, X, X, X, 0, 3, 1]]
    config = MemorizationConfig(vocab_size=9, seq_len=6)
    assert memorization_map(config).tolist() == [6, 5, 7, 4]
    inputs, targets = memorization(config, 1, seed=4)
    assert inputs.tolist() == [[2, 8, 2, 8, 3, 8]] and targets.tolist() == [[X, 7, X, 7, X, 4]]
    for module in (regmem.tasks.mad, regmem.tasks.mad_recall):
        results = doctest.testmod(module)
        assert results.attempted > 0 and results.failed == 0


# ------------------------------------------------------------------------------------- the Task interface, seeding


@pytest.mark.parametrize("name", list(MAD_TASKS))
def test_task_interface_metric_and_shapes(name):
    task = MAD_TASKS[name](SMALL[name])
    assert isinstance(task, Task) and task.name == name and task.config_class is type(SMALL[name])
    assert hasattr(task, "generate_train") == (name in RECALL)
    for generate in (task.generate, getattr(task, "generate_train", task.generate)):
        inputs, targets = generate(5, seed=0)
        assert inputs.dtype == targets.dtype == torch.int64 and inputs.shape == targets.shape == (5, task.seq_len)
        assert 0 <= int(inputs.min()) and int(inputs.max()) < task.vocab_size
        labels = targets[targets != X]
        assert labels.numel() > 0 and int(labels.min()) >= 0 and int(labels.max()) < task.vocab_size
    inputs, targets = task.generate(5, seed=0)
    perfect = torch.nn.functional.one_hot(targets.clamp(min=0), task.vocab_size).float()  # [N, T, V]
    assert task.metric(perfect, targets) == {"accuracy": 1.0}
    assert task.metric(-perfect, targets) == {"accuracy": 0.0}


@pytest.mark.parametrize("name", [n for n in MAD_TASKS if n != "compression"])
def test_with_seq_len_keeps_the_rest_of_the_config(name):
    task = MAD_TASKS[name](SMALL[name])
    longer = task.with_seq_len(32)
    assert type(longer) is type(task) and longer.seq_len == 32 and longer.vocab_size == task.vocab_size
    assert longer.generate(2, seed=0)[0].shape == (2, 32)
    assert not hasattr(Compression(), "with_seq_len")


@pytest.mark.parametrize("name", list(MAD_TASKS))
def test_seeding_is_pure(name):
    task = MAD_TASKS[name](SMALL[name])
    for generate in (task.generate, getattr(task, "generate_train", task.generate)):
        state = torch.get_rng_state()
        a = generate(4, seed=7)
        b = generate(4, generator=torch.Generator().manual_seed(7))
        assert torch.equal(torch.get_rng_state(), state), "global RNG state is neither read nor advanced"
        assert all(torch.equal(x, y) for x, y in zip(a, b, strict=True))
        assert not torch.equal(a[0], generate(4, seed=8)[0])
        with pytest.raises(ValueError, match="exactly one of seed and generator"):
            generate(4)
        with pytest.raises(ValueError, match="exactly one of seed and generator"):
            generate(4, seed=1, generator=torch.Generator())
        with pytest.raises(ValueError, match="num_examples"):
            generate(0, seed=1)


def test_bad_split_raises():
    with pytest.raises(ValueError, match="split"):
        in_context_recall(InContextRecallConfig(), 1, seed=0, split="valid")
    with pytest.raises(ValueError, match="split"):
        fuzzy_in_context_recall(FuzzyInContextRecallConfig(), 1, seed=0, split="eval")


@pytest.mark.parametrize(("config_class", "kwargs", "field"), [
    (InContextRecallConfig, {"vocab_size": 1}, "vocab_size"),
    (InContextRecallConfig, {"vocab_size": 16.0}, "vocab_size"),
    (InContextRecallConfig, {"seq_len": 2}, "seq_len"),
    (InContextRecallConfig, {"seq_len": 127}, "seq_len"),
    (InContextRecallConfig, {"seq_len": True}, "seq_len"),
    (NoisyInContextRecallConfig, {"noise_vocab_size": 0}, "noise_vocab_size"),
    (NoisyInContextRecallConfig, {"vocab_size": 17}, "vocab_size"),
    (NoisyInContextRecallConfig, {"frac_noise": 1.0}, "frac_noise"),
    (NoisyInContextRecallConfig, {"frac_noise": -0.1}, "frac_noise"),
    (NoisyInContextRecallConfig, {"frac_noise": True}, "frac_noise"),
    (NoisyInContextRecallConfig, {"seq_len": 129}, "seq_len"),
    (FuzzyInContextRecallConfig, {"k_motif_size": 0}, "k_motif_size"),
    (FuzzyInContextRecallConfig, {"v_motif_size": 0}, "v_motif_size"),
    (FuzzyInContextRecallConfig, {"vocab_size": 3}, "vocab_size"),
    (FuzzyInContextRecallConfig, {"vocab_size": 6}, "k_motif_size"),
    (FuzzyInContextRecallConfig, {"seq_len": 11}, "seq_len"),
    (SelectiveCopyingConfig, {"vocab_size": 2}, "vocab_size"),
    (SelectiveCopyingConfig, {"num_tokens_to_copy": 0}, "num_tokens_to_copy"),
    (SelectiveCopyingConfig, {"seq_len": 33}, "seq_len"),
    (CompressionConfig, {"vocab_size": 1}, "vocab_size"),
    (CompressionConfig, {"input_len": 1}, "input_len"),
    (MemorizationConfig, {"vocab_size": 2}, "vocab_size"),
    (MemorizationConfig, {"seq_len": 31}, "seq_len"),
    (MemorizationConfig, {"map_seed": -1}, "map_seed"),
    (MemorizationConfig, {"map_seed": 1.5}, "map_seed"),
])
def test_bad_config_raises_naming_the_field(config_class, kwargs, field):
    with pytest.raises(ValueError, match=field):
        config_class(**kwargs)


def test_unknown_config_fields_are_rejected():
    with pytest.raises(TypeError):
        InContextRecallConfig(num_train_examples=800)


# ------------------------------------------------------------------------------------------ registry and settings


def test_registry_order_names_and_defaults():
    assert list(MAD_TASKS) == ["icr", "noisy_icr", "fuzzy_icr", "selective_copy", "compression", "memorization"]
    assert list(MAD_SETTINGS) == list(MAD_TASKS)
    assert [MAD_TASKS[name].name for name in MAD_TASKS] == list(MAD_TASKS)
    assert all(settings[0] == {} for settings in MAD_SETTINGS.values())
    baselines = {name: (task().vocab_size, task().seq_len) for name, task in MAD_TASKS.items()}
    assert baselines == {"icr": (16, 128), "noisy_icr": (32, 128), "fuzzy_icr": (16, 128),
                         "selective_copy": (16, 256), "compression": (16, 63), "memorization": (256, 32)}
    assert len(MAD_SETTINGS["noisy_icr"]) == 10 and len(MAD_SETTINGS["memorization"]) == 6


@pytest.mark.parametrize(("name", "setting"), [(n, s) for n, settings in MAD_SETTINGS.items() for s in settings],
                         ids=lambda x: x if isinstance(x, str) else ",".join(f"{k}={v}" for k, v in x.items()))
def test_every_mad_setting_builds_and_generates(name, setting):
    task_class = MAD_TASKS[name]
    task = task_class(task_class.config_class(**setting))
    for key, value in setting.items():
        assert getattr(task.config, key) == value
    for generate in (task.generate, getattr(task, "generate_train", task.generate)):
        inputs, targets = generate(2, seed=0)
        assert inputs.shape == targets.shape == (2, task.seq_len)
        assert int(inputs.max()) < task.vocab_size and bool((targets != X).any())
