"""Byte-level language modelling of real English text, reported in bits per byte.

Every synthetic task in this package isolates one ability (recall, state tracking); this one checks that a mixer
also models real text. A model reads raw UTF-8 bytes (vocabulary 256, no tokenizer) and predicts the next byte at
every position; the score is the mean cross-entropy in bits per byte, the convention of Karpathy-style character
models and of the enwik8 benchmark (a uniform guess scores 8.0, a perfect one 0).

The corpus is CPython's own documentation, `pydoc_data.topics.topics`: the ~79 topics that `help()` shows
("assert", "assignment", ..., "yield"), English prose with grammar rules and code examples, shipped with every
CPython installation under the Python Software Foundation License 2.0, so the task needs no download. It is built
deterministically: topics in sorted key order, UTF-8 encoded, joined with b"\\n\\n".

The splits are byte ranges: training the first bytes, then validation, then test, each cut at the start of the
topic nearest to `1 - validation_fraction - test_fraction` and `1 - test_fraction` of the corpus, so no topic
straddles two splits. With Python 3.11.7 and the defaults (0.04, 0.06) the corpus is 466,273 bytes: training
415,882 bytes (70 topics, "assert" to "typesfunctions"), validation 15,092 bytes (3 topics, "typesmapping" to
"typesmodules"), test 35,299 bytes (6 topics, "typesseq" to "yield"). The topics are regenerated with each CPython
release, so the sizes move slightly with the Python version.

An example is a window of `seq_len + 1` consecutive bytes at a uniform random offset of one split: `inputs` are its
first `seq_len` bytes and `targets` its last `seq_len` (inputs shifted by one), every position labelled.
`generate_train` draws windows from the training split, `generate` from the validation split (what chooses the
learning rate and stops early), `generate_test` from the test split (what is reported; tasks/base.py, `split_data`).

Dimension legend: N sequences, T = seq_len, V = 256 (bytes).

Worked example, seq_len = 4: the window b"def f" (bytes 100 101 102 32 102) gives inputs [100, 101, 102, 32]
("def ") and targets [101, 102, 32, 102] ("ef f").

    >>> inputs, targets = shift_windows(encode("def f").unsqueeze(0))
    >>> inputs.tolist(), targets.tolist()
    ([[100, 101, 102, 32]], [[101, 102, 32, 102]])
    >>> decode(encode("naïve"))
    'naïve'
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import ClassVar

import numpy as np
import torch
import torch.nn.functional as F

from regmem.tasks.base import IGNORE_INDEX, ConfigTask, accuracy, check_int, make_generator
from regmem.tasks.corpus import Corpus, check_fractions, load_corpus, topics

VOCAB_SIZE = 256  # one token per byte value
SEPARATOR = b"\n\n"  # between topics, as between paragraphs
METRIC_CHUNK_ROWS = 64  # sequences per float64 cross-entropy chunk: [64, T, 256] at a time bounds the metric's memory


@functools.cache
def corpus_bytes() -> bytes:
    """The corpus: every topic in sorted key order, UTF-8 encoded, joined with `SEPARATOR` (cached)."""
    documents = topics()
    return SEPARATOR.join(documents[name].encode("utf-8") for name in sorted(documents))


def _topic_starts() -> list[int]:
    """The byte offset of every topic's start but the first (after the separator that ends the one before)."""
    documents, starts, offset = topics(), [], 0
    for name in sorted(documents)[:-1]:
        offset += len(documents[name].encode("utf-8")) + len(SEPARATOR)
        starts.append(offset)
    return starts


def _nearest_start(target: float) -> int:
    return min(_topic_starts(), key=lambda start: (abs(start - target), start))  # the earlier start wins a tie


@functools.cache
def split_boundaries(validation_fraction: float = 0.04, test_fraction: float = 0.06) -> tuple[int, int]:
    """`(v, t)`: the byte offsets where the validation and the test split start, the topic starts nearest to
    `(1 - validation_fraction - test_fraction)` and `(1 - test_fraction)` of the corpus (the earlier wins a tie).
    ValueError when both land on one topic start (a split would be empty)."""
    check_fractions(validation_fraction, test_fraction)
    size = len(corpus_bytes())
    valid_start = _nearest_start((1 - validation_fraction - test_fraction) * size)
    test_start = _nearest_start((1 - test_fraction) * size)
    if test_start <= valid_start:
        raise ValueError(f"validation_fraction {validation_fraction} and test_fraction {test_fraction} cut the corpus "
                         f"at one topic start ({valid_start}): the validation split would be empty")
    return valid_start, test_start


def split_corpus(validation_fraction: float = 0.04, test_fraction: float = 0.06
                 ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """`(train, validation, test)`, uint8 1-D tensors of corpus bytes `[0, v)`, `[v, t)` and `[t, len)` for
    `(v, t) = split_boundaries(...)`: disjoint, and together the whole corpus. Fresh tensors on every call."""
    valid_start, test_start = split_boundaries(validation_fraction, test_fraction)
    data = torch.frombuffer(bytearray(corpus_bytes()), dtype=torch.uint8)  # a copy: the caller may write to it
    return data[:valid_start], data[valid_start:test_start], data[test_start:]


def encode(text: str) -> torch.Tensor:
    """The UTF-8 bytes of `text` as int64 token ids `[len(bytes)]`."""
    if not isinstance(text, str):
        raise ValueError(f"text must be a str, got {type(text).__name__}")
    return torch.tensor(list(text.encode("utf-8")), dtype=torch.int64)


def decode(ids) -> str:
    """Token ids (a 1-D tensor or a list of ints in [0, 256)) as text; invalid UTF-8 becomes U+FFFD."""
    values = ids.tolist() if isinstance(ids, torch.Tensor) else list(ids)
    if any(isinstance(v, list) for v in values):
        raise ValueError(f"ids must be one-dimensional, got shape {list(torch.as_tensor(ids).shape)}")
    if any(not 0 <= v < VOCAB_SIZE for v in values):
        raise ValueError(f"ids must lie in [0, {VOCAB_SIZE}), got values from {min(values)} to {max(values)}")
    return bytes(values).decode("utf-8", errors="replace")


def shift_windows(windows: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """windows `[N, T + 1]` -> `(inputs, targets)`, int64 `[N, T]`: inputs = windows[:, :-1] and
    targets = windows[:, 1:], so the target at t is the byte after input t."""
    if windows.ndim != 2 or windows.shape[1] < 2:
        raise ValueError(f"windows must have shape [N, T + 1] with T >= 1, got shape {list(windows.shape)}")
    windows = windows.long()
    return windows[:, :-1], windows[:, 1:]


def sample_windows(
    data: torch.Tensor, num_examples: int, seq_len: int, *, seed: int | None = None,
    generator: torch.Generator | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """`num_examples` windows of `seq_len + 1` bytes of `data` (1-D) at uniform random offsets, shifted into
    `(inputs, targets)`, int64 `[N, T]`. Exactly one of `seed` and `generator`; global RNG state is untouched."""
    check_int("num_examples", num_examples, 1)
    check_int("seq_len", seq_len, 1)
    size = data.size if isinstance(data, np.ndarray) else data.numel()
    if seq_len + 1 > size:
        raise ValueError(f"seq_len + 1 = {seq_len + 1} exceeds the {size} tokens of the split")
    generator = make_generator(seed, generator)
    starts = torch.randint(size - seq_len, (num_examples,), generator=generator)  # [N], last start fits
    positions = starts.unsqueeze(1) + torch.arange(seq_len + 1)  # [N, T + 1]
    if isinstance(data, np.ndarray):  # a user's corpus, maybe memory-mapped: only the windows' pages are read
        return shift_windows(torch.from_numpy(np.asarray(data[positions.numpy()], dtype=np.int64)))
    return shift_windows(data[positions])


@dataclass(frozen=True)
class TextConfig:
    """The text task: window length and the shares of the corpus held out (defaults: T = 128, 4 % validation and
    6 % test, after the 90 % of training); `data`, `tokenizer`, `text_field` and `eot` name a user's corpus
    (tasks/corpus.py; None: the built-in corpus in bytes)."""

    seq_len: int = 128  # T, tokens per input sequence (each position labelled)
    validation_fraction: float = 0.04  # share of the corpus that chooses the lr, cut at a document start
    test_fraction: float = 0.06  # share of the corpus that is reported, the last one, cut at a document start
    data: str | None = None  # a text file, folder, glob, .jsonl, .bin/.npy of token ids, or `regmem prepare`'s dir
    tokenizer: str | None = None  # None or "bytes": UTF-8 bytes; else a BPE tokenizer.json (`regmem tokenizer`)
    text_field: str | None = None  # a .jsonl's field of text (None: "text")
    eot: int | None = None  # a token file's end-of-document id (nanoGPT's GPT-2 files: 50256); None: no documents

    def __post_init__(self):
        check_int("seq_len", self.seq_len, 1)
        check_fractions(self.validation_fraction, self.test_fraction)
        for name in ("data", "tokenizer", "text_field"):
            if getattr(self, name) is not None and not isinstance(getattr(self, name), str):
                raise ValueError(f"{name} must be a str, got {getattr(self, name)!r}")
        if self.eot is not None:
            check_int("eot", self.eot, 0)
        if not self.custom:
            split_boundaries(self.validation_fraction, self.test_fraction)  # both splits non-empty
            return
        corpus = self.corpus()  # a bad corpus is refused here, naming data or tokenizer
        for name in ("train", "valid", "test"):
            if self.seq_len + 1 > len(corpus.split(name)):
                raise ValueError(f"seq_len + 1 = {self.seq_len + 1} exceeds the {len(corpus.split(name))} tokens of "
                                 f"the corpus's {name} split")

    @property
    def custom(self) -> bool:
        """Whether the corpus is a user's (or the built-in one through a BPE), not the built-in bytes."""
        return self.data is not None or self.tokenizer not in (None, "bytes")

    def corpus(self) -> Corpus:
        return load_corpus(self.data, self.tokenizer or "bytes", self.validation_fraction, self.test_fraction,
                           self.text_field or "text", self.eot)

    @property
    def vocab_size(self) -> int:
        return self.corpus().vocab_size if self.custom else VOCAB_SIZE

    def tokenizer_file(self) -> str | None:
        """The BPE tokenizer file a model of this corpus needs to read and write text (None: bytes or token ids)."""
        tokenizer = self.corpus().tokenizer if self.custom else "bytes"
        return None if tokenizer in ("bytes", "token ids") else tokenizer


@dataclass(frozen=True)
class Text(ConfigTask):
    """Next-byte prediction on CPython's documentation (module docstring), or next-token prediction on a user's
    corpus (`data`, tasks/corpus.py); metrics: bits per byte and accuracy."""

    name: ClassVar[str] = "text"
    config_class: ClassVar[type] = TextConfig
    score_metric: ClassVar[str] = "bits_per_byte"  # what leaderboards rank by (lower is better)
    config: TextConfig = TextConfig()

    def generate(
        self, num_examples: int, *, seed: int | None = None, generator: torch.Generator | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Windows of the validation split: `(inputs, targets)`, int64 `[N, T]`."""
        return self._windows(1, num_examples, seed, generator)

    def generate_train(
        self, num_examples: int, *, seed: int | None = None, generator: torch.Generator | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Windows of the training split: `(inputs, targets)`, int64 `[N, T]`."""
        return self._windows(0, num_examples, seed, generator)

    def generate_test(
        self, num_examples: int, *, seed: int | None = None, generator: torch.Generator | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Windows of the test split, the reported data: `(inputs, targets)`, int64 `[N, T]`."""
        return self._windows(2, num_examples, seed, generator)

    def _windows(self, split: int, num_examples, seed, generator):
        if self.config.custom:
            data = self.config.corpus().split(("train", "valid", "test")[split])
        else:
            data = split_corpus(self.config.validation_fraction, self.config.test_fraction)[split]
        return sample_windows(data, num_examples, self.config.seq_len, seed=seed, generator=generator)

    def metric(self, logits: torch.Tensor, targets: torch.Tensor) -> dict[str, float]:
        """logits `[N, T, V]`, targets `[N, T]` -> {"bits_per_byte", "accuracy"} (see `bits_per_byte`); a corpus
        of other tokens adds "bits_per_token", and its bits per byte are those over the corpus's mean bytes per
        token (a file of token ids, whose text is unknown, reports bits per token there)."""
        bits = bits_per_byte(logits, targets)
        metrics = {"bits_per_byte": bits, "accuracy": accuracy(logits, targets)}
        if self.config.custom and self.config.corpus().tokenizer != "bytes":
            per_byte = self.config.corpus().bytes_per_token
            metrics = {**metrics, "bits_per_token": bits,
                       "bits_per_byte": bits / per_byte if math.isfinite(per_byte) else bits}
        return metrics


def bits_per_byte(logits: torch.Tensor, targets: torch.Tensor) -> float:
    """Mean next-byte cross-entropy in bits (nats / ln 2) over labelled positions (`targets != IGNORE_INDEX`).

    logits: `[N, T, V]` float; targets: `[N, T]` int64. Computed in float64, per position, so uniform logits give
    exactly log2(256) = 8.0; chunks of `METRIC_CHUNK_ROWS` sequences bound the extra memory.
    """
    if logits.ndim != 3:
        raise ValueError(f"logits must have shape [N, T, V], got shape {list(logits.shape)}")
    if tuple(targets.shape) != tuple(logits.shape[:2]):
        raise ValueError(f"targets must have shape [N, T] = {list(logits.shape[:2])}, got {list(targets.shape)}")
    total_bits, count = 0.0, int((targets != IGNORE_INDEX).sum())
    if count == 0:
        raise ValueError("targets has no labelled position (every entry is IGNORE_INDEX)")
    for chunk_logits, chunk_targets in zip(logits.split(METRIC_CHUNK_ROWS), targets.split(METRIC_CHUNK_ROWS),
                                           strict=True):
        nats = F.cross_entropy(chunk_logits.double().flatten(0, 1), chunk_targets.flatten(), reduction="none",
                               ignore_index=IGNORE_INDEX)  # [n * T], 0 where unlabelled
        total_bits += float((nats / math.log(2)).sum())
    return total_bits / count
