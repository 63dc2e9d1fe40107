"""Swap tracking: follow a permutation of n elements under random transpositions (the S5 swap task).

Zhong, Xu, Ao & Shi, "Understanding Transformer from the Perspective of Associative Memory" (arXiv:2505.19488),
Sec. 3.2, Fig. 3 and the data generator of its Listing 2. Positions 0, ..., n-1 start out holding elements
0, ..., n-1 (the identity). Each input token is one transposition (i, j), i < j, of two positions, and after each
swap the target is the element now at position 0, so no query token is needed: a sequence-labelling task with a
loss at every position. The transpositions are numbered in lexicographic order,
`[(i, j) for i in range(n) for j in range(i + 1, n)]`, and drawn uniformly with replacement. With n = 5 (the
paper's default, T = 16 swaps) there are C(5, 2) = 10 input tokens and 5 classes; chance is about 1/5 on long
sequences. One DeltaFormer layer can track the swaps at any length (the paper's Theorem 1: a swap token writes
the key difference k_i - k_j, an exchange of two stored values); in Fig. 4 a one-layer softmax Transformer falls
short.

Vocabulary: inputs lie in `[0, C(n, 2))` and targets in `[0, n)`; both share one vocabulary of
`max(C(n, 2), n)` ids, as Listing 2 does (its embedding and unembedding both have 10 rows for n = 5).

`DoublingCurriculum` is the paper's length curriculum: train at T and double T once accuracy passes a threshold.

Dimension legend: N sequences, T = seq_len (swaps), n = num_elements, C = C(n, 2) input tokens.

Worked example, n = 5 (tokens: 0 = (0,1), 1 = (0,2), 2 = (0,3), 3 = (0,4), 4 = (1,2), 5 = (1,3), 6 = (1,4),
7 = (2,3), 8 = (2,4), 9 = (3,4)): inputs [0, 4, 9, 1] move the state (0,1,2,3,4) to (1,0,2,3,4), (1,2,0,3,4),
(1,2,0,4,3) and (0,2,1,4,3), so the targets (the element at position 0) are [1, 1, 1, 0].
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar

import torch

from regmem.tasks.base import LengthTask, accuracy, check_int, make_generator

MAX_ELEMENTS = 128  # the smallest n of the paper's Fig. 5 stress test; C(128, 2) = 8128 input tokens


@dataclass(frozen=True)
class SwapTrackingConfig:
    """One swap-tracking setting; the defaults are Listing 2's (n = 5 elements, T = 16 swaps)."""

    num_elements: int = 5  # n, positions and elements; C(n, 2) swap tokens, n classes
    seq_len: int = 16  # T, swaps per sequence (every position labelled)

    def __post_init__(self):
        check_int("num_elements", self.num_elements, 2)
        if self.num_elements > MAX_ELEMENTS:
            raise ValueError(f"num_elements must be <= {MAX_ELEMENTS}, got {self.num_elements}")
        check_int("seq_len", self.seq_len, 1)

    @property
    def num_swaps(self) -> int:
        """C = C(n, 2), the input tokens (one per transposition)."""
        return math.comb(self.num_elements, 2)

    @property
    def num_classes(self) -> int:
        """n, the target classes (elements)."""
        return self.num_elements

    @property
    def vocab_size(self) -> int:
        """max(C, n): inputs and targets share one vocabulary."""
        return max(self.num_swaps, self.num_classes)


def swap_pairs(num_elements: int) -> list[tuple[int, int]]:
    """The transpositions (i, j), i < j, in lexicographic order: token c swaps positions `swap_pairs(n)[c]`."""
    check_int("num_elements", num_elements, 2)
    return [(i, j) for i in range(num_elements) for j in range(i + 1, num_elements)]


def swap_states(inputs: torch.Tensor, num_elements: int) -> torch.Tensor:
    """The arrangement after every swap: `states[b, t, p]` is the element at position p once swaps
    `inputs[b, :t+1]` have been applied to the identity. inputs: int64 `[N, T]` in `[0, C)`; returns int64
    `[N, T, n]`. The targets of the task are `states[..., 0]`."""
    check_int("num_elements", num_elements, 2)
    num_swaps = math.comb(num_elements, 2)
    if inputs.ndim != 2 or inputs.dtype != torch.int64:
        raise ValueError(f"inputs must be int64 of shape [N, T], got {inputs.dtype} of shape {list(inputs.shape)}")
    if inputs.numel() and (int(inputs.min()) < 0 or int(inputs.max()) >= num_swaps):
        raise ValueError(f"inputs must lie in [0, C(num_elements, 2)) = [0, {num_swaps})")
    pairs = torch.tensor(swap_pairs(num_elements), dtype=torch.int64)  # [C, 2]
    N, T = inputs.shape
    state = torch.arange(num_elements).repeat(N, 1)  # [N, n], the identity
    states = torch.empty(N, T, num_elements, dtype=torch.int64)
    for t in range(T):  # T steps over the batch: a swap acts on the arrangement the earlier swaps left
        positions = pairs[inputs[:, t]]  # [N, 2], (i, j) per row
        swapped = state.gather(1, positions.flip(1))  # [N, 2], (state[j], state[i])
        state = state.scatter(1, positions, swapped)
        states[:, t] = state
    return states


def swap_tracking(
    config: SwapTrackingConfig, num_examples: int, *, seed: int | None = None,
    generator: torch.Generator | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """`num_examples` sequences of T uniform swaps and the element at position 0 after each (Listing 2). Exactly
    one of `seed` and `generator`; global RNG state is neither read nor advanced. Returns `(inputs, targets)`,
    both int64 `[N, T]`: inputs in `[0, C)`, targets in `[0, n)`, every position labelled.

        >>> inputs, targets = swap_tracking(SwapTrackingConfig(seq_len=6), 1, seed=0)
        >>> inputs.tolist(), targets.tolist()
        ([[4, 9, 3, 0, 3, 9]], [[0, 0, 3, 2, 0, 0]])
    """
    check_int("num_examples", num_examples, 1)
    generator = make_generator(seed, generator)
    inputs = torch.randint(config.num_swaps, (num_examples, config.seq_len), generator=generator)  # [N, T]
    return inputs, swap_states(inputs, config.num_elements)[..., 0]


@dataclass(frozen=True)
class SwapTracking(LengthTask):
    """The swap-tracking task (see `swap_tracking`); metrics: accuracy over every position (the paper's token
    accuracy), and at the last one."""

    name: ClassVar[str] = "swap"
    config_class: ClassVar[type] = SwapTrackingConfig
    config: SwapTrackingConfig = SwapTrackingConfig()

    def generate(
        self, num_examples: int, *, seed: int | None = None, generator: torch.Generator | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Returns `(inputs, targets)`, both int64 `[N, T]`; see `swap_tracking`."""
        return swap_tracking(self.config, num_examples, seed=seed, generator=generator)

    def metric(self, logits: torch.Tensor, targets: torch.Tensor) -> dict[str, float]:
        """logits `[N, T, V]`, targets `[N, T]` -> {"accuracy": every position, "final_accuracy": position T-1}."""
        return {"accuracy": accuracy(logits, targets), "final_accuracy": accuracy(logits[:, -1:], targets[:, -1:])}


class DoublingCurriculum:
    """The paper's length curriculum (Sec. 3.2): train at `start` swaps and double the length whenever an accuracy
    passes `threshold`, up to `max_len`.

    Listing 2 checks the last batch's accuracy at the end of every epoch (one batch), doubles when it is strictly
    above 0.999, and never stops: `DoublingCurriculum(start=16, threshold=0.999, max_len=None)`. Fig. 6's caption
    ("32 to 256") doubles when accuracy reaches 0.99 and stops at 256:
    `DoublingCurriculum(start=32, threshold=0.99, max_len=256)`. The comparison is strict (`>`) as in the listing;
    a doubling that would pass `max_len` lands on `max_len`.

        >>> curriculum = DoublingCurriculum(start=32, threshold=0.99, max_len=256)
        >>> [curriculum.update(a) for a in (0.5, 0.995, 0.999, 0.999, 1.0)], curriculum.seq_len
        ([None, 64, 128, 256, None], 256)
    """

    def __init__(self, start: int = 16, threshold: float = 0.999, max_len: int | None = None):
        check_int("start", start, 1)
        if isinstance(threshold, bool) or not isinstance(threshold, int | float) or not 0 <= threshold < 1:
            raise ValueError(f"threshold must be a float in [0, 1), got {threshold!r}")
        if max_len is not None:
            check_int("max_len", max_len, start)
        self.start, self.threshold, self.max_len = start, float(threshold), max_len
        self.seq_len = start  # the current training length

    def update(self, accuracy: float) -> int | None:
        """Reports one accuracy; returns the new (doubled, capped) length if it passed the threshold and the
        length may still grow, else None (the length stays `seq_len`)."""
        if isinstance(accuracy, bool) or not isinstance(accuracy, int | float) or not 0 <= accuracy <= 1:
            raise ValueError(f"accuracy must be a float in [0, 1], got {accuracy!r}")
        if accuracy <= self.threshold or self.seq_len == self.max_len:
            return None
        doubled = 2 * self.seq_len
        self.seq_len = doubled if self.max_len is None else min(doubled, self.max_len)
        return self.seq_len

    def __repr__(self) -> str:
        return (f"DoublingCurriculum(start={self.start}, threshold={self.threshold}, max_len={self.max_len}, "
                f"seq_len={self.seq_len})")
