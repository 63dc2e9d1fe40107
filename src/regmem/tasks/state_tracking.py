"""State tracking on formal languages: parity, cycle navigation and modular arithmetic without brackets, labelled at
every position (the answer for each prefix). Recognising formal languages (membership, next-symbol sets: the
"lang_*" tasks, among them the even-parity language "lang_parity") is src/regmem/tasks/formal_languages.py.

Delétang et al., "Neural Networks and the Chomsky Hierarchy" (arXiv:2207.02098, Table 1 and App. A, the regular
tasks "Parity Check", "Cycle Navigation" and "Modular Arithmetic (Simple)"), and Grazzi et al., "Unlocking
State-Tracking in Linear RNNs Through Negative Eigenvalues" (arXiv:2411.12537, Sec. 4 for the theory, Sec. 5 for
the experiments on parity and modular arithmetic).

Why these tasks. Each is a small finite automaton, so the answer is a state carried along the sequence. A linear
recurrence `h_t = A(x_t) h_{t-1} + ...` tracks parity with one negative eigenvalue (`A(1) = -1` flips the sign of
`h`, `A(0) = 1` keeps it), but Grazzi et al. prove (Sec. 4, Theorem 1) that no finite-precision linear RNN whose
transition matrices have only non-negative eigenvalues recognises parity, which rules out Mamba's and DeltaNet's
usual gates in [0, 1]; counting modulo 3 (here 5: cycle navigation) needs non-triangular transition matrices
(Theorem 2), e.g. products of generalised Householder matrices. Modular arithmetic keeps a running sum and an open
product term, each mod 5: a finite automaton over those pairs. All three are the cheapest tests of the
negative-eigenvalue trick (DeltaNet with β in [0, 2]) and of fixed-depth models that fail on longer rows.

Sequence-labelling form. The papers classify the whole string at its end. Here every row has T symbols and the
target at position t is the answer for the prefix `x_0 .. x_t` (as in the S5 word problem,
src/regmem/tasks/word_problem.py): a dense training signal on fixed-length rows, and length generalisation by
`with_seq_len` (train at T, test at 2T, 4T). The last position carries the papers' whole-string label, so the
metric reports `final_accuracy` (position T-1) beside `accuracy` (every labelled position).

Token layouts (answers share the ids of the inputs where they mean the same value):
- parity: inputs {0, 1}; target = number of 1s in the prefix mod 2, classes 0/1 = tokens 0/1. V = 2.
- cycle_navigation: inputs {0, 1, 2} = steps -1, 0, +1 on a 5-cycle starting at 0; target = the prefix's
  position mod 5, classes = tokens 0..4. V = 5 (inputs use 0..2 only).
- modular_arithmetic: numbers 0..4 are tokens 0..4, operators +, -, × are tokens 5, 6, 7 (Delétang et al.'s
  layout); numbers at even positions, operators at odd ones, so T is odd and a row starts and ends with a
  number. The target at a number position t is the value mod 5 of `x_0 .. x_t` with × binding tighter than + and
  -; operator positions are IGNORE_INDEX. V = 8.

Worked examples (IGNORE_INDEX = -100):
- parity: inputs [1, 0, 1, 1] -> targets [1, 1, 0, 1].
- cycle_navigation: inputs [2, 2, 0, 1, 0, 0, 0] (+1 +1 -1 0 -1 -1 -1) -> targets [1, 2, 1, 1, 0, 4, 3].
- modular_arithmetic: inputs [1, 5, 2, 7, 3, 6, 4] ("1 + 2 × 3 - 4") -> targets [1, -100, 3, -100, 2, -100, 3]:
  1, 1 + 2 = 3, 1 + 6 = 7 = 2 (mod 5; left to right would give 9 = 4), 7 - 4 = 3.

Dimension legend: N sequences, T = seq_len, V vocabulary (and classes).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import torch

from regmem.tasks.base import IGNORE_INDEX, LengthTask, accuracy, check_int, make_generator

CYCLE_LENGTH = 5  # states of cycle navigation (Delétang et al.'s default)
MODULUS = 5  # modulus of modular arithmetic (Delétang et al. and Grazzi et al.)
PLUS, MINUS, TIMES = MODULUS, MODULUS + 1, MODULUS + 2  # operator tokens after the numbers 0..MODULUS-1


def _check_rows(inputs: torch.Tensor) -> None:
    if not isinstance(inputs, torch.Tensor) or inputs.ndim != 2 or inputs.dtype != torch.int64:
        raise ValueError("inputs must be an int64 tensor of shape [N, T]")


def _metric(logits: torch.Tensor, targets: torch.Tensor) -> dict[str, float]:
    """{"accuracy": every labelled position, "final_accuracy": position T-1, the whole string's label}."""
    return {"accuracy": accuracy(logits, targets), "final_accuracy": accuracy(logits[:, -1:], targets[:, -1:])}


# ---------------------------------------------------------------------------------------------------------- parity


@dataclass(frozen=True)
class ParityConfig:
    """Parity of bit strings of length seq_len (default T = 64)."""

    seq_len: int = 64  # T, bits per row (each position labelled)

    def __post_init__(self):
        check_int("seq_len", self.seq_len, 1)

    @property
    def vocab_size(self) -> int:
        return 2  # bits, and the classes 0 / 1


def parity_targets(inputs: torch.Tensor) -> torch.Tensor:
    """Prefix parities: int64 `[N, T]` bits -> int64 `[N, T]`, `y_t = (x_0 + ... + x_t) mod 2`.

        >>> parity_targets(torch.tensor([[1, 0, 1, 1]])).tolist()
        [[1, 1, 0, 1]]
    """
    _check_rows(inputs)
    return inputs.cumsum(dim=1) % 2


def parity(
    config: ParityConfig, num_examples: int, *, seed: int | None = None, generator: torch.Generator | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """`num_examples` rows of uniform bits and their prefix parities. Exactly one of `seed` and `generator`; global
    RNG state is neither read nor advanced. Returns `(inputs, targets)`, both int64 `[N, T]`, all labelled."""
    check_int("num_examples", num_examples, 1)
    generator = make_generator(seed, generator)
    inputs = torch.randint(2, (num_examples, config.seq_len), generator=generator)  # [N, T]
    return inputs, parity_targets(inputs)


@dataclass(frozen=True)
class Parity(LengthTask):
    """Parity of the prefix at every position (see `parity`); metrics: accuracy and final_accuracy."""

    name: ClassVar[str] = "parity"
    config_class: ClassVar[type] = ParityConfig
    config: ParityConfig = ParityConfig()

    def generate(
        self, num_examples: int, *, seed: int | None = None, generator: torch.Generator | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Returns `(inputs, targets)`, both int64 `[N, T]`; see `parity`."""
        return parity(self.config, num_examples, seed=seed, generator=generator)

    def metric(self, logits: torch.Tensor, targets: torch.Tensor) -> dict[str, float]:
        """logits `[N, T, V]`, targets `[N, T]` -> {"accuracy", "final_accuracy" (position T-1)}."""
        return _metric(logits, targets)


# ------------------------------------------------------------------------------------------------ cycle navigation


@dataclass(frozen=True)
class CycleNavigationConfig:
    """Walks on a 5-cycle of seq_len steps (default T = 64)."""

    seq_len: int = 64  # T, steps per row (each position labelled)

    def __post_init__(self):
        check_int("seq_len", self.seq_len, 1)

    @property
    def vocab_size(self) -> int:
        return CYCLE_LENGTH  # the answers 0..4; the inputs use 0..2 of them


def cycle_navigation_targets(inputs: torch.Tensor) -> torch.Tensor:
    """Prefix positions on the cycle: int64 `[N, T]` actions in {0, 1, 2} (= -1, 0, +1) -> int64 `[N, T]`,
    `y_t = sum_{s <= t} (x_s - 1) mod 5`, starting at 0.

        >>> cycle_navigation_targets(torch.tensor([[2, 2, 0, 1, 0, 0, 0]])).tolist()
        [[1, 2, 1, 1, 0, 4, 3]]
    """
    _check_rows(inputs)
    return (inputs - 1).cumsum(dim=1) % CYCLE_LENGTH  # torch's % takes the sign of the divisor: 0..4


def cycle_navigation(
    config: CycleNavigationConfig, num_examples: int, *, seed: int | None = None,
    generator: torch.Generator | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """`num_examples` rows of uniform actions in {0, 1, 2} and their prefix positions on the 5-cycle. Exactly one of
    `seed` and `generator`; global RNG state is untouched. Returns `(inputs, targets)`, int64 `[N, T]`."""
    check_int("num_examples", num_examples, 1)
    generator = make_generator(seed, generator)
    inputs = torch.randint(3, (num_examples, config.seq_len), generator=generator)  # [N, T]
    return inputs, cycle_navigation_targets(inputs)


@dataclass(frozen=True)
class CycleNavigation(LengthTask):
    """Position on a 5-cycle after every prefix (see `cycle_navigation`); metrics: accuracy and final_accuracy."""

    name: ClassVar[str] = "cycle_navigation"
    config_class: ClassVar[type] = CycleNavigationConfig
    config: CycleNavigationConfig = CycleNavigationConfig()

    def generate(
        self, num_examples: int, *, seed: int | None = None, generator: torch.Generator | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Returns `(inputs, targets)`, both int64 `[N, T]`; see `cycle_navigation`."""
        return cycle_navigation(self.config, num_examples, seed=seed, generator=generator)

    def metric(self, logits: torch.Tensor, targets: torch.Tensor) -> dict[str, float]:
        """logits `[N, T, V]`, targets `[N, T]` -> {"accuracy", "final_accuracy" (position T-1)}."""
        return _metric(logits, targets)


# ---------------------------------------------------------------------------------------------- modular arithmetic


@dataclass(frozen=True)
class ModularArithmeticConfig:
    """Expressions mod 5 without brackets, seq_len tokens (odd: number, operator, ..., number; default T = 65)."""

    seq_len: int = 65  # T, tokens per row: (T + 1) / 2 numbers, each labelled, and (T - 1) / 2 operators

    def __post_init__(self):
        check_int("seq_len", self.seq_len, 1)
        if self.seq_len % 2 == 0:
            raise ValueError(f"seq_len must be odd (a row starts and ends with a number), got {self.seq_len}")

    @property
    def vocab_size(self) -> int:
        return MODULUS + 3  # numbers 0..4, then +, -, ×


def modular_arithmetic_targets(inputs: torch.Tensor) -> torch.Tensor:
    """Prefix values: int64 `[N, T]` (T odd; numbers 0..4 at even positions, operators PLUS, MINUS, TIMES at odd
    ones) -> int64 `[N, T]`, the value mod 5 of `x_0 .. x_t` (× before + and -) at even t, IGNORE_INDEX at odd t.

        >>> modular_arithmetic_targets(torch.tensor([[1, PLUS, 2, TIMES, 3, MINUS, 4]])).tolist()
        [[1, -100, 3, -100, 2, -100, 3]]
    """
    _check_rows(inputs)
    if inputs.shape[1] % 2 == 0:
        raise ValueError(f"inputs must have an odd length T (number, operator, ..., number), got {inputs.shape[1]}")
    numbers, operators = inputs[:, 0::2], inputs[:, 1::2]  # [N, (T+1)/2], [N, (T-1)/2]
    # The value of a prefix is total + term: total sums the finished additive terms, term is the signed product
    # still open (× extends it; + or - closes it and opens the next). Everything is kept mod 5, a ring map.
    total = torch.zeros_like(numbers[:, 0])  # [N]
    term = numbers[:, 0] % MODULUS  # [N]
    values = torch.empty_like(numbers)  # [N, (T+1)/2]
    values[:, 0] = term
    for j in range(1, numbers.shape[1]):  # one step per number: the value of a prefix is sequential by nature
        op, x = operators[:, j - 1], numbers[:, j]  # [N], [N]
        times = op == TIMES
        total = torch.where(times, total, (total + term) % MODULUS)
        term = torch.where(times, term * x, torch.where(op == PLUS, x, -x)) % MODULUS
        values[:, j] = (total + term) % MODULUS
    targets = torch.full_like(inputs, IGNORE_INDEX)  # [N, T]
    targets[:, 0::2] = values
    return targets


def modular_arithmetic(
    config: ModularArithmeticConfig, num_examples: int, *, seed: int | None = None,
    generator: torch.Generator | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """`num_examples` rows alternating uniform numbers 0..4 and uniform operators +, -, × (tokens 5, 6, 7), and the
    prefix values mod 5 at the number positions. Exactly one of `seed` and `generator`; global RNG state is
    untouched. Returns `(inputs, targets)`, int64 `[N, T]`, IGNORE_INDEX at operator positions."""
    check_int("num_examples", num_examples, 1)
    generator = make_generator(seed, generator)
    T = config.seq_len
    numbers = torch.randint(MODULUS, (num_examples, (T + 1) // 2), generator=generator)  # [N, (T+1)/2]
    operators = PLUS + torch.randint(3, (num_examples, (T - 1) // 2), generator=generator)  # [N, (T-1)/2]
    inputs = torch.empty(num_examples, T, dtype=torch.int64)  # [N, T]
    inputs[:, 0::2] = numbers
    inputs[:, 1::2] = operators
    return inputs, modular_arithmetic_targets(inputs)


@dataclass(frozen=True)
class ModularArithmetic(LengthTask):
    """Value mod 5 of every number-ending prefix (see `modular_arithmetic`); metrics: accuracy and final_accuracy."""

    name: ClassVar[str] = "modular_arithmetic"
    config_class: ClassVar[type] = ModularArithmeticConfig
    config: ModularArithmeticConfig = ModularArithmeticConfig()

    def generate(
        self, num_examples: int, *, seed: int | None = None, generator: torch.Generator | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Returns `(inputs, targets)`, both int64 `[N, T]`; see `modular_arithmetic`."""
        return modular_arithmetic(self.config, num_examples, seed=seed, generator=generator)

    def metric(self, logits: torch.Tensor, targets: torch.Tensor) -> dict[str, float]:
        """logits `[N, T, V]`, targets `[N, T]` -> {"accuracy": number positions, "final_accuracy": position T-1,
        the whole expression's value}."""
        return _metric(logits, targets)


# Registry entries for `regmem.tasks.TASKS`: name -> task class.
STATE_TRACKING_TASKS = {task.name: task for task in (Parity, CycleNavigation, ModularArithmetic)}
