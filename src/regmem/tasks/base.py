"""The task interface: a task is a config plus a pure, seeded generator of `(inputs, targets)` and a metric.

Dimension legend: N sequences (examples), T time (sequence length), V vocabulary size.

Every task generator takes exactly one of an integer `seed` or a `torch.Generator` and never reads or advances
global RNG state (CONTRIBUTING.md, "Style"). Targets use `IGNORE_INDEX` (-100, the default
`ignore_index` of `torch.nn.functional.cross_entropy`) wherever no loss applies.

Three disjoint splits (`split_data`): a run of seed s trains on `generate_train` (or `generate`) with seed s, chooses
(learning rate, early stop) on `generate` with seed s + 1, and reports `generate_test` (or `generate`) with seed
s + `TEST_SEED_OFFSET`. The training and validation streams are those runs always had, so a choice made before the
test split existed was already a validation choice. A task whose examples are windows of one fixed dataset (text)
splits the data itself by range instead: its three generators read three disjoint byte ranges.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Literal, Protocol, runtime_checkable

import torch

IGNORE_INDEX = -100
Split = Literal["train", "valid", "test"]
SPLITS: tuple[Split, ...] = ("train", "valid", "test")
# The test stream's seed offset: a prime above any seed a sweep uses, so seed s + TEST_SEED_OFFSET is never another
# run's training (s') or validation (s' + 1) seed for s' < TEST_SEED_OFFSET - 1
TEST_SEED_OFFSET = 1_000_003


@runtime_checkable
class Task(Protocol):
    """A synthetic sequence task over token ids in `[0, vocab_size)`, sequences of length `seq_len`."""

    @property
    def name(self) -> str: ...

    @property
    def vocab_size(self) -> int: ...

    @property
    def seq_len(self) -> int: ...

    def generate(
        self, num_examples: int, *, seed: int | None = None, generator: torch.Generator | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Returns `(inputs, targets)`, both int64 `[N, T]`; targets are `IGNORE_INDEX` where no loss applies.
        Exactly one of `seed` and `generator` must be given."""
        ...

    def metric(self, logits: torch.Tensor, targets: torch.Tensor) -> dict[str, float]:
        """Scores `logits` `[N, T, V]` against `targets` `[N, T]`; returns metric name -> value."""
        ...


def split_seed(seed: int, split: Split) -> int:
    """The generator seed of `split` for a run of seed `seed`: train s, valid s + 1, test s + TEST_SEED_OFFSET."""
    check_split(split)
    return seed + {"train": 0, "valid": 1, "test": TEST_SEED_OFFSET}[split]


def check_split(split) -> None:
    if split not in SPLITS:
        raise ValueError(f"split must be one of {', '.join(SPLITS)}, got {split!r}")


def split_data(task, split: Split, num_examples: int, *, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """`num_examples` examples of `split` for a run of seed `seed` (module docstring): the task's `generate_train`
    (train) or `generate_test` (test) where it has one, else `generate`, at `split_seed(seed, split)`."""
    check_split(split)
    method = {"train": "generate_train", "valid": "generate", "test": "generate_test"}[split]
    return getattr(task, method, task.generate)(num_examples, seed=split_seed(seed, split))


def check_int(field: str, value, minimum: int) -> None:
    """Raises ValueError naming `field` unless `value` is an int (not a bool) >= `minimum`."""
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ValueError(f"{field} must be an int >= {minimum}, got {value!r}")


class ConfigTask:
    """Mixin for a task dataclass holding `config`: `vocab_size` and `seq_len` are the config's."""

    @property
    def vocab_size(self) -> int:
        return self.config.vocab_size

    @property
    def seq_len(self) -> int:
        return self.config.seq_len


class LengthTask(ConfigTask):
    """A config task whose config has a `seq_len` field: `with_seq_len` gives the same task at another length, the
    length-generalisation split (train at T, test at 2T, 4T, ...)."""

    def with_seq_len(self, seq_len: int):
        return type(self)(replace(self.config, seq_len=seq_len))


def make_generator(seed: int | None, generator: torch.Generator | None) -> torch.Generator:
    """Returns `generator`, or a fresh CPU `torch.Generator` seeded with `seed`; exactly one must be given."""
    if (seed is None) == (generator is None):
        raise ValueError("exactly one of seed and generator must be given")
    if generator is not None:
        if not isinstance(generator, torch.Generator):
            raise ValueError(f"generator must be a torch.Generator, got {type(generator).__name__}")
        return generator
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise ValueError(f"seed must be an int, got {seed!r}")
    return torch.Generator().manual_seed(seed)


def accuracy(logits: torch.Tensor, targets: torch.Tensor) -> float:
    """Fraction of labelled positions (`targets != IGNORE_INDEX`) where `argmax(logits, -1) == targets`.

    logits: `[N, T, V]` float; targets: `[N, T]` int64. Raises ValueError if no position is labelled.
    """
    if logits.ndim != 3:
        raise ValueError(f"logits must have shape [N, T, V], got shape {list(logits.shape)}")
    if tuple(targets.shape) != tuple(logits.shape[:2]):
        raise ValueError(f"targets must have shape [N, T] = {list(logits.shape[:2])}, got {list(targets.shape)}")
    labelled = targets != IGNORE_INDEX  # [N, T]
    num_labelled = int(labelled.sum())
    if num_labelled == 0:
        raise ValueError("targets has no labelled position (every entry is IGNORE_INDEX)")
    correct = (logits.argmax(dim=-1) == targets) & labelled  # [N, T]
    return int(correct.sum()) / num_labelled
