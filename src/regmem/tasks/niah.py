"""Needle in a haystack (NIAH) over a tiny vocabulary: RULER's single-key, multi-key and multi-value tasks.

RULER (Hsieh et al., "RULER: What's the Real Context Size of Your Long-Context Language Models?",
arXiv:2404.06654, Sec. 3.1) hides needles "One of the special magic numbers for {key} is: {value}." in a
haystack of filler text and asks for the value of one key at the end; *Nested Learning* (arXiv:2512.24695,
Sec. 9.2, Table 1) reports its S-NIAH, MK-NIAH and MV-NIAH tasks at 4K-16K tokens. This module keeps that
structure with token ids instead of words, so a small model can be trained on it from scratch:

- haystack: uniform random filler tokens;
- a needle is `NEEDLE k_1 .. k_K IS v_1 .. v_L` (K = key_len, L = value_len), inserted into the haystack;
- the tail is `QUERY k_1 .. k_K IS`, followed by the answer fed back token by token (teacher forcing): the
  target at IS is the answer's first token, at each answer token the next one; every other target is -100.

Variants (`NIAHConfig.variant`): "single", one needle (RULER single_1); "multikey", `num_needles` needles with
distinct keys, one of them queried, the others distractors (multikey_1); "multivalue", `num_needles` needles
with the same key and distinct values, and the answer is all their values in the order they appear in the
haystack (multivalue).

Token layout (disjoint ranges, in this order): 0 = NEEDLE, 1 = IS, 2 = QUERY; key tokens
`[3, 3 + num_key_tokens)`; value tokens next (`num_value_tokens` of them); filler tokens last
(`num_filler_tokens`); `vocab_size` is their total. A key is K key tokens and a value L value tokens, drawn
uniformly; filler never contains a marker, key or value token, so a needle cannot appear by chance.

Layout of a sequence: haystack `[0, H)` then tail `[H, T)`, with A = L·num_needles answer tokens for
"multivalue" and A = L otherwise, tail length K + A + 1 and H = T - (K + A + 1). Needles have length
n = K + L + 2 and never overlap. `depth` = d in [0, 1] puts the queried needle's NEEDLE token at position
`round(d·(H - n))` (Python's round; 0: the first haystack token; 1: the needle ends where the tail begins).
For "multivalue", where every needle is queried, the needle so placed is the k-th in haystack order, k drawn
uniformly among the ranks that fit at that position. `depth=None` draws the position uniformly from
`[0, H - n]`. The other needles take uniform places in the free space before and after it.

Metrics: token accuracy over the answer positions, and exact match, the fraction of sequences whose whole
answer is right. Under teacher forcing, a sequence is exactly right iff greedy decoding from IS would write the
whole answer, so exact match is RULER's string match for a single answer.

Dimension legend: N sequences, T = seq_len, V = vocab_size, H haystack length, M = num_needles,
K = key_len, L = value_len, A answer tokens.

Worked example, `niah(NIAHConfig(variant="multikey", seq_len=17, num_needles=2, key_len=1, value_len=1,
num_key_tokens=4, num_value_tokens=4, num_filler_tokens=4, depth=0.5), 1, seed=0)`: markers 0-2, keys 3-6,
values 7-10, filler 11-14; A = 1, so the tail is 3 tokens, H = 14, n = 4 and the queried needle starts at
round(0.5·(14 - 4)) = 5::

    inputs:  [11, 14, 12, 11, 14, 0, 3, 1, 8, 14, 0, 5, 1, 9, 2, 3, 1]
    targets: [-100, -100, -100, -100, -100, -100, -100, -100, -100, -100, -100, -100, -100, -100, -100, -100, 8]

The queried needle `0 3 1 8` (NEEDLE, key 3, IS, value 8) starts at 5, the distractor `0 5 1 9` (key 5) at 10,
and the tail `2 3 1` (QUERY, key 3, IS) asks for key 3: the target at IS is its value, 8.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import ClassVar, Literal, get_args

import torch

from regmem.tasks.base import IGNORE_INDEX, LengthTask, accuracy, check_int, make_generator

NEEDLE, IS, QUERY = 0, 1, 2  # marker tokens
NUM_MARKERS = 3
Variant = Literal["single", "multikey", "multivalue"]  # RULER single_1, multikey_1, multivalue
VARIANTS = get_args(Variant)


@dataclass(frozen=True)
class NIAHConfig:
    """One NIAH setting (module docstring); the defaults are the single-needle task at T = 128 over 67 tokens."""

    variant: Variant = "single"
    seq_len: int = 128  # T, tokens per sequence: haystack plus tail
    num_needles: int = 1  # M: 1 for "single"; "multikey": needles with distinct keys; "multivalue": values
    key_len: int = 2  # K, tokens per key (RULER's keys are two words, "adjective-noun")
    value_len: int = 2  # L, tokens per value
    num_key_tokens: int = 16  # keys are K tokens of these: 16^2 = 256 keys
    num_value_tokens: int = 16  # values are L tokens of these: 256 values, so guessing scores 1/256
    num_filler_tokens: int = 32  # the haystack's vocabulary
    depth: float | None = None  # relative position of the queried needle in [0, 1]; None: uniform

    def __post_init__(self):
        if self.variant not in VARIANTS:
            raise ValueError(f"variant must be one of {VARIANTS}, got {self.variant!r}")
        for field, minimum in (("num_needles", 1), ("key_len", 1), ("value_len", 1), ("num_key_tokens", 1),
                               ("num_value_tokens", 1), ("num_filler_tokens", 1), ("seq_len", 1)):
            check_int(field, getattr(self, field), minimum)
        if self.variant == "single" and self.num_needles != 1:
            raise ValueError(f"num_needles must be 1 for variant 'single', got {self.num_needles}")
        if self.variant == "multikey" and self.num_key_tokens**self.key_len < self.num_needles:
            raise ValueError(f"num_key_tokens ** key_len must be >= num_needles = {self.num_needles} "
                             f"(distinct keys), got {self.num_key_tokens}^{self.key_len}")
        if self.variant == "multivalue" and self.num_value_tokens**self.value_len < self.num_needles:
            raise ValueError(f"num_value_tokens ** value_len must be >= num_needles = {self.num_needles} "
                             f"(distinct values), got {self.num_value_tokens}^{self.value_len}")
        if self.depth is not None and (isinstance(self.depth, bool) or not isinstance(self.depth, int | float)
                                       or not 0 <= self.depth <= 1):
            raise ValueError(f"depth must be None or a float in [0, 1], got {self.depth!r}")
        # Room for the needles and at least one needle's length of filler, so that any start of the placed
        # needle leaves the others a place (module docstring).
        minimum = self.tail_len + (self.num_needles + 1) * self.needle_len
        if self.seq_len < minimum:
            raise ValueError(f"seq_len must be >= {minimum} (tail {self.tail_len} + (num_needles + 1) x needle "
                             f"{self.needle_len}), got {self.seq_len}")

    @property
    def vocab_size(self) -> int:
        return NUM_MARKERS + self.num_key_tokens + self.num_value_tokens + self.num_filler_tokens

    @property
    def key_offset(self) -> int:
        """First key token; keys are `[key_offset, value_offset)`."""
        return NUM_MARKERS

    @property
    def value_offset(self) -> int:
        """First value token; values are `[value_offset, filler_offset)`."""
        return NUM_MARKERS + self.num_key_tokens

    @property
    def filler_offset(self) -> int:
        """First filler token; filler is `[filler_offset, vocab_size)`."""
        return self.value_offset + self.num_value_tokens

    @property
    def needle_len(self) -> int:
        """n = K + L + 2: NEEDLE, the key, IS, the value."""
        return self.key_len + self.value_len + 2

    @property
    def answer_len(self) -> int:
        """A: every needle's value for "multivalue", the queried one's otherwise."""
        return self.value_len * (self.num_needles if self.variant == "multivalue" else 1)

    @property
    def tail_len(self) -> int:
        """QUERY, the key, IS and the first A - 1 answer tokens: K + A + 1."""
        return self.key_len + self.answer_len + 1

    @property
    def haystack_len(self) -> int:
        """H = T - tail_len."""
        return self.seq_len - self.tail_len


def _uniform_int(low: torch.Tensor, high: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
    """Per entry, a uniform int in `[low, high]` (inclusive, broadcast shapes)."""
    u = torch.rand(torch.broadcast_shapes(low.shape, high.shape), generator=generator, dtype=torch.float64)
    return low + (u * (high - low + 1)).floor().long()


def _codes(num_examples: int, size: int, space: int, distinct: bool, generator: torch.Generator) -> torch.Tensor:
    """int64 `[N, size]` uniform codes in `[0, space)`, distinct within a row if `distinct` (rejection: rows with
    a repeat are drawn again, which leaves every ordered tuple of distinct codes equally likely)."""
    codes = torch.randint(space, (num_examples, size), generator=generator)
    while distinct:
        ordered = codes.sort(dim=1).values
        repeats = (ordered[:, 1:] == ordered[:, :-1]).any(dim=1)  # [N]
        if not repeats.any():
            break
        codes[repeats] = torch.randint(space, (int(repeats.sum()), size), generator=generator)
    return codes


def _tokens(codes: torch.Tensor, length: int, base: int, offset: int) -> torch.Tensor:
    """`[...]` codes -> `[..., length]` tokens: the base-`base` digits, most significant first, plus `offset`."""
    place = base ** torch.arange(length - 1, -1, -1)  # [length]
    return codes.unsqueeze(-1) // place % base + offset


def _needle_starts(config: NIAHConfig, num_examples: int, generator: torch.Generator):
    """Positions of the M needles, ascending, and the rank of the one placed at the depth: `(starts [N, M],
    rank [N])`. In filler coordinates (F = H - M·n filler tokens) needle i starts after f_i filler tokens,
    f_1 <= ... <= f_M, at `f_i + (i - 1)·n`. The placed needle must start at s; a rank q (0-based) is possible iff
    `0 <= s - q·n <= F`, and one is drawn uniformly among those; the others get uniform filler offsets before and
    after it."""
    N, M, n, H = num_examples, config.num_needles, config.needle_len, config.haystack_len
    F = H - M * n
    if config.depth is None:
        s = torch.randint(H - n + 1, (N,), generator=generator)  # [N]
    else:
        s = torch.full((N,), round(config.depth * (H - n)), dtype=torch.int64)  # [N]
    lowest = (s - F + n - 1).div(n, rounding_mode="floor").clamp(min=0)  # ceil((s - F) / n)
    highest = s.div(n, rounding_mode="floor").clamp(max=M - 1)
    rank = _uniform_int(lowest, highest, generator)  # [N]
    placed = s - rank * n  # [N], its filler offset f
    slot = torch.arange(M - 1)  # [M - 1], the other needles; slots below the rank come before the placed one
    before = slot < rank.unsqueeze(1)  # [N, M - 1]
    low = torch.where(before, 0, placed.unsqueeze(1))
    high = torch.where(before, placed.unsqueeze(1), F)
    others = _uniform_int(low, high, generator)  # [N, M - 1]
    offsets = torch.cat([others, placed.unsqueeze(1)], dim=1).sort(dim=1).values  # [N, M]; offsets[:, rank] = f
    return offsets + torch.arange(M) * n, rank


def niah(
    config: NIAHConfig, num_examples: int, *, seed: int | None = None, generator: torch.Generator | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """Generates `num_examples` NIAH sequences (module docstring). Exactly one of `seed` and `generator`; global
    RNG state is neither read nor advanced. Returns `(inputs, targets)`, both int64 `[N, T]`; the A answer
    targets sit at positions `[T - A, T)`, every other target is -100.

        >>> config = NIAHConfig(seq_len=16, key_len=1, value_len=1, num_key_tokens=4, num_value_tokens=4,
        ...                     num_filler_tokens=4, depth=0.0)
        >>> inputs, targets = niah(config, 1, seed=0)
        >>> inputs[0, :4].tolist() == [NEEDLE, int(inputs[0, 1]), IS, int(targets[0, -1])]
        True
    """
    check_int("num_examples", num_examples, 1)
    generator = make_generator(seed, generator)
    c, N, M, K, L, H = config, num_examples, config.num_needles, config.key_len, config.value_len, config.haystack_len

    # Step 1: the haystack, uniform filler.
    inputs = torch.randint(c.filler_offset, c.vocab_size, (N, c.seq_len), generator=generator)  # [N, T]

    # Step 2: keys and values per needle, in haystack order (codes are exchangeable, so order costs nothing).
    num_keys = M if c.variant == "multikey" else 1
    key_codes = _codes(N, num_keys, c.num_key_tokens**K, True, generator).expand(N, M)  # [N, M]
    value_codes = _codes(N, M, c.num_value_tokens**L, c.variant == "multivalue", generator)  # [N, M]
    keys = _tokens(key_codes, K, c.num_key_tokens, c.key_offset)  # [N, M, K]
    values = _tokens(value_codes, L, c.num_value_tokens, c.value_offset)  # [N, M, L]

    # Step 3: needle positions; the needle of rank `rank` is the one placed at the depth (and queried).
    starts, rank = _needle_starts(c, N, generator)  # [N, M], [N]
    marker = torch.full((N, M, 1), NEEDLE)
    needles = torch.cat([marker, keys, torch.full_like(marker, IS), values], dim=2)  # [N, M, n]
    positions = starts.unsqueeze(2) + torch.arange(c.needle_len)  # [N, M, n]
    inputs[:, :H].scatter_(1, positions.flatten(1), needles.flatten(1))

    # Step 4: the tail QUERY key IS answer[:-1]; the answer is the target from IS on.
    query_key = keys[torch.arange(N), rank]  # [N, K]
    answer = values.flatten(1) if c.variant == "multivalue" else values[torch.arange(N), rank]  # [N, A]
    tail = torch.cat([torch.full((N, 1), QUERY), query_key, torch.full((N, 1), IS), answer[:, :-1]], dim=1)
    inputs[:, H:] = tail  # [N, K + A + 1]
    targets = torch.full_like(inputs, IGNORE_INDEX)
    targets[:, c.seq_len - c.answer_len:] = answer
    return inputs, targets


def exact_match(logits: torch.Tensor, targets: torch.Tensor) -> float:
    """Fraction of sequences with a label whose every labelled position is predicted right (argmax).
    logits `[N, T, V]`, targets `[N, T]`."""
    labelled = targets != IGNORE_INDEX  # [N, T]
    right = (logits.argmax(dim=-1) == targets) | ~labelled  # [N, T]
    scored = labelled.any(dim=1)  # [N]
    return int((right.all(dim=1) & scored).sum()) / int(scored.sum())


@dataclass(frozen=True)
class SingleNIAH(LengthTask):
    """RULER's single-needle NIAH (see `niah`); metrics: answer-token accuracy and exact match."""

    name: ClassVar[str] = "niah_single"
    variant: ClassVar[str] = "single"
    config_class: ClassVar[type] = NIAHConfig
    config: NIAHConfig = NIAHConfig()

    def __post_init__(self):
        if self.config.variant != self.variant:
            raise ValueError(f"config.variant must be {self.variant!r} for {self.name}, got {self.config.variant!r}")

    def with_depth(self, depth: float | None):
        """The same task with the queried needle at relative depth `depth` (None: uniform)."""
        return type(self)(replace(self.config, depth=depth))

    def generate(
        self, num_examples: int, *, seed: int | None = None, generator: torch.Generator | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Returns `(inputs, targets)`, both int64 `[N, T]`; see `niah`."""
        return niah(self.config, num_examples, seed=seed, generator=generator)

    def metric(self, logits: torch.Tensor, targets: torch.Tensor) -> dict[str, float]:
        """logits `[N, T, V]`, targets `[N, T]` -> {"accuracy": over answer tokens, "exact_match": over
        sequences, the whole answer right}."""
        return {"accuracy": accuracy(logits, targets), "exact_match": exact_match(logits, targets)}


@dataclass(frozen=True)
class MultikeyNIAHConfig(NIAHConfig):
    """NIAHConfig with the multi-key defaults: four needles with distinct keys, one queried (RULER multikey_1)."""

    variant: Variant = "multikey"
    num_needles: int = 4  # RULER's multikey_1: 4 keys, 1 queried


@dataclass(frozen=True)
class MultivalueNIAHConfig(NIAHConfig):
    """NIAHConfig with the multi-value defaults: one key with four values, all asked for (RULER multivalue)."""

    variant: Variant = "multivalue"
    num_needles: int = 4  # RULER's multivalue: 4 values of one key


@dataclass(frozen=True)
class MultikeyNIAH(SingleNIAH):
    """RULER's multi-key NIAH: distractor needles with other keys, one needle queried."""

    name: ClassVar[str] = "niah_multikey"
    variant: ClassVar[str] = "multikey"
    config_class: ClassVar[type] = MultikeyNIAHConfig
    config: NIAHConfig = MultikeyNIAHConfig()


@dataclass(frozen=True)
class MultivalueNIAH(SingleNIAH):
    """RULER's multi-value NIAH: one key in several needles; the answer is every value, in haystack order."""

    name: ClassVar[str] = "niah_multivalue"
    variant: ClassVar[str] = "multivalue"
    config_class: ClassVar[type] = MultivalueNIAHConfig
    config: NIAHConfig = MultivalueNIAHConfig()


NIAH_TASKS = {task.name: task for task in (SingleNIAH, MultikeyNIAH, MultivalueNIAH)}
