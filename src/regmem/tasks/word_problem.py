"""The word problem of the symmetric group S_n: state tracking by composing permutations (S5 for n = 5).

Merrill, Petty & Sabharwal, "The Illusion of State in State-Space Models" (arXiv:2404.08819, Sec. 4 and the
`jopetty/word-problem` generator): a sequence is T group elements drawn uniformly, and the target at every
position is the product of the prefix so far. For S5 (120 elements) no constant-depth circuit of the TC^0 class
tracks that product, so a fixed-depth Transformer or diagonal SSM cannot solve it at every length, while a
recurrence with non-diagonal (e.g. Householder) transitions can — DeltaNet with negative eigenvalues,
DeltaProduct (arXiv:2502.10297). Training at one length and testing longer (`with_seq_len`) shows which.

Elements and tokens: the n! permutations of (0, ..., n-1) in lexicographic order, token i = the i-th one, so
token 0 is the identity. Composition: `compose(p, q)[i] = p[q[i]]` (q acts first). The target at position t is
`y_t = x_0 ∘ x_1 ∘ ... ∘ x_t` (with the convention above, `y_t = compose(y_{t-1}, x_t)`, `y_{-1}` = identity):
a sequence-labelling task, every position labelled.

Dimension legend: N sequences, T = seq_len, V = n! (vocabulary and classes).

Worked example, S3 (tokens: 0 = (0,1,2), 1 = (0,2,1), 2 = (1,0,2), 3 = (1,2,0), 4 = (2,0,1), 5 = (2,1,0)):
inputs [1, 2] give targets [1, 4], since compose((0,2,1), (1,0,2)) = (2,0,1) = token 4.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass
from typing import ClassVar

import torch

from regmem.tasks.base import LengthTask, accuracy, check_int, make_generator

MAX_DEGREE = 6  # S6 has 720 elements; a larger vocabulary is not a laptop task


@dataclass(frozen=True)
class WordProblemConfig:
    """One word-problem setting: the group S_degree and the sequence length (defaults: S5, T = 64)."""

    degree: int = 5  # n of S_n; vocabulary n!
    seq_len: int = 64  # T, elements per sequence (each position labelled)

    def __post_init__(self):
        check_int("degree", self.degree, 2)
        if self.degree > MAX_DEGREE:
            raise ValueError(f"degree must be <= {MAX_DEGREE} (vocabulary n!), got {self.degree}")
        check_int("seq_len", self.seq_len, 1)

    @property
    def vocab_size(self) -> int:
        return math.factorial(self.degree)


def permutations(degree: int) -> list[tuple[int, ...]]:
    """The elements of S_degree in lexicographic order: token i is `permutations(degree)[i]` (0 = identity)."""
    return list(itertools.permutations(range(degree)))


def multiplication_table(degree: int) -> torch.Tensor:
    """int64 `[V, V]`: `table[a, b]` = the token of `compose(perm[a], perm[b])`, `compose(p, q)[i] = p[q[i]]`."""
    perms = torch.tensor(permutations(degree), dtype=torch.int64)  # [V, n]
    V = len(perms)
    composed = torch.gather(perms.unsqueeze(1).expand(-1, V, -1), 2,
                            perms.unsqueeze(0).expand(V, -1, -1))  # [V(a), V(b), n], p_a[p_b[i]]
    # Read as base-n numbers, permutations in lexicographic order are ascending: a code's rank is its token.
    place = degree ** torch.arange(degree - 1, -1, -1)  # [n]
    return torch.searchsorted(perms @ place, composed @ place)  # [V, V]


def word_problem(
    config: WordProblemConfig, num_examples: int, *, seed: int | None = None, generator: torch.Generator | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """`num_examples` sequences of uniform S_n elements and their prefix products (module docstring). Exactly one
    of `seed` and `generator`; global RNG state is neither read nor advanced. Returns `(inputs, targets)`, both
    int64 `[N, T]`, every target labelled.

        >>> inputs, targets = word_problem(WordProblemConfig(degree=3, seq_len=4), 1, seed=0)
        >>> table = multiplication_table(3)
        >>> bool(targets[0, 1] == table[targets[0, 0], inputs[0, 1]])
        True
    """
    check_int("num_examples", num_examples, 1)
    generator = make_generator(seed, generator)
    table = multiplication_table(config.degree)  # [V, V]
    inputs = torch.randint(config.vocab_size, (num_examples, config.seq_len), generator=generator)  # [N, T]
    targets = torch.empty_like(inputs)
    product = torch.zeros(num_examples, dtype=torch.int64)  # [N], the identity
    for t in range(config.seq_len):  # T steps over the batch: prefix products are sequential by nature
        product = table[product, inputs[:, t]]
        targets[:, t] = product
    return inputs, targets


@dataclass(frozen=True)
class WordProblem(LengthTask):
    """The S_n word problem (see `word_problem`); metrics: accuracy over every position, and at the last one."""

    name: ClassVar[str] = "s5"
    config_class: ClassVar[type] = WordProblemConfig
    config: WordProblemConfig = WordProblemConfig()

    def generate(
        self, num_examples: int, *, seed: int | None = None, generator: torch.Generator | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Returns `(inputs, targets)`, both int64 `[N, T]`; see `word_problem`."""
        return word_problem(self.config, num_examples, seed=seed, generator=generator)

    def metric(self, logits: torch.Tensor, targets: torch.Tensor) -> dict[str, float]:
        """logits `[N, T, V]`, targets `[N, T]` -> {"accuracy": every position, "final_accuracy": position T-1,
        the whole word's product}."""
        return {"accuracy": accuracy(logits, targets), "final_accuracy": accuracy(logits[:, -1:], targets[:, -1:])}
