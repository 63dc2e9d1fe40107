"""Recognising formal languages by next-character-set prediction: Nested Learning's Table 5.

*Nested Learning* (Behrouz et al., arXiv:2512.24695, Sec. 9.5, Table 5) compares recurrences on six languages
after Irie et al. (arXiv:2310.16076), whose datasets and criterion are Bhattamishra, Ahuja & Goyal's ("On the
Ability and Limitations of Transformers to Recognize Formal Languages", arXiv:2009.11264, Sec. 5): Parity,
(aa)*, (abab)*, a^n b^n, a^n b^n c^n and Shuffle-2. Counter languages (a^n b^n, a^n b^n c^n, Shuffle-2) need a
count carried along the string, Parity and the periodic ones a small automaton; models are trained on short
strings and tested on longer ones.

Next-character-set prediction (Bhattamishra et al., Sec. 5). The input is a string of the language; after each
prefix x_0 .. x_t the model predicts the set of symbols that may come next, the end of the string (EOS) included:
the symbols s for which x_0 .. x_t s is a prefix of some member, and EOS when x_0 .. x_t is itself a member. A
string counts as recognised when the set is right at every one of its positions. Here the set is one class, a
bitmask over (symbols..., EOS): bit i is symbol i, bit k (k symbols) is EOS, so the existing cross-entropy
trainer applies and there are 2^(k+1) classes. `metric` reports `accuracy` (per labelled position) and
`string_accuracy` (strings right at every position: Bhattamishra et al.'s criterion and Table 5's number); the
leaderboards rank by the latter (`score_metric`).

Token layout. Symbol i is token i; PAD = k pads a row on the right up to seq_len, with targets IGNORE_INDEX there
(EOS is never an input token: the row ends, or padding begins). `vocab_size` = 2^(k+1) covers the tokens and the
classes; it depends on the language only, so every length bin shares one model.

Lengths and bins. A row holds one member string of length L, drawn uniformly among the language's lengths (the
positive multiples of its `step`) in [min_len, max_len] (max_len None: seq_len). `bin(0)` is that training range;
`bin(k)` for k >= 1 is [k W + 1, (k + 1) W] with W = max_len, its seq_len the range's top. The papers' bins are
train 1-50 / Bin1 51-100 (Bhattamishra et al. Sec. 5); scaled to fit a laptop, the default here is train 1-40 /
Bin1 41-80 (for a^n b^n even lengths 2-40 / 42-80, for a^n b^n c^n multiples of three 3-39 / 42-78).

Sampling. Parity: uniform bits, the last one set to make the count of 1s even (uniform over the members of
length L). (aa)*, (abab)*, a^n b^n, a^n b^n c^n: the one member of length L. Shuffle-2: a random walk that at
each step picks uniformly among the moves that can still end balanced at length L: open either bracket (while
the open brackets fit in the remaining steps), or close a bracket kind that is open.

Worked examples (`task.targets(inputs)`; IGNORE_INDEX = -100; each set written out, bits in the order above):
- lang_parity (0, 1; PAD 2; EOS bit 4): "10111" padded to 7 -> inputs [1, 0, 1, 1, 1, 2, 2],
  targets [3, 3, 7, 3, 7, -100, -100]: {0, 1} after an odd count of 1s, {0, 1, EOS} after an even one.
- lang_aa (a; PAD 1; EOS bit 2): "aaaa" -> inputs [0, 0, 0, 0], targets [1, 3, 1, 3]: {a}, {a, EOS}, ...
- lang_abab (a, b; PAD 2; EOS bit 4): "abababab" -> inputs [0, 1, 0, 1, 0, 1, 0, 1],
  targets [2, 1, 2, 5, 2, 1, 2, 5]: {b}, {a}, {b}, {a, EOS}, ...
- lang_anbn (a, b; PAD 2; EOS bit 4): "aaabbb" -> inputs [0, 0, 0, 1, 1, 1], targets [3, 3, 3, 2, 2, 4]:
  {a, b} while only a's are read, {b} while b's are missing, {EOS} when the counts match.
- lang_anbncn (a, b, c; PAD 3; EOS bit 8): "aabbcc" -> inputs [0, 0, 1, 1, 2, 2], targets [3, 3, 2, 4, 4, 8]:
  {a, b}, {a, b}, {b}, {c}, {c}, {EOS}.
- lang_shuffle2 ((, ), [, ]; PAD 4; EOS bit 16): "([)]" -> inputs [0, 2, 1, 3], targets [7, 15, 13, 21]:
  {(, ), [}, {(, ), [, ]}, {(, [, ]}, {(, [, EOS}: either bracket may always open, a kind closes only while open,
  and the string may end when both are balanced.

Dimension legend: N strings (rows), T = seq_len, L a string's length, k symbols, V = 2^(k+1).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import ClassVar

import torch

from regmem.tasks.base import IGNORE_INDEX, LengthTask, accuracy, check_int, make_generator


@dataclass(frozen=True)
class FormalLanguageConfig:
    """Strings of lengths in [min_len, max_len], right-padded to seq_len (defaults: 1-40, T = 40)."""

    min_len: int = 1  # shortest string drawn (rounded up to the language's next length)
    max_len: int | None = None  # longest string drawn (rounded down); None means seq_len
    seq_len: int = 40  # T, tokens per row; the papers' training range is 1-50 (module docstring)

    def __post_init__(self):
        check_int("min_len", self.min_len, 1)
        check_int("seq_len", self.seq_len, 1)
        if self.max_len is not None:
            check_int("max_len", self.max_len, self.min_len)
            if self.max_len > self.seq_len:
                raise ValueError(f"max_len must be <= seq_len = {self.seq_len}, got {self.max_len}")
        elif self.seq_len < self.min_len:
            raise ValueError(f"seq_len must be >= min_len = {self.min_len} (max_len is None), got {self.seq_len}")

    @property
    def length_range(self) -> tuple[int, int]:
        """(min_len, max_len) with max_len None read as seq_len."""
        return self.min_len, self.seq_len if self.max_len is None else self.max_len


def string_accuracy(logits: torch.Tensor, targets: torch.Tensor) -> float:
    """Fraction of rows with a labelled position whose every labelled position has `argmax(logits) == target`.

    logits: `[N, T, V]` float; targets: `[N, T]` int64. Raises ValueError if no position is labelled.
    """
    accuracy(logits, targets)  # the shape checks, and ValueError if nothing is labelled
    labelled = targets != IGNORE_INDEX  # [N, T]
    wrong = (logits.argmax(dim=-1) != targets) & labelled  # [N, T]
    rows = labelled.any(dim=1)  # [N]
    return int((rows & ~wrong.any(dim=1)).sum()) / int(rows.sum())


def _counts(inputs: torch.Tensor, token: int) -> torch.Tensor:
    """[N, T] -> [N, T]: occurrences of `token` in each prefix x_0 .. x_t."""
    return (inputs == token).long().cumsum(dim=1)


@dataclass(frozen=True)
class FormalLanguage(LengthTask):
    """A language as a task (module docstring). Subclasses set `name`, `symbols`, `step` and the two static
    methods `_strings` (sampling) and `_sets` (next-symbol sets of members' prefixes)."""

    name: ClassVar[str]
    symbols: ClassVar[tuple[str, ...]]  # symbol i is token i
    step: ClassVar[int]  # the members' lengths are the positive multiples of step (within [min_len, max_len])
    config_class: ClassVar[type] = FormalLanguageConfig
    score_metric: ClassVar[str] = "string_accuracy"  # Bhattamishra et al.'s criterion, what Table 5 reports
    config: FormalLanguageConfig = FormalLanguageConfig()

    def __post_init__(self):
        lo, hi = self.lengths
        if lo > hi:
            min_len, max_len = self.config.length_range
            raise ValueError(f"{self.name}: no string has a length in [min_len, max_len] = [{min_len}, {max_len}] "
                             f"(lengths are multiples of {self.step}); widen min_len or max_len")

    @property
    def lengths(self) -> tuple[int, int]:
        """(shortest, longest) length drawn: [min_len, max_len] rounded inwards to multiples of `step`."""
        min_len, max_len = self.config.length_range
        return -(-min_len // self.step) * self.step, max_len // self.step * self.step

    @property
    def pad(self) -> int:
        """The padding token, after the symbols."""
        return len(self.symbols)

    @property
    def eos_bit(self) -> int:
        """The class bit of the end of the string."""
        return 1 << len(self.symbols)

    @property
    def vocab_size(self) -> int:
        return 1 << (len(self.symbols) + 1)  # the classes (bitmasks); the tokens (symbols, PAD) are fewer

    def bin(self, index: int) -> FormalLanguage:
        """The task over length bin `index`: 0 is the training range [min_len, max_len]; k >= 1 is
        [k W + 1, (k + 1) W] with W = max_len (module docstring). seq_len is the bin's top, the vocabulary the same.

            >>> [AnBn().bin(i).lengths for i in (0, 1, 2)]
            [(2, 40), (42, 80), (82, 120)]
        """
        check_int("index", index, 0)
        min_len, max_len = self.config.length_range
        lo, hi = (min_len, max_len) if index == 0 else (index * max_len + 1, (index + 1) * max_len)
        return type(self)(replace(self.config, min_len=lo, max_len=hi, seq_len=hi))

    def targets(self, inputs: torch.Tensor) -> torch.Tensor:
        """Next-symbol sets: int64 `[N, T]` rows of member strings right-padded with PAD -> int64 `[N, T]` class ids
        (bitmasks over symbols and EOS), IGNORE_INDEX at PAD. Rows must be members (or their prefixes)."""
        if not isinstance(inputs, torch.Tensor) or inputs.ndim != 2 or inputs.dtype != torch.int64:
            raise ValueError("inputs must be an int64 tensor of shape [N, T]")
        if inputs.numel() and (int(inputs.min()) < 0 or int(inputs.max()) > self.pad):
            raise ValueError(f"inputs must hold tokens in [0, {self.pad}] (symbols, then PAD = {self.pad})")
        return self._sets(inputs).masked_fill(inputs == self.pad, IGNORE_INDEX)

    def generate(
        self, num_examples: int, *, seed: int | None = None, generator: torch.Generator | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """`num_examples` member strings of uniform lengths in `lengths`, right-padded to seq_len, and their
        next-symbol sets. Exactly one of `seed` and `generator`; global RNG state is neither read nor advanced.
        Returns `(inputs, targets)`, both int64 `[N, T]`, targets IGNORE_INDEX at PAD."""
        check_int("num_examples", num_examples, 1)
        generator = make_generator(seed, generator)
        lo, hi = self.lengths
        lengths = lo + self.step * torch.randint((hi - lo) // self.step + 1, (num_examples,), generator=generator)
        T = self.seq_len
        real = torch.arange(T) < lengths.unsqueeze(1)  # [N, T]
        inputs = self._strings(lengths, T, generator).masked_fill(~real, self.pad)  # [N, T]
        return inputs, self.targets(inputs)

    def metric(self, logits: torch.Tensor, targets: torch.Tensor) -> dict[str, float]:
        """logits `[N, T, V]`, targets `[N, T]` -> {"accuracy": every labelled position, "string_accuracy": strings
        right at every position}."""
        return {"accuracy": accuracy(logits, targets), "string_accuracy": string_accuracy(logits, targets)}

    @staticmethod
    def _strings(lengths: torch.Tensor, T: int, generator: torch.Generator) -> torch.Tensor:
        """lengths [N] (valid for the language) -> int64 [N, T], a member of each length in its first L tokens
        (anything after them: the caller pads)."""
        raise NotImplementedError

    @staticmethod
    def _sets(inputs: torch.Tensor) -> torch.Tensor:
        """[N, T] members' tokens -> [N, T] next-symbol bitmasks after every prefix (anything at PAD)."""
        raise NotImplementedError


def _positions(lengths: torch.Tensor, T: int) -> torch.Tensor:
    return torch.arange(T).expand(len(lengths), T)  # [N, T]


class EvenParity(FormalLanguage):
    """Parity: binary strings with an even number of 1s. Next set {0, 1}, with EOS iff the count is even.

        >>> EvenParity().targets(torch.tensor([[1, 0, 1, 1, 1, 2, 2]])).tolist()
        [[3, 3, 7, 3, 7, -100, -100]]
    """

    name = "lang_parity"
    symbols = ("0", "1")
    step = 1

    @staticmethod
    def _strings(lengths, T, generator):
        bits = torch.randint(2, (len(lengths), T), generator=generator)  # [N, T]
        before_last = _positions(lengths, T) < (lengths - 1).unsqueeze(1)  # [N, T]
        ones = (bits * before_last).sum(dim=1) % 2  # [N], parity of the first L - 1 bits
        return bits.scatter(1, (lengths - 1).unsqueeze(1), ones.unsqueeze(1))  # the last bit evens the count

    @staticmethod
    def _sets(inputs):
        return 3 | 4 * (_counts(inputs, 1) % 2 == 0)


class AAStar(FormalLanguage):
    """(aa)*: an even number of a's. Next set {a}, with EOS after an even count.

        >>> AAStar().targets(torch.tensor([[0, 0, 0, 0]])).tolist()
        [[1, 3, 1, 3]]
    """

    name = "lang_aa"
    symbols = ("a",)
    step = 2

    @staticmethod
    def _strings(lengths, T, generator):
        return torch.zeros(len(lengths), T, dtype=torch.int64)

    @staticmethod
    def _sets(inputs):
        return 1 | 2 * (_counts(inputs, 0) % 2 == 0)


class ABABStar(FormalLanguage):
    """(abab)*: the string abab repeated. After a prefix of length n: b if n is odd, a otherwise, and EOS when n is
    a multiple of 4.

        >>> ABABStar().targets(torch.tensor([[0, 1, 0, 1, 0, 1, 0, 1]])).tolist()
        [[2, 1, 2, 5, 2, 1, 2, 5]]
    """

    name = "lang_abab"
    symbols = ("a", "b")
    step = 4

    @staticmethod
    def _strings(lengths, T, generator):
        return _positions(lengths, T) % 2

    @staticmethod
    def _sets(inputs):
        n = torch.arange(1, inputs.shape[1] + 1).expand_as(inputs)  # prefix lengths
        return torch.tensor([5, 2, 1, 2])[n % 4]  # n = 0, 1, 2, 3 (mod 4): {a, EOS}, {b}, {a}, {b}


class AnBn(FormalLanguage):
    """a^n b^n, n >= 1. Next set {a, b} before the first b, {b} while b's are missing, {EOS} once they match.

        >>> AnBn().targets(torch.tensor([[0, 0, 0, 1, 1, 1]])).tolist()
        [[3, 3, 3, 2, 2, 4]]
    """

    name = "lang_anbn"
    symbols = ("a", "b")
    step = 2

    @staticmethod
    def _strings(lengths, T, generator):
        return (_positions(lengths, T) >= (lengths // 2).unsqueeze(1)).long()

    @staticmethod
    def _sets(inputs):
        a, b = _counts(inputs, 0), _counts(inputs, 1)
        return torch.where(b == 0, 3, torch.where(b < a, 2, 4))


class AnBnCn(FormalLanguage):
    """a^n b^n c^n, n >= 1. Next set {a, b} before the first b, {b} while b's are missing, {c} while c's are,
    {EOS} at the end.

        >>> AnBnCn().targets(torch.tensor([[0, 0, 1, 1, 2, 2]])).tolist()
        [[3, 3, 2, 4, 4, 8]]
    """

    name = "lang_anbncn"
    symbols = ("a", "b", "c")
    step = 3

    @staticmethod
    def _strings(lengths, T, generator):
        return _positions(lengths, T) // (lengths // 3).clamp(min=1).unsqueeze(1)  # 0, 1, 2 over the thirds

    @staticmethod
    def _sets(inputs):
        a, b, c = _counts(inputs, 0), _counts(inputs, 1), _counts(inputs, 2)
        return torch.where(b == 0, 3, torch.where(b < a, 2, torch.where(c < a, 4, 8)))


class Shuffle2(FormalLanguage):
    """Shuffle-2: interleavings of two Dyck-1 words, ( ) and [ ], each balanced on its own (so "([)]" belongs).
    Next set: ( and [ always, ) while a ( is open, ] while a [ is, EOS when both are balanced.

        >>> Shuffle2().targets(torch.tensor([[0, 2, 1, 3, 4]])).tolist()
        [[7, 15, 13, 21, -100]]
    """

    name = "lang_shuffle2"
    symbols = ("(", ")", "[", "]")
    step = 2

    @staticmethod
    def _strings(lengths, T, generator):
        N = len(lengths)
        out = torch.zeros(N, T, dtype=torch.int64)
        open_round = torch.zeros(N, dtype=torch.int64)  # [N], unclosed ( so far
        open_square = torch.zeros(N, dtype=torch.int64)  # [N], unclosed [
        for t in range(T):  # a walk is sequential; each step is one draw for all rows
            remaining = lengths - t  # [N], tokens left including this one
            can_open = open_round + open_square <= remaining - 2  # the opened bracket still closes in time
            allowed = torch.stack([can_open, open_round > 0, can_open, open_square > 0], dim=1)  # [N, 4] ( ) [ ]
            allowed |= (remaining <= 0).unsqueeze(1)  # rows already complete draw anything (padded afterwards)
            # The k-th allowed move, k uniform in [0, number allowed): a uniform choice among the allowed moves.
            k = (torch.rand(N, generator=generator) * allowed.sum(dim=1)).long()  # [N]
            move = (allowed.long().cumsum(dim=1) <= k.unsqueeze(1)).sum(dim=1)  # [N], in 0..3
            out[:, t] = move
            open_round += (move == 0).long() - (move == 1).long()
            open_square += (move == 2).long() - (move == 3).long()
        return out

    @staticmethod
    def _sets(inputs):
        round_open = _counts(inputs, 0) - _counts(inputs, 1)  # [N, T]
        square_open = _counts(inputs, 2) - _counts(inputs, 3)
        return 1 | 4 | 2 * (round_open > 0) | 8 * (square_open > 0) | 16 * ((round_open == 0) & (square_open == 0))


# Registry entries for `regmem.tasks.TASKS`: name -> task class (Nested Learning's Table 5, in its order).
LANGUAGE_TASKS = {task.name: task for task in (EvenParity, AAStar, ABABStar, AnBn, AnBnCn, Shuffle2)}
