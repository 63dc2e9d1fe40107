"""MQAR, multi-query associative recall (Arora, Eyuboglu et al., "Zoology", arXiv:2312.04927).

Implements the generator of HazyResearch/zoology `zoology/data/multiquery_ar.py` (at commit d88d6f5),
in the six steps of `multiquery_ar` below. A sequence is a key-value context `k1 v1 k2 v2 ...` (tiled `num_passes`
times, JRT repetition), then a query region where each key reappears once, at an even offset `2·gap` whose gap
follows a power law p_i ∝ a·i^(a−1). The target at a query key's position is the value bound to it; every other
target is -100. Keys come from `[1, V/2)`, values from `[V/2, V)`, and 0 is the filler token (replaced by uniform
random tokens in `[0, V)` when `random_non_queries`).

Dimension legend: N sequences, T = seq_len, P = num_kv_pairs, C = 2·P·num_passes (context length), V vocab_size.

Worked example, `multiquery_ar(MQARConfig(vocab_size=20, seq_len=16, num_kv_pairs=2, random_non_queries=False),
1, seed=0)`: keys from [1, 10), values from [10, 20), C = 4, gaps from [0, 6)::

    inputs:  [9, 13, 8, 17, 9, 0, 0, 0, 0, 0, 0, 0, 8, 0, 0, 0]
    targets: [-100, -100, -100, -100, 13, -100, -100, -100, -100, -100, -100, -100, 17, -100, -100, -100]

The context binds 9 -> 13 and 8 -> 17. Key 9 is queried at position C + 2·0 = 4 (gap 0) and key 8 at
C + 2·4 = 12 (gap 4); the targets there are the bound values, so the model predicts 13 from the query token 9.

The distribution is zoology's, down to the order of the gaps (successive sampling without replacement, as
`numpy.random.choice` does), but the draws come from a `torch.Generator` rather than NumPy's global RNG, so the
token ids for a given seed differ from zoology's.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import torch
from einops import rearrange, repeat

from regmem.tasks.base import IGNORE_INDEX, ConfigTask, accuracy, check_int, make_generator


@dataclass(frozen=True)
class MQARConfig:
    """One MQAR setting; the defaults are Zoology's vocabulary with its smallest Fig. 2 pair (T=64, P=4)."""

    vocab_size: int = 8192  # Zoology VOCAB_SIZE; keys use [1, V/2), values [V/2, V)
    seq_len: int = 64  # T, input tokens per sequence
    num_kv_pairs: int = 4  # P, distinct keys per sequence, each queried once
    power_a: float = 0.01  # a of the gap law p_i ∝ a·i^(a−1); 1.0 gives uniform gaps
    num_passes: int = 1  # times the kv context is repeated (JRT)
    random_non_queries: bool = True  # replace filler zeros by uniform tokens in [0, V)

    def __post_init__(self):
        check_int("seq_len", self.seq_len, 2)
        if self.seq_len % 2 != 0:
            raise ValueError(f"seq_len must be even, got {self.seq_len}")
        check_int("vocab_size", self.vocab_size, 1)
        if self.vocab_size <= self.seq_len:
            raise ValueError(f"vocab_size must exceed seq_len = {self.seq_len}, got {self.vocab_size}")
        check_int("num_kv_pairs", self.num_kv_pairs, 1)
        check_int("num_passes", self.num_passes, 1)
        needed = self.num_kv_pairs * 2 * self.num_passes + self.num_kv_pairs * 2
        if needed > self.seq_len:
            raise ValueError(
                f"num_kv_pairs = {self.num_kv_pairs} with num_passes = {self.num_passes} needs "
                f"seq_len >= 2·num_kv_pairs·(num_passes + 1) = {needed}, got seq_len = {self.seq_len}"
            )
        if isinstance(self.power_a, bool) or not isinstance(self.power_a, int | float) or not self.power_a > 0:
            raise ValueError(f"power_a must be a float > 0, got {self.power_a!r}")
        if not isinstance(self.random_non_queries, bool):
            raise ValueError(f"random_non_queries must be a bool, got {self.random_non_queries!r}")

    @property
    def context_size(self) -> int:
        """C = 2·P·num_passes, the length of the (tiled) key-value context."""
        return 2 * self.num_kv_pairs * self.num_passes


def _sample_distinct(low: int, high: int, size: int, num_examples: int, generator: torch.Generator) -> torch.Tensor:
    """Per row, `size` distinct ints from `[low, high)`, drawn one after another uniformly from those not yet
    taken (so every ordered sample is equally likely). Returns int64 `[N, size]`."""
    chosen = torch.empty(num_examples, size, dtype=torch.int64)
    taken = torch.empty(num_examples, 0, dtype=torch.int64)  # [N, j], the offsets drawn so far, ascending
    for j in range(size):
        rank = torch.randint(high - low - j, (num_examples, 1), generator=generator)  # rank among untaken offsets
        # taken[i] - i untaken offsets lie below taken[i], so the untaken offset of rank r exceeds exactly the
        # taken ones with taken[i] - i <= r; their count is also its slot in `taken`.
        slot = torch.searchsorted(taken - torch.arange(j), rank, right=True)  # [N, 1]
        offset = rank + slot  # [N, 1]
        chosen[:, j : j + 1] = offset
        cols = torch.arange(j + 1)
        index = torch.where(cols < slot, cols, torch.where(cols == slot, j, cols - 1))  # [N, j + 1]
        taken = torch.cat([taken, offset], dim=1).gather(1, index)  # [N, j + 1]
    return chosen + low


def _sample_gaps(config: MQARConfig, num_examples: int, generator: torch.Generator) -> torch.Tensor:
    """Per row, P distinct gaps from `[0, space)` with p_i ∝ a·i^(a−1) for gap i−1, drawn successively without
    replacement (as `numpy.random.choice(replace=False, p=p)`). Returns int64 `[N, P]`."""
    space = (config.seq_len - config.context_size) // 2
    i = torch.arange(1, space + 1, dtype=torch.float64)
    p = config.power_a * i ** (config.power_a - 1)
    p = p / p.sum()  # [space]
    # Exponential race (Efraimidis & Spirakis 2006): sorting E_i / p_i ascending, E_i ~ Exp(1), orders the items
    # exactly as successive weighted sampling without replacement does.
    race = torch.empty(num_examples, space, dtype=torch.float64).exponential_(generator=generator) / p  # [N, space]
    return race.topk(config.num_kv_pairs, dim=1, largest=False, sorted=True).indices


def multiquery_ar(
    config: MQARConfig, num_examples: int, *, seed: int | None = None, generator: torch.Generator | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """Generates `num_examples` MQAR sequences (zoology's generator, above). Exactly one of `seed` and `generator`
    must be given; global RNG state is neither read nor advanced.

    Returns `(inputs, targets)`, both int64 `[N, T]`. `targets[n, t]` is the value bound to key `inputs[n, t]`
    where position t is a query, and -100 elsewhere (P labelled positions per sequence, all in the query region
    at even offsets from C).

    Example, with 0 as filler (`random_non_queries=False`)::

        >>> config = MQARConfig(vocab_size=20, seq_len=16, num_kv_pairs=2, random_non_queries=False)
        >>> inputs, targets = multiquery_ar(config, 1, seed=0)
        >>> inputs.tolist()
        [[9, 13, 8, 17, 9, 0, 0, 0, 0, 0, 0, 0, 8, 0, 0, 0]]
        >>> targets.tolist()
        [[-100, -100, -100, -100, 13, -100, -100, -100, -100, -100, -100, -100, 17, -100, -100, -100]]
    """
    check_int("num_examples", num_examples, 1)
    generator = make_generator(seed, generator)
    N, T, P, V, C = num_examples, config.seq_len, config.num_kv_pairs, config.vocab_size, config.context_size

    # Steps 1-2: distinct keys from [1, V/2) and distinct values from [V/2, V); context k1 v1 k2 v2 ... tiled.
    keys = _sample_distinct(1, V // 2, P, N, generator)  # [N, P]
    values = _sample_distinct(V // 2, V, P, N, generator)  # [N, P]
    pairs = torch.stack([keys, values], dim=2)  # [N, P, 2]
    context = rearrange(pairs, "n p two -> n (p two)")  # [N, 2P]
    context = repeat(context, "n c -> n (passes c)", passes=config.num_passes)  # [N, C]

    # Step 3: power-law gaps, one distinct gap slot per key.
    gaps = _sample_gaps(config, N, generator)  # [N, P]

    # Steps 4-5: key j reappears at C + 2·gap_j. Zoology builds length T+1 and shifts labels by one; the result is
    # the value sitting at its key's own position, which is written here directly.
    query_positions = C + 2 * gaps  # [N, P]
    inputs = torch.zeros(N, T, dtype=torch.int64)
    inputs[:, :C] = context
    inputs.scatter_(1, query_positions, keys)
    targets = torch.full((N, T), IGNORE_INDEX, dtype=torch.int64)
    targets.scatter_(1, query_positions, values)

    # Step 6: filler zeros become uniform tokens in [0, V) (which may collide with keys or values, as in zoology).
    if config.random_non_queries:
        filler = inputs == 0  # [N, T]
        noise = torch.randint(V, (N, T), generator=generator)  # [N, T]
        inputs = torch.where(filler, noise, inputs)
    return inputs, targets


@dataclass(frozen=True)
class MQAR(ConfigTask):
    """The MQAR task (see `multiquery_ar`); metric: accuracy over labelled (query) positions."""

    name: ClassVar[str] = "mqar"
    config_class: ClassVar[type] = MQARConfig  # what `regmem compare` builds from preset and sweep fields
    config: MQARConfig = MQARConfig()

    def generate(
        self, num_examples: int, *, seed: int | None = None, generator: torch.Generator | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Returns `(inputs, targets)`, both int64 `[N, T]`; see `multiquery_ar`."""
        return multiquery_ar(self.config, num_examples, seed=seed, generator=generator)

    def metric(self, logits: torch.Tensor, targets: torch.Tensor) -> dict[str, float]:
        """logits `[N, T, V]`, targets `[N, T]` -> {"accuracy"}. Every sequence has P labels, so this pooled
        accuracy equals zoology's per-example mean."""
        return {"accuracy": accuracy(logits, targets)}
