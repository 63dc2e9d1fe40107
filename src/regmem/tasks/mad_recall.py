"""The three recall tasks of MAD: in-context recall, noisy in-context recall and fuzzy in-context recall.

Poli et al., "Mechanistic Design and Scaling of Hybrid Architectures" (arXiv:2403.17844, Sec. 3 and App. B;
the reference generator is `mad/data/instances.py` of athms/mad-lab, with the settings of `configs/tasks/*.yml`).
The other three MAD tasks and the registry `MAD_TASKS` are in src/regmem/tasks/mad.py.

What they test. A row is a stream of key-value pairs; a key's value is fixed within the row, so the second time a
key appears the model can predict its value only by recalling the earlier pair from its context (associative
recall with many queries, as in MQAR, but with keys and values drawn from a tiny vocabulary and keys repeated at
random). Noisy recall interleaves pairs of noise tokens the model must ignore (selective memory: a mixer that
writes everything fills its state with noise). Fuzzy recall makes keys and values motifs of 1 to 3 tokens, so a
key is only recognised after several tokens and a value must be produced token by token.

Train and test targets differ, as in mad-lab: training uses the plain next-token target at every position
(`generate_train`), and the score counts only what can be recalled (`generate`): the value tokens of pairs whose
key appeared earlier in the row, and the final probe. The final probe pair (last two positions for ICR) repeats a
key of the context, so every row has at least one scored answer.

Token layouts, V = vocab_size (a key's and a value's tokens never share ids, so a row segments unambiguously):
- icr: keys `[0, V//2)`, values `[V//2, V)`; no special token. T = seq_len (even) = P pair slots of 2 tokens: P-1
  context pairs (key uniform, value uniform on the key's first occurrence and repeated after), then the probe pair
  (a key drawn uniformly from the distinct keys of the context, and its value).
- noisy_icr: as icr over the first `V - noise_vocab_size` ids; ids `[V - noise_vocab_size, V)` are noise. Each
  context slot is, with probability `frac_noise`, a pair of uniform noise tokens instead of a key-value pair (one
  context slot, chosen uniformly, is always a real pair).
- fuzzy_icr: pad = V-1, keys `[0, (V-1)//2)`, values `[(V-1)//2, V-1)`. A key motif is an ordered tuple of distinct
  key tokens (uniform over those tuples), of size `k_motif_size` at test time and uniform in `1..k_motif_size` in
  training; a value motif likewise of size uniform in `1..v_motif_size`. A row is pads, then the context pairs with
  the probe pair inserted at a uniform pair boundary, then the probe pair again, exactly seq_len tokens.

Targets: `targets[n, t]` is the token to predict after reading `inputs[n, :t+1]`, IGNORE_INDEX (-100) where no
loss applies; the last position is never labelled (nothing follows it).

Dimension legend: N sequences, T = seq_len, P = T/2 pair slots, V vocabulary (and classes).

Worked examples (one row each, asserted token by token in tests/tasks/test_mad.py):
- `in_context_recall(InContextRecallConfig(vocab_size=8, seq_len=8), 1, seed=5)`: keys 0..3, values 4..7::

      inputs:  [3, 5, 2, 4, 3, 5, 2, 4]
      scored:  [-100, -100, -100, -100, 5, -100, 4, -100]
      train:   [5, 2, 4, 3, 5, 2, 4, -100]

  The context binds 3 -> 5 and 2 -> 4; key 3 comes back in slot 2 (answer 5 at its key's position 4), and the
  probe asks for key 2 (answer 4 at position 6).
- `noisy_in_context_recall(NoisyInContextRecallConfig(vocab_size=12, seq_len=10, noise_vocab_size=4,
  frac_noise=0.5), 1, seed=5)`: keys 0..3, values 4..7, noise 8..11::

      inputs:  [3, 4, 2, 5, 3, 4, 11, 8, 2, 5]
      scored:  [-100, -100, -100, -100, 4, -100, -100, -100, 5, -100]

  Slot 3 is the noise pair (11, 8); the probe asks for key 2, bound in slot 1.
- `fuzzy_in_context_recall(FuzzyInContextRecallConfig(vocab_size=9, seq_len=16, k_motif_size=2, v_motif_size=2),
  1, seed=34)`: pad 8, keys 0..3, values 4..7::

      inputs:  [8, 8, 2, 3, 5, 1, 2, 6, 4, 2, 3, 5, 1, 2, 6, 4]
      scored:  [-100, -100, -100, -100, -100, -100, -100, -100, -100, -100, 5, -100, -100, 6, 4, -100]

  Two pads, then the pairs (2 3 -> 5), (1 2 -> 6 4), (2 3 -> 5) and the probe (1 2 -> 6 4): the value of a
  repeated key is scored token by token, starting at its key's last token.

Deviations from mad-lab (each keeps the task's content):
- mad-lab builds seq_len tokens and drops the last one (the probe's final value token) when shifting, so its rows
  hold seq_len - 1 tokens; here the row keeps all seq_len tokens and the last position is unlabelled, which scores
  the same predictions (a causal model never sees a token before predicting it) with T = seq_len.
- mad-lab's guaranteed non-noise slot may be the probe slot, leaving no real pair in a very noisy row (its probe
  draw then fails); here it is always a context slot. mad-lab's fuzzy generator can also stop before inserting the
  probe pair into the context (the probe is then unanswerable); here the room for it is reserved.
- Draws come from a `torch.Generator` (pure, seeded), not NumPy, so rows for a given seed differ from mad-lab's;
  the distribution is the same. Accuracy is pooled over labelled positions (`base.accuracy`); mad-lab logs
  torchmetrics' `MulticlassAccuracy`, which averages per class by default.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Literal

import torch

from regmem.tasks.base import IGNORE_INDEX, LengthTask, accuracy, check_int, make_generator

Split = Literal["train", "test"]


def check_fraction(field: str, value) -> None:
    """Raises ValueError naming `field` unless `value` is a float (or int, not a bool) in [0, 1)."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value < 1:
        raise ValueError(f"{field} must be a float in [0, 1), got {value!r}")


def check_split(split) -> None:
    if split not in ("train", "test"):
        raise ValueError(f"split must be 'train' or 'test', got {split!r}")


def next_token_targets(inputs: torch.Tensor) -> torch.Tensor:
    """The training targets of the recall tasks: `targets[:, t] = inputs[:, t+1]`, IGNORE_INDEX at T-1. int64
    `[N, T]` -> int64 `[N, T]`."""
    targets = torch.full_like(inputs, IGNORE_INDEX)
    targets[:, :-1] = inputs[:, 1:]
    return targets


# ------------------------------------------------------------------------------------- icr and noisy icr


@dataclass(frozen=True)
class InContextRecallConfig:
    """In-context recall; defaults are mad-lab's baseline (V = 16, T = 128)."""

    vocab_size: int = 16  # V: keys [0, V//2), values [V//2, V); mad-lab baseline
    seq_len: int = 128  # T, even: T/2 - 1 context pairs and the probe pair; mad-lab baseline

    def __post_init__(self):
        _check_pairs(self.vocab_size, self.seq_len, noise_vocab_size=0)


@dataclass(frozen=True)
class NoisyInContextRecallConfig:
    """Noisy in-context recall; defaults are mad-lab's baseline (V = 32 of which 16 noise, T = 128, 20 % noise)."""

    vocab_size: int = 32  # V, noise ids included: keys and values share the first V - noise_vocab_size ids
    seq_len: int = 128  # T, even: T/2 - 1 context slots and the probe pair; mad-lab baseline
    noise_vocab_size: int = 16  # noise ids [V - noise_vocab_size, V); mad-lab baseline
    frac_noise: float = 0.2  # probability that a context slot holds two noise tokens; mad-lab baseline

    def __post_init__(self):
        check_int("noise_vocab_size", self.noise_vocab_size, 1)
        _check_pairs(self.vocab_size, self.seq_len, noise_vocab_size=self.noise_vocab_size)
        check_fraction("frac_noise", self.frac_noise)


def _check_pairs(vocab_size, seq_len, *, noise_vocab_size: int) -> None:
    check_int("vocab_size", vocab_size, noise_vocab_size + 2)  # at least one key and one value
    check_int("seq_len", seq_len, 4)  # one context pair and the probe
    if seq_len % 2 != 0:
        raise ValueError(f"seq_len must be even (pairs of tokens), got {seq_len}")


def _pair_rows(
    vocab_size: int, seq_len: int, noise_vocab_size: int, frac_noise: float, num_examples: int,
    generator: torch.Generator,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Rows of icr / noisy icr (module docstring) and their scored targets, both int64 `[N, T]`."""
    N, P = num_examples, seq_len // 2
    content = vocab_size - noise_vocab_size  # keys and values; noise above
    K = content // 2  # keys [0, K), values [K, content)
    keys = torch.randint(K, (N, P), generator=generator)  # [N, P], slot P-1 is replaced by the probe
    table = torch.randint(K, content, (N, K), generator=generator)  # [N, K], each key's value in its row
    is_noise = torch.zeros(N, P, dtype=torch.bool)
    if frac_noise > 0:
        is_noise = torch.rand(N, P, generator=generator) < frac_noise  # [N, P]
        is_noise.scatter_(1, torch.randint(P - 1, (N, 1), generator=generator), False)  # one real context pair
        noise = torch.randint(content, vocab_size, (N, P, 2), generator=generator)  # [N, P, 2]
    is_noise[:, -1] = False  # the probe slot
    slot = torch.arange(P).expand(N, P)  # [N, P]
    in_context = ~is_noise & (slot < P - 1)  # [N, P], real pairs before the probe
    # first[n, k]: the first context slot holding key k (P if none); a key is "seen" in slot i when first < i.
    first = torch.full((N, K), P).scatter_reduce(1, keys, torch.where(in_context, slot, P), "amin")  # [N, K]
    presented = first < P  # [N, K]
    probe = torch.where(presented, torch.rand(N, K, generator=generator), -1.0).argmax(dim=1)  # uniform, [N]
    keys[:, -1] = probe
    values = table.gather(1, keys)  # [N, P]
    seen = (first.gather(1, keys) < slot) & ~is_noise  # [N, P], true at the probe slot by construction
    pairs = torch.stack([keys, values], dim=2)  # [N, P, 2]
    if frac_noise > 0:
        pairs = torch.where(is_noise.unsqueeze(2), noise, pairs)
    scored = torch.full((N, P, 2), IGNORE_INDEX, dtype=torch.int64)
    scored[:, :, 0] = torch.where(seen, values, IGNORE_INDEX)  # the value is predicted from its key's position
    return pairs.reshape(N, seq_len), scored.reshape(N, seq_len)


def in_context_recall(
    config: InContextRecallConfig, num_examples: int, *, seed: int | None = None,
    generator: torch.Generator | None = None, split: Split = "test",
) -> tuple[torch.Tensor, torch.Tensor]:
    """`num_examples` icr rows (module docstring). Exactly one of `seed` and `generator`; global RNG state is
    neither read nor advanced. `split="test"` returns the scored targets (values of repeated keys and the probe),
    `"train"` the next token everywhere (same rows for the same seed). Returns `(inputs, targets)`, int64 `[N, T]`.

        >>> inputs, targets = in_context_recall(InContextRecallConfig(vocab_size=8, seq_len=8), 1, seed=5)
        >>> inputs.tolist(), targets.tolist()
        ([[3, 5, 2, 4, 3, 5, 2, 4]], [[-100, -100, -100, -100, 5, -100, 4, -100]])
    """
    check_int("num_examples", num_examples, 1)
    check_split(split)
    generator = make_generator(seed, generator)
    inputs, scored = _pair_rows(config.vocab_size, config.seq_len, 0, 0.0, num_examples, generator)
    return inputs, (scored if split == "test" else next_token_targets(inputs))


def noisy_in_context_recall(
    config: NoisyInContextRecallConfig, num_examples: int, *, seed: int | None = None,
    generator: torch.Generator | None = None, split: Split = "test",
) -> tuple[torch.Tensor, torch.Tensor]:
    """`num_examples` noisy icr rows (module docstring); arguments and returns as `in_context_recall`.

        >>> config = NoisyInContextRecallConfig(vocab_size=12, seq_len=10, noise_vocab_size=4, frac_noise=0.5)
        >>> inputs, targets = noisy_in_context_recall(config, 1, seed=5)
        >>> inputs.tolist()
        [[3, 4, 2, 5, 3, 4, 11, 8, 2, 5]]
        >>> targets.tolist()
        [[-100, -100, -100, -100, 4, -100, -100, -100, 5, -100]]
    """
    check_int("num_examples", num_examples, 1)
    check_split(split)
    generator = make_generator(seed, generator)
    inputs, scored = _pair_rows(config.vocab_size, config.seq_len, config.noise_vocab_size, config.frac_noise,
                                num_examples, generator)
    return inputs, (scored if split == "test" else next_token_targets(inputs))


# ---------------------------------------------------------------------------------------------- fuzzy icr


@dataclass(frozen=True)
class FuzzyInContextRecallConfig:
    """Fuzzy in-context recall; defaults are mad-lab's baseline (V = 16, T = 128, motifs of up to 3 tokens)."""

    vocab_size: int = 16  # V: pad V-1, keys [0, (V-1)//2), values [(V-1)//2, V-1); mad-lab baseline
    seq_len: int = 128  # T, tokens per row (front-padded); mad-lab baseline
    k_motif_size: int = 3  # tokens of a key: exactly this many at test time, 1..this in training; mad-lab baseline
    v_motif_size: int = 3  # tokens of a value: uniform in 1..this; mad-lab baseline

    def __post_init__(self):
        check_int("k_motif_size", self.k_motif_size, 1)
        check_int("v_motif_size", self.v_motif_size, 1)
        check_int("vocab_size", self.vocab_size, 4)
        if self.num_keys < self.k_motif_size or self.num_values < self.v_motif_size:
            raise ValueError(
                f"vocab_size = {self.vocab_size} gives {self.num_keys} key and {self.num_values} value tokens, "
                f"fewer than k_motif_size = {self.k_motif_size} or v_motif_size = {self.v_motif_size} (motif "
                "tokens are distinct)")
        check_int("seq_len", self.seq_len, 2 * (self.k_motif_size + self.v_motif_size))  # the probe pair twice

    @property
    def num_keys(self) -> int:
        """Key tokens `[0, num_keys)`."""
        return (self.vocab_size - 1) // 2

    @property
    def num_values(self) -> int:
        """Value tokens `[num_keys, V-1)`."""
        return self.vocab_size - 1 - self.num_keys


def _distinct_tokens(count: int, size: int, shape: tuple[int, ...], generator: torch.Generator) -> torch.Tensor:
    """Ordered tuples of `size` distinct ints of `[0, count)`, uniform over those tuples: int64 `[*shape, size]`.
    Any prefix of such a tuple is a uniform shorter tuple, so a motif of s tokens takes the first s."""
    picks = []
    for j in range(size):
        pick = torch.randint(count - j, shape, generator=generator)  # a uniform rank among the count - j untaken
        if picks:
            for taken in torch.stack(picks, dim=-1).sort(dim=-1).values.unbind(-1):  # ascending
                pick = pick + (pick >= taken)  # rank -> int: step over each taken int at or below it
        picks.append(pick)
    return torch.stack(picks, dim=-1)


def _fuzzy_row(config: FuzzyInContextRecallConfig, draws: list, slot: float) -> tuple[list, list]:
    """One fuzzy row (module docstring) from its draws: per pair (key tokens, key size, value tokens, value size),
    the probe's first, and `slot` uniform in [0, 1) for the probe's place in the context. Returns the row's tokens
    and scored targets, lists of length T."""
    T, M = config.seq_len, config.k_motif_size + config.v_motif_size
    (key_tokens, k_size, value_tokens, v_size), *rest = draws
    probe_key = tuple(key_tokens[:k_size])
    values = {probe_key: tuple(value_tokens[:v_size])}  # a key's value is fixed within the row
    p = k_size + v_size
    budget, length, pairs = T - 2 * p, 0, []  # room left once the probe pair is placed twice
    for key_tokens, k_size, value_tokens, v_size in rest:
        if length + M > budget:  # mad-lab's rule: stop while a pair of the largest size could still overflow
            break
        key = tuple(key_tokens[:k_size])
        value = values.setdefault(key, tuple(value_tokens[:v_size]))
        pairs.append((key, value))
        length += len(key) + len(value)
    pairs.insert(int(slot * (len(pairs) + 1)), (probe_key, values[probe_key]))
    pairs.append((probe_key, values[probe_key]))
    tokens, scored, seen = [config.vocab_size - 1] * (T - length - 2 * p), [IGNORE_INDEX] * (T - length - 2 * p), set()
    for key, value in pairs:
        tokens += key + value
        answer = list(value) if key in seen else [IGNORE_INDEX] * len(value)
        scored += [IGNORE_INDEX] * (len(key) - 1) + answer + [IGNORE_INDEX]  # each token predicted one step early
        seen.add(key)
    return tokens, scored


def fuzzy_in_context_recall(
    config: FuzzyInContextRecallConfig, num_examples: int, *, seed: int | None = None,
    generator: torch.Generator | None = None, split: Split = "test",
) -> tuple[torch.Tensor, torch.Tensor]:
    """`num_examples` fuzzy icr rows (module docstring). Exactly one of `seed` and `generator`; global RNG state is
    neither read nor advanced. `split="test"` draws keys of `k_motif_size` tokens and returns the scored targets,
    `"train"` draws keys of 1..k_motif_size tokens and returns the next token everywhere. Returns
    `(inputs, targets)`, int64 `[N, T]`.

        >>> config = FuzzyInContextRecallConfig(vocab_size=9, seq_len=16, k_motif_size=2, v_motif_size=2)
        >>> inputs, targets = fuzzy_in_context_recall(config, 1, seed=34)
        >>> inputs.tolist()
        [[8, 8, 2, 3, 5, 1, 2, 6, 4, 2, 3, 5, 1, 2, 6, 4]]
        >>> targets.tolist()
        [[-100, -100, -100, -100, -100, -100, -100, -100, -100, -100, 5, -100, -100, 6, 4, -100]]
    """
    check_int("num_examples", num_examples, 1)
    check_split(split)
    generator = make_generator(seed, generator)
    N, K = num_examples, config.num_keys
    shape = (N, config.seq_len // 2 + 1)  # the probe, then at most T/2 context pairs (2 tokens at least each)
    key_tokens = _distinct_tokens(K, config.k_motif_size, shape, generator)  # [N, T/2 + 1, k_motif_size]
    value_tokens = K + _distinct_tokens(config.num_values, config.v_motif_size, shape, generator)
    k_size = (torch.full(shape, config.k_motif_size) if split == "test"
              else torch.randint(1, config.k_motif_size + 1, shape, generator=generator))  # [N, T/2 + 1]
    v_size = torch.randint(1, config.v_motif_size + 1, shape, generator=generator)  # [N, T/2 + 1]
    slots = torch.rand(N, dtype=torch.float64, generator=generator).tolist()  # [N]
    draws = zip(key_tokens.tolist(), k_size.tolist(), value_tokens.tolist(), v_size.tolist(), strict=True)
    rows = [_fuzzy_row(config, list(zip(*row, strict=True)), slot) for row, slot in zip(draws, slots, strict=True)]
    inputs = torch.tensor([tokens for tokens, _ in rows], dtype=torch.int64)  # [N, T]
    scored = torch.tensor([targets for _, targets in rows], dtype=torch.int64)  # [N, T]
    return inputs, (scored if split == "test" else next_token_targets(inputs))


# -------------------------------------------------------------------------------------------------- tasks


class _RecallTask(LengthTask):
    """Shared methods: `generate` (scored targets), `generate_train` (next-token targets), `metric`,
    `with_seq_len`. A subclass sets `_generator`, the module function that draws its rows."""

    _generator: ClassVar

    def generate(
        self, num_examples: int, *, seed: int | None = None, generator: torch.Generator | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Test rows with the scored targets: `(inputs, targets)`, int64 `[N, T]`."""
        return type(self)._generator(self.config, num_examples, seed=seed, generator=generator, split="test")

    def generate_train(
        self, num_examples: int, *, seed: int | None = None, generator: torch.Generator | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Training rows with the next token as target everywhere: `(inputs, targets)`, int64 `[N, T]`."""
        return type(self)._generator(self.config, num_examples, seed=seed, generator=generator, split="train")

    def metric(self, logits: torch.Tensor, targets: torch.Tensor) -> dict[str, float]:
        """logits `[N, T, V]`, targets `[N, T]` (scored) -> {"accuracy": over the labelled positions}."""
        return {"accuracy": accuracy(logits, targets)}


@dataclass(frozen=True)
class InContextRecall(_RecallTask):
    """In-context recall (see `in_context_recall`)."""

    name: ClassVar[str] = "icr"
    config_class: ClassVar[type] = InContextRecallConfig
    _generator: ClassVar = in_context_recall
    config: InContextRecallConfig = InContextRecallConfig()


@dataclass(frozen=True)
class NoisyInContextRecall(_RecallTask):
    """Noisy in-context recall (see `noisy_in_context_recall`)."""

    name: ClassVar[str] = "noisy_icr"
    config_class: ClassVar[type] = NoisyInContextRecallConfig
    _generator: ClassVar = noisy_in_context_recall
    config: NoisyInContextRecallConfig = NoisyInContextRecallConfig()


@dataclass(frozen=True)
class FuzzyInContextRecall(_RecallTask):
    """Fuzzy in-context recall (see `fuzzy_in_context_recall`); training rows also differ in key sizes."""

    name: ClassVar[str] = "fuzzy_icr"
    config_class: ClassVar[type] = FuzzyInContextRecallConfig
    _generator: ClassVar = fuzzy_in_context_recall
    config: FuzzyInContextRecallConfig = FuzzyInContextRecallConfig()
