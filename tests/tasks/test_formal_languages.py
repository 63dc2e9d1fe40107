"""The formal languages of Nested Learning's Table 5 (src/regmem/tasks/formal_languages.py) against brute force
written here with plain Python: a recogniser per language (regular expressions and counters), a hand-written
`is_prefix` per language, itself checked against its definition (some completion of the string is a member) by
enumerating completions, and the next-symbol sets derived from them by trying every symbol and the end of the
string; plus the worked examples, length bins, seeding, validation and the metric."""

from __future__ import annotations

import doctest
import itertools
import re

import pytest
import torch

import regmem.tasks.formal_languages
from regmem.tasks import TASK_GROUPS, TASKS, Task
from regmem.tasks.base import IGNORE_INDEX
from regmem.tasks.formal_languages import (
    LANGUAGE_TASKS,
    AAStar,
    ABABStar,
    AnBn,
    AnBnCn,
    EvenParity,
    FormalLanguageConfig,
    Shuffle2,
    string_accuracy,
)

# The documented token layout: symbol i is token i, PAD the next token.
SYMBOLS = {"lang_parity": "01", "lang_aa": "a", "lang_abab": "ab", "lang_anbn": "ab", "lang_anbncn": "abc",
           "lang_shuffle2": "()[]"}
NAMES = list(SYMBOLS)


def _balanced_prefix(s: str, open_: str, close: str) -> bool:
    depth = 0
    for ch in s:
        depth += (ch == open_) - (ch == close)
        if depth < 0:
            return False
    return True


def is_member(name: str, s: str) -> bool:
    """The language itself (the empty string where the language has it)."""
    if name == "lang_parity":
        return re.fullmatch("[01]*", s) is not None and s.count("1") % 2 == 0
    if name == "lang_aa":
        return re.fullmatch("(aa)*", s) is not None
    if name == "lang_abab":
        return re.fullmatch("(abab)*", s) is not None
    if name == "lang_anbn":
        m = re.fullmatch("(a+)(b+)", s)
        return m is not None and len(m[1]) == len(m[2])
    if name == "lang_anbncn":
        m = re.fullmatch("(a+)(b+)(c+)", s)
        return m is not None and len(m[1]) == len(m[2]) == len(m[3])
    assert name == "lang_shuffle2"
    return (re.fullmatch(r"[()\[\]]*", s) is not None and _balanced_prefix(s, "(", ")") and s.count("(") == s.count(")")
            and _balanced_prefix(s, "[", "]") and s.count("[") == s.count("]"))


def is_prefix(name: str, s: str) -> bool:
    """Whether some member of the language starts with `s`, by hand per language."""
    if name == "lang_parity":
        return set(s) <= {"0", "1"}
    if name == "lang_aa":
        return set(s) <= {"a"}
    if name == "lang_abab":
        return s == ("ab" * len(s))[:len(s)]
    if name == "lang_anbn":
        m = re.fullmatch("(a*)(b*)", s)
        return m is not None and len(m[2]) <= len(m[1])
    if name == "lang_anbncn":
        m = re.fullmatch("(a*)(b*)(c*)", s)
        if m is None:
            return False
        a, b, c = (len(g) for g in m.groups())
        return b <= a if c == 0 else (b == a and c <= a)
    assert name == "lang_shuffle2"
    return set(s) <= set("()[]") and _balanced_prefix(s, "(", ")") and _balanced_prefix(s, "[", "]")


def brute_sets(name: str, s: str) -> list[int]:
    """The class after every prefix: bit i when prefix + symbol i is a prefix of a member, the last bit (EOS) when
    the prefix is a member."""
    symbols = SYMBOLS[name]
    out = []
    for t in range(1, len(s) + 1):
        prefix = s[:t]
        mask = sum(1 << i for i, sym in enumerate(symbols) if is_prefix(name, prefix + sym))
        out.append(mask | (1 << len(symbols) if is_member(name, prefix) else 0))
    return out


def decode(name: str, row: list[int]) -> str:
    """Tokens -> the string; PAD (= number of symbols) only after it."""
    symbols = SYMBOLS[name]
    pad = len(symbols)
    n = row.index(pad) if pad in row else len(row)
    assert all(token == pad for token in row[n:]), "PAD only on the right"
    return "".join(symbols[token] for token in row[:n])


def encode(name: str, s: str, T: int | None = None) -> list[int]:
    symbols = SYMBOLS[name]
    return [symbols.index(ch) for ch in s] + [len(symbols)] * ((T or len(s)) - len(s))


# ---------------------------------------------------------------------------------------------- the brute force


@pytest.mark.parametrize("name", NAMES)
def test_is_prefix_is_its_definition(name):
    """`is_prefix(s)` == some completion of s (as long as the language may need) is a member, for every string of
    up to three symbols (the longest completion needed is 2|s| for a^n b^n c^n after a^n, 3 for (abab)* after a)."""
    symbols = SYMBOLS[name]
    for length in range(1, 4):
        for s in map("".join, itertools.product(symbols, repeat=length)):
            exists = any(is_member(name, s + "".join(w)) for k in range(max(2 * length, 3) + 1)
                         for w in itertools.product(symbols, repeat=k))
            assert is_prefix(name, s) == exists, (name, s)


def test_recognisers_on_hand_picked_strings():
    assert is_member("lang_parity", "0110") and not is_member("lang_parity", "0111")
    assert is_member("lang_abab", "abababab") and not is_member("lang_abab", "abab" + "ab")
    assert is_member("lang_anbncn", "aabbcc") and not is_member("lang_anbncn", "aabbbcc")
    assert is_member("lang_shuffle2", "([)]") and is_member("lang_shuffle2", "[(])")
    assert not is_member("lang_shuffle2", "(]") and not is_member("lang_shuffle2", ")(")


# ------------------------------------------------------------------------------------------------ worked examples

WORKED = [  # (task class, string, row length T, targets) as in the module docstring
    (EvenParity, "10111", 7, [3, 3, 7, 3, 7, -100, -100]),
    (AAStar, "aaaa", 4, [1, 3, 1, 3]),
    (ABABStar, "abababab", 8, [2, 1, 2, 5, 2, 1, 2, 5]),
    (AnBn, "aaabbb", 6, [3, 3, 3, 2, 2, 4]),
    (AnBnCn, "aabbcc", 6, [3, 3, 2, 4, 4, 8]),
    (Shuffle2, "([)]", 4, [7, 15, 13, 21]),
]


@pytest.mark.parametrize(("task_class", "string", "T", "expected"), WORKED)
def test_worked_examples_token_by_token(task_class, string, T, expected):
    inputs = encode(task_class.name, string, T)
    assert inputs == {"10111": [1, 0, 1, 1, 1, 2, 2], "aaaa": [0, 0, 0, 0], "abababab": [0, 1, 0, 1, 0, 1, 0, 1],
                      "aaabbb": [0, 0, 0, 1, 1, 1], "aabbcc": [0, 0, 1, 1, 2, 2], "([)]": [0, 2, 1, 3]}[string]
    assert task_class().targets(torch.tensor([inputs])).tolist() == [expected]
    assert brute_sets(task_class.name, string) + [IGNORE_INDEX] * (T - len(string)) == expected


def test_doctests():
    results = doctest.testmod(regmem.tasks.formal_languages)
    assert results.attempted >= 7 and results.failed == 0


# ------------------------------------------------------------------------------------- generated rows and bins

BINS = {  # (bin 0, bin 1) lengths at the defaults: train 1-40, Bin1 41-80, rounded to each language's lengths
    "lang_parity": ((1, 40), (41, 80)), "lang_aa": ((2, 40), (42, 80)), "lang_abab": ((4, 40), (44, 80)),
    "lang_anbn": ((2, 40), (42, 80)), "lang_anbncn": ((3, 39), (42, 78)), "lang_shuffle2": ((2, 40), (42, 80)),
}
STEP = {"lang_parity": 1, "lang_aa": 2, "lang_abab": 4, "lang_anbn": 2, "lang_anbncn": 3, "lang_shuffle2": 2}


@pytest.mark.parametrize("index", [0, 1])
@pytest.mark.parametrize("name", NAMES)
def test_generated_rows_are_members_with_brute_force_targets_and_bin_lengths(name, index):
    task = LANGUAGE_TASKS[name]().bin(index)
    lo, hi = BINS[name][index]
    T = (40, 80)[index]  # the bin's range (1-40, 41-80), whether or not its top is a length of the language
    assert task.lengths == (lo, hi) and task.seq_len == T
    inputs, targets = task.generate(400, seed=index)
    assert inputs.dtype == targets.dtype == torch.int64 and inputs.shape == targets.shape == (400, T)
    lengths = set()
    for row, row_targets in zip(inputs.tolist(), targets.tolist(), strict=True):
        s = decode(name, row)
        assert is_member(name, s), (name, s)
        lengths.add(len(s))
        assert row_targets == brute_sets(name, s) + [IGNORE_INDEX] * (T - len(s)), (name, s)
    assert lengths == set(range(lo, hi + 1, STEP[name])), "every length of the bin is drawn, and no other"


def is_dyck2(s: str) -> bool:
    stack = []
    for ch in s:
        if ch in "([":
            stack.append(ch)
        elif not stack or stack.pop() != {")": "(", "]": "["}[ch]:
            return False
    return not stack


def test_shuffle2_draws_interleavings_beyond_dyck2_and_parity_draws_both_bits():
    inputs, _ = Shuffle2().generate(200, seed=0)
    strings = [decode("lang_shuffle2", row) for row in inputs.tolist()]
    crossing = [s for s in strings if not is_dyck2(s)]  # e.g. "([)]": members of Shuffle-2, not well nested
    assert len(crossing) > 100 and all(is_member("lang_shuffle2", s) for s in crossing)
    bits, targets = EvenParity().generate(200, seed=0)
    assert set(bits[targets != IGNORE_INDEX].tolist()) == {0, 1}
    assert set(targets[targets != IGNORE_INDEX].tolist()) == {3, 7}


def test_explicit_length_range_and_with_seq_len():
    task = AnBnCn(FormalLanguageConfig(min_len=4, max_len=10, seq_len=12))
    assert task.lengths == (6, 9) and task.seq_len == 12
    inputs, _ = task.generate(200, seed=0)
    assert {len(decode("lang_anbncn", row)) for row in inputs.tolist()} == {6, 9}
    assert task.bin(1).lengths == (12, 18) and task.bin(1).seq_len == 20 and task.bin(2).lengths == (21, 30)
    scaled = AnBn().with_seq_len(16)  # max_len None follows seq_len: strings 2-16, Bin1 17-32
    assert scaled.lengths == (2, 16) and scaled.bin(1).lengths == (18, 32)


# ----------------------------------------------------------------------------------------- seeding and validation


@pytest.mark.parametrize("name", NAMES)
def test_seeding_is_pure(name):
    task = LANGUAGE_TASKS[name]()
    state = torch.get_rng_state()
    a = task.generate(16, seed=5)
    b = task.generate(16, generator=torch.Generator().manual_seed(5))
    assert torch.equal(torch.get_rng_state(), state), "the global RNG is neither read nor advanced"
    assert all(torch.equal(x, y) for x, y in zip(a, b, strict=True))
    assert not torch.equal(a[0], task.generate(16, seed=6)[0])


@pytest.mark.parametrize("name", NAMES)
def test_bad_generate_arguments_raise(name):
    task = LANGUAGE_TASKS[name]()
    with pytest.raises(ValueError, match="num_examples"):
        task.generate(0, seed=0)
    with pytest.raises(ValueError, match="exactly one of seed and generator"):
        task.generate(1)
    with pytest.raises(ValueError, match="exactly one of seed and generator"):
        task.generate(1, seed=0, generator=torch.Generator())
    with pytest.raises(ValueError, match="index"):
        task.bin(-1)


@pytest.mark.parametrize(("fields", "field"), [
    ({"min_len": 0}, "min_len"), ({"min_len": 2.0}, "min_len"), ({"seq_len": 0}, "seq_len"),
    ({"seq_len": True}, "seq_len"), ({"min_len": 5, "max_len": 4}, "max_len"), ({"max_len": 41}, "max_len"),
    ({"min_len": 8, "seq_len": 6}, "seq_len"), ({"max_len": "40"}, "max_len"),
])
def test_bad_config_raises_naming_the_field(fields, field):
    with pytest.raises(ValueError, match=field):
        FormalLanguageConfig(**fields)


def test_a_range_without_a_member_length_raises():
    with pytest.raises(ValueError, match=r"lang_abab: no string has a length in \[min_len, max_len\] = \[1, 3\]"):
        ABABStar(FormalLanguageConfig(max_len=3, seq_len=8))
    with pytest.raises(ValueError, match="min_len or max_len"):
        AnBnCn(FormalLanguageConfig(min_len=4, max_len=5))


def test_bad_target_inputs_raise():
    with pytest.raises(ValueError, match=r"inputs must be an int64 tensor of shape \[N, T\]"):
        AnBn().targets(torch.zeros(5, dtype=torch.int64))
    with pytest.raises(ValueError, match=r"tokens in \[0, 2\]"):
        AnBn().targets(torch.tensor([[0, 3]]))


# ------------------------------------------------------------------------------------- task interface and metric


@pytest.mark.parametrize("name", NAMES)
def test_task_interface_registry_and_one_vocabulary_for_every_bin(name):
    task = TASKS[name]()
    assert isinstance(task, Task) and task.name == name and LANGUAGE_TASKS[name] is type(task)
    assert "".join(task.symbols) == SYMBOLS[name] and task.pad == len(SYMBOLS[name])
    assert task.vocab_size == 2 ** (len(SYMBOLS[name]) + 1) == task.bin(1).vocab_size
    assert task.config_class is FormalLanguageConfig and task.score_metric == "string_accuracy"
    for index in (0, 1):
        inputs, targets = task.bin(index).generate(50, seed=0)
        assert 0 <= int(inputs.min()) and int(inputs.max()) < task.vocab_size
        labelled = targets[targets != IGNORE_INDEX]
        assert 0 < int(labelled.min()) and int(labelled.max()) < task.vocab_size


def test_registry_names_group_and_leaderboard_metric():
    from regmem.lab.experiments.protocol import score_of

    assert list(LANGUAGE_TASKS) == NAMES and TASK_GROUPS["languages"] == NAMES
    assert TASKS["parity"] is not TASKS["lang_parity"]  # the state-tracking task keeps its name
    assert score_of("lang_anbn") == ("string_accuracy", True)


def test_metric_on_hand_made_logits():
    task = AnBn(FormalLanguageConfig(seq_len=6))
    targets = torch.tensor([[3, 3, 3, 2, 2, 4], [3, 2, 4, -100, -100, -100], [3, 3, 2, 2, -100, -100]])
    logits = torch.nn.functional.one_hot(targets.clamp(min=0), task.vocab_size).float()  # [3, 6, 8], all right
    assert task.metric(logits, targets) == {"accuracy": 1.0, "string_accuracy": 1.0}
    logits[1, 4] = torch.nn.functional.one_hot(torch.tensor(7), 8).float()  # a padded position: does not count
    logits[2, 3] = torch.nn.functional.one_hot(torch.tensor(4), 8).float()  # row 2: wrong at one position
    assert task.metric(logits, targets) == {"accuracy": pytest.approx(12 / 13), "string_accuracy": pytest.approx(2 / 3)}
    logits[0, 0] = torch.nn.functional.one_hot(torch.tensor(1), 8).float()
    assert string_accuracy(logits, targets) == pytest.approx(1 / 3)
    with pytest.raises(ValueError, match="no labelled position"):
        string_accuracy(logits, torch.full_like(targets, IGNORE_INDEX))
