"""MAD, the Mechanistic Architecture Design tasks: selective copying, compression and memorization, and the registry
of all six (`MAD_TASKS`, `MAD_SETTINGS`).

Poli et al., "Mechanistic Design and Scaling of Hybrid Architectures" (arXiv:2403.17844, Sec. 3 and App. B;
the reference generator is `mad/data/instances.py` of athms/mad-lab, with the settings of `configs/tasks/*.yml`).
The three recall tasks (icr, noisy_icr, fuzzy_icr) are in src/regmem/tasks/mad_recall.py. MAD scores a model per
task by the mean test accuracy over the task's settings (the baseline and one-at-a-time changes, `MAD_SETTINGS`),
each at its best learning rate and weight decay, and overall by the mean over the six tasks.

What they test:
- selective_copy: a few tokens scattered among many blanks must be reproduced in order after a copy token; the
  model has to filter what it stores by content (selection) and keep the order.
- compression: a random row must be reproduced from the model's summary of it; the capacity of the fixed-size
  representation that carries a whole sequence.
- memorization: a fixed key -> value map shared by every row is learnt into the weights (fact storage, not
  in-context recall): the capacity of the parameters, mostly the channel mixers'.

Token layouts, V = vocab_size, IGNORE_INDEX = -100 where no loss applies; `targets[n, t]` is the token to predict
after reading `inputs[n, :t+1]`:
- selective_copy: copy token V-1, blank V-2, data tokens `[0, V-2)`. With n = num_tokens_to_copy and T = seq_len:
  n uniform data tokens with `T - 2n - 1` blanks spread before them (each blank lands in front of a uniformly chosen
  token, so the region ends with a data token, as mad-lab's `np.insert` does), then the copy token, then n blanks.
  The targets at the last n positions are the n data tokens in order; train and test targets are the same.
- compression: compression token V-1, data tokens `[0, V-1)`. L = input_len: L-1 uniform data tokens, the
  compression token, then L-1 more compression tokens as read-out prompts, T = 2L - 1. The targets at the last
  L-1 positions are the data tokens in order; train and test targets are the same.
- memorization: insert token V-1, keys `[0, K)` with K = (V-1)//2, values `[K, V-1)`. A fixed map sends key i to
  `memorization_map(config)[i]`, a uniform injection drawn from `map_seed` alone, so every call (train or test,
  any seed) shares it. A row is T/2 pairs (key uniform, insert token); the target at an insert token is its key's
  value; train and test targets are the same.

Dimension legend: N sequences, T = seq_len, L = input_len (compression), n = num_tokens_to_copy, V vocabulary.

Worked examples (one row each, asserted token by token in tests/tasks/test_mad.py):
- `selective_copying(SelectiveCopyingConfig(vocab_size=6, seq_len=12, num_tokens_to_copy=3), 1, seed=6)`: data
  0..3, blank 4, copy 5; 12 - 2·3 - 1 = 5 blanks among the data tokens 2, 1, 3::

      inputs:  [4, 4, 2, 4, 1, 4, 4, 3, 5, 4, 4, 4]
      targets: [-100, -100, -100, -100, -100, -100, -100, -100, -100, 2, 1, 3]

- `compression(CompressionConfig(vocab_size=5, input_len=4), 1, seed=0)`: data 0..3, compression token 4, T = 7::

      inputs:  [0, 3, 1, 4, 4, 4, 4]
      targets: [-100, -100, -100, -100, 0, 3, 1]

- `memorization(MemorizationConfig(vocab_size=9, seq_len=6), 1, seed=4)`: keys 0..3, values 4..7, insert 8, and
  the map of `map_seed` 12345 is `memorization_map(config) = [6, 5, 7, 4]` (key 0 -> 6, key 1 -> 5, ...)::

      inputs:  [2, 8, 2, 8, 3, 8]
      targets: [-100, 7, -100, 7, -100, 4]

Deviations from mad-lab:
- compression: mad-lab trains an encoder-decoder (its `AutoEncoder` backbone pools the last token's representation
  and decodes every position from it with an MLP). regmem's models are decoder-only causal LMs, so the read-out
  runs on after the compression token: L-1 more compression tokens, each asked for the next data token. For a
  recurrent (memory) mixer the state after the first compression token is the bottleneck, as in mad-lab; attention
  can look back at the data tokens and copy them, so for it the task is a copy task, not a compression. mad-lab
  also scores the compression token itself (its targets are the whole input); here only the L-1 data tokens are
  scored.
- selective_copy: mad-lab scatters the blanks with NumPy's global RNG (unseeded); here every draw comes from the
  call's generator.
- All: draws come from a `torch.Generator` (pure, seeded), so rows for a given seed differ from mad-lab's; the
  distributions are the same. Accuracy is pooled over labelled positions (`base.accuracy`); mad-lab logs
  torchmetrics' `MulticlassAccuracy`, which averages per class by default. The training-set sizes of mad-lab's
  settings (12,800 rows; 256 for memorization) are a data budget of the training run, not part of a config.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import torch

from regmem.tasks.base import IGNORE_INDEX, ConfigTask, LengthTask, accuracy, check_int, make_generator
from regmem.tasks.mad_recall import FuzzyInContextRecall, InContextRecall, NoisyInContextRecall

# ---------------------------------------------------------------------------------------------- selective copying


@dataclass(frozen=True)
class SelectiveCopyingConfig:
    """Selective copying; defaults are mad-lab's baseline (V = 16, T = 256, 16 tokens to copy)."""

    vocab_size: int = 16  # V: data [0, V-2), blank V-2, copy token V-1; mad-lab baseline
    seq_len: int = 256  # T = data region (n tokens + T-2n-1 blanks) + copy token + n answer slots; mad-lab baseline
    num_tokens_to_copy: int = 16  # n, data tokens per row; mad-lab baseline

    def __post_init__(self):
        check_int("vocab_size", self.vocab_size, 3)
        check_int("num_tokens_to_copy", self.num_tokens_to_copy, 1)
        check_int("seq_len", self.seq_len, 2 * self.num_tokens_to_copy + 2)  # mad-lab: at least one blank


def selective_copying(
    config: SelectiveCopyingConfig, num_examples: int, *, seed: int | None = None,
    generator: torch.Generator | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """`num_examples` selective-copying rows (module docstring). Exactly one of `seed` and `generator`; global RNG
    state is neither read nor advanced. Returns `(inputs, targets)`, int64 `[N, T]`, labelled at the last n
    positions only.

        >>> config = SelectiveCopyingConfig(vocab_size=6, seq_len=12, num_tokens_to_copy=3)
        >>> inputs, targets = selective_copying(config, 1, seed=6)
        >>> inputs.tolist()
        [[4, 4, 2, 4, 1, 4, 4, 3, 5, 4, 4, 4]]
        >>> targets.tolist()
        [[-100, -100, -100, -100, -100, -100, -100, -100, -100, 2, 1, 3]]
    """
    check_int("num_examples", num_examples, 1)
    generator = make_generator(seed, generator)
    N, T, V, n = num_examples, config.seq_len, config.vocab_size, config.num_tokens_to_copy
    blanks = T - 2 * n - 1
    tokens = torch.randint(V - 2, (N, n), generator=generator)  # [N, n]
    gap = torch.randint(n, (N, blanks), generator=generator)  # [N, blanks]: the token each blank lands before
    before = torch.zeros(N, n, dtype=torch.int64).scatter_add_(1, gap, torch.ones_like(gap))  # [N, n]
    positions = before.cumsum(dim=1) + torch.arange(n)  # [N, n], token i after its i tokens and the blanks so far
    inputs = torch.full((N, T), V - 2, dtype=torch.int64)
    inputs.scatter_(1, positions, tokens)
    inputs[:, T - n - 1] = V - 1  # the copy token
    targets = torch.full((N, T), IGNORE_INDEX, dtype=torch.int64)
    targets[:, T - n:] = tokens
    return inputs, targets


@dataclass(frozen=True)
class SelectiveCopying(LengthTask):
    """Selective copying (see `selective_copying`); metric: accuracy over the n answer positions."""

    name: ClassVar[str] = "selective_copy"
    config_class: ClassVar[type] = SelectiveCopyingConfig
    config: SelectiveCopyingConfig = SelectiveCopyingConfig()

    def generate(
        self, num_examples: int, *, seed: int | None = None, generator: torch.Generator | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Returns `(inputs, targets)`, int64 `[N, T]`; see `selective_copying`."""
        return selective_copying(self.config, num_examples, seed=seed, generator=generator)

    def metric(self, logits: torch.Tensor, targets: torch.Tensor) -> dict[str, float]:
        """logits `[N, T, V]`, targets `[N, T]` -> {"accuracy"}."""
        return {"accuracy": accuracy(logits, targets)}


# ---------------------------------------------------------------------------------------------------- compression


@dataclass(frozen=True)
class CompressionConfig:
    """Compression; defaults are mad-lab's baseline (V = 16, L = 32, so T = 63)."""

    vocab_size: int = 16  # V: data [0, V-1), compression token V-1; mad-lab baseline
    input_len: int = 32  # L, mad-lab's seq_len: L-1 data tokens + the compression token; mad-lab baseline

    def __post_init__(self):
        check_int("vocab_size", self.vocab_size, 2)
        check_int("input_len", self.input_len, 2)

    @property
    def seq_len(self) -> int:
        """T = 2L - 1: the L input tokens, then L-1 read-out positions."""
        return 2 * self.input_len - 1


def compression(
    config: CompressionConfig, num_examples: int, *, seed: int | None = None, generator: torch.Generator | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """`num_examples` compression rows (module docstring). Exactly one of `seed` and `generator`; global RNG state
    is neither read nor advanced. Returns `(inputs, targets)`, int64 `[N, 2L-1]`, labelled at the last L-1
    positions only.

        >>> inputs, targets = compression(CompressionConfig(vocab_size=5, input_len=4), 1, seed=0)
        >>> inputs.tolist(), targets.tolist()
        ([[0, 3, 1, 4, 4, 4, 4]], [[-100, -100, -100, -100, 0, 3, 1]])
    """
    check_int("num_examples", num_examples, 1)
    generator = make_generator(seed, generator)
    N, L, V = num_examples, config.input_len, config.vocab_size
    data = torch.randint(V - 1, (N, L - 1), generator=generator)  # [N, L-1]
    inputs = torch.cat([data, torch.full((N, L), V - 1)], dim=1)  # [N, 2L-1]
    targets = torch.cat([torch.full((N, L), IGNORE_INDEX), data], dim=1)  # [N, 2L-1]
    return inputs, targets


@dataclass(frozen=True)
class Compression(ConfigTask):
    """Compression (see `compression`); metric: accuracy over the L-1 read-out positions. No `with_seq_len`: T is
    2L - 1, so a longer row is a new `input_len`."""

    name: ClassVar[str] = "compression"
    config_class: ClassVar[type] = CompressionConfig
    config: CompressionConfig = CompressionConfig()

    def generate(
        self, num_examples: int, *, seed: int | None = None, generator: torch.Generator | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Returns `(inputs, targets)`, int64 `[N, 2L-1]`; see `compression`."""
        return compression(self.config, num_examples, seed=seed, generator=generator)

    def metric(self, logits: torch.Tensor, targets: torch.Tensor) -> dict[str, float]:
        """logits `[N, T, V]`, targets `[N, T]` -> {"accuracy"}."""
        return {"accuracy": accuracy(logits, targets)}


# --------------------------------------------------------------------------------------------------- memorization


@dataclass(frozen=True)
class MemorizationConfig:
    """Memorization; defaults are mad-lab's baseline (V = 256, T = 32, its map seed 12345)."""

    vocab_size: int = 256  # V: keys [0, (V-1)//2), values [(V-1)//2, V-1), insert token V-1; mad-lab baseline
    seq_len: int = 32  # T, even: T/2 (key, insert) pairs; mad-lab baseline
    map_seed: int = 12345  # fixes the key -> value map for every call (mad-lab's default seed)

    def __post_init__(self):
        check_int("vocab_size", self.vocab_size, 3)  # one key, one value, the insert token
        check_int("seq_len", self.seq_len, 2)
        if self.seq_len % 2 != 0:
            raise ValueError(f"seq_len must be even ((key, insert) pairs), got {self.seq_len}")
        check_int("map_seed", self.map_seed, 0)

    @property
    def num_keys(self) -> int:
        """K: keys `[0, K)`, values `[K, V-1)`."""
        return (self.vocab_size - 1) // 2


def memorization_map(config: MemorizationConfig) -> torch.Tensor:
    """The fixed map, int64 `[K]`: key i -> value `map[i]`, distinct values drawn uniformly from `[K, V-1)` by a
    generator seeded with `config.map_seed` only.

        >>> memorization_map(MemorizationConfig(vocab_size=9, seq_len=6)).tolist()
        [6, 5, 7, 4]
    """
    K = config.num_keys
    order = torch.randperm(config.vocab_size - 1 - K, generator=torch.Generator().manual_seed(config.map_seed))
    return K + order[:K]


def memorization(
    config: MemorizationConfig, num_examples: int, *, seed: int | None = None,
    generator: torch.Generator | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """`num_examples` memorization rows (module docstring). Exactly one of `seed` and `generator` (the rows' draw;
    the map depends on `config.map_seed` only); global RNG state is neither read nor advanced. Returns
    `(inputs, targets)`, int64 `[N, T]`, labelled at the insert tokens.

        >>> inputs, targets = memorization(MemorizationConfig(vocab_size=9, seq_len=6), 1, seed=4)
        >>> inputs.tolist(), targets.tolist()
        ([[2, 8, 2, 8, 3, 8]], [[-100, 7, -100, 7, -100, 4]])
    """
    check_int("num_examples", num_examples, 1)
    generator = make_generator(seed, generator)
    N, P = num_examples, config.seq_len // 2
    keys = torch.randint(config.num_keys, (N, P), generator=generator)  # [N, P]
    inputs = torch.stack([keys, torch.full_like(keys, config.vocab_size - 1)], dim=2)  # [N, P, 2]
    targets = torch.stack([torch.full_like(keys, IGNORE_INDEX), memorization_map(config)[keys]], dim=2)  # [N, P, 2]
    return inputs.reshape(N, config.seq_len), targets.reshape(N, config.seq_len)


@dataclass(frozen=True)
class Memorization(LengthTask):
    """Memorization (see `memorization`); metric: accuracy over the insert positions."""

    name: ClassVar[str] = "memorization"
    config_class: ClassVar[type] = MemorizationConfig
    config: MemorizationConfig = MemorizationConfig()

    def generate(
        self, num_examples: int, *, seed: int | None = None, generator: torch.Generator | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Returns `(inputs, targets)`, int64 `[N, T]`; see `memorization`."""
        return memorization(self.config, num_examples, seed=seed, generator=generator)

    def metric(self, logits: torch.Tensor, targets: torch.Tensor) -> dict[str, float]:
        """logits `[N, T, V]`, targets `[N, T]` -> {"accuracy"}."""
        return {"accuracy": accuracy(logits, targets)}


# ------------------------------------------------------------------------------------------------------- registry

# The six MAD tasks by short name, in the paper's order of recall, copying, compression, memorization.
MAD_TASKS = {
    task.name: task for task in (InContextRecall, NoisyInContextRecall, FuzzyInContextRecall, SelectiveCopying,
                                 Compression, Memorization)
}

# mad-lab's settings per task (`configs/tasks/*.yml`): the baseline `{}`, then each change made alone, as overrides
# of the task's config. mad-lab's other change, the number of training rows (6400, 3200, 1600, 800 instead of
# 12,800), changes the data budget of the run, not the config, so it is not listed here.
MAD_SETTINGS: dict[str, list[dict]] = {
    "icr": [{}, *({"vocab_size": v} for v in (32, 64, 128)), *({"seq_len": t} for t in (256, 512, 1024))],
    "noisy_icr": [
        {}, *({"vocab_size": v} for v in (48, 80, 144)),  # 16 of each are noise ids, as in the baseline's 32
        *({"seq_len": t} for t in (256, 512, 1024)), *({"frac_noise": f} for f in (0.4, 0.6, 0.8)),
    ],
    "fuzzy_icr": [{}, *({"vocab_size": v} for v in (32, 64, 128)), *({"seq_len": t} for t in (256, 512, 1024))],
    "selective_copy": [
        {}, *({"vocab_size": v} for v in (32, 64, 128)), *({"seq_len": t} for t in (512, 1024)),
        *({"num_tokens_to_copy": n} for n in (32, 64, 96)),
    ],
    "compression": [{}, *({"vocab_size": v} for v in (32, 64, 128)), *({"input_len": n} for n in (64, 128, 256))],
    "memorization": [{}, *({"vocab_size": v} for v in (512, 1024, 2048, 4096, 8192))],
}
