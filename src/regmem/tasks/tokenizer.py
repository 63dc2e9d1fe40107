"""Tokenizers of the text task: raw bytes (the default, vocabulary 256) or a byte-level BPE trained locally with
Hugging Face `tokenizers` (an optional dependency: `pip install tokenizers`, in regmem's `dev` and `text` extras).

A BPE tokenizer here is GPT-2's construction (Radford et al. 2019, Sec. 2.2): the 256 byte values are the initial
alphabet (every byte sequence encodes, nothing is unknown), merges are learnt from the corpus up to `vocab_size`,
and decoding gives the bytes back. It is one file, `tokenizer.json` in `tokenizers`' format, that travels with a
model (`regmem train` copies it into the saved model directory; `regmem generate` decodes with it).

    >>> tok = load_tokenizer("bytes")
    >>> tok.encode("naïve"), tok.decode(tok.encode("naïve"))
    ([110, 97, 195, 175, 118, 101], 'naïve')
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

BYTES = "bytes"
TOKENIZER_FILE = "tokenizer.json"  # a BPE tokenizer's name inside a model or a prepared corpus directory
END_OF_TEXT = "<|endoftext|>"  # the BPE vocabulary's one special token (GPT-2's)
MIN_BPE_VOCAB = 256 + 1  # the byte alphabet and the special token; fewer cannot encode every byte


class ByteTokenizer:
    """Token ids are the UTF-8 bytes."""

    name = BYTES
    vocab_size = 256

    def encode(self, text: str | bytes) -> list[int]:
        return list(text.encode("utf-8") if isinstance(text, str) else text)

    def decode(self, ids: Iterable[int]) -> str:
        return bytes(ids).decode("utf-8", errors="replace")


class BPETokenizer:
    """A byte-level BPE tokenizer saved by `train_bpe` (a `tokenizers.Tokenizer` file)."""

    def __init__(self, path: str | Path):
        tokenizers = _import_tokenizers()
        self.path = Path(path)
        try:
            self._tokenizer = tokenizers.Tokenizer.from_file(str(self.path))
        except Exception as err:  # tokenizers raises its own Exception subclass for a bad file
            raise ValueError(f"tokenizer: {str(path)!r} is not a tokenizers JSON file ({err})") from None
        self.name = str(self.path)
        self.vocab_size = self._tokenizer.get_vocab_size()

    def encode(self, text: str | bytes) -> list[int]:
        if isinstance(text, bytes):
            text = text.decode("utf-8", errors="replace")
        return self._tokenizer.encode(text).ids

    def encode_batch(self, texts: list[str]) -> list[list[int]]:
        return [e.ids for e in self._tokenizer.encode_batch(texts)]

    def decode(self, ids: Iterable[int]) -> str:
        return self._tokenizer.decode(list(ids))


def _import_tokenizers():
    try:
        import tokenizers
    except ImportError:
        raise ValueError("tokenizer: a BPE tokenizer needs Hugging Face tokenizers (pip install tokenizers, or "
                         "regmem[text])") from None
    return tokenizers


def load_tokenizer(spec: str | Path) -> ByteTokenizer | BPETokenizer:
    """"bytes", or the path of a tokenizer.json (or of a directory holding one); ValueError naming what is wrong."""
    if str(spec) == BYTES:
        return ByteTokenizer()
    path = Path(spec)
    if path.is_dir():
        path = path / TOKENIZER_FILE
    if not path.is_file():
        raise ValueError(f"tokenizer: {str(spec)!r} is neither 'bytes' nor a tokenizer file (`regmem tokenizer "
                         "train` writes one)")
    return BPETokenizer(path)


def train_bpe(texts: Iterable[str], vocab_size: int, out_path: str | Path, *, min_frequency: int = 2,
              show_progress: bool = True) -> BPETokenizer:
    """A byte-level BPE of `vocab_size` tokens (at most: a small corpus may have fewer merges) learnt from `texts`,
    saved to `out_path` and loaded back. ValueError for a vocabulary below the byte alphabet plus END_OF_TEXT."""
    if isinstance(vocab_size, bool) or not isinstance(vocab_size, int) or vocab_size < MIN_BPE_VOCAB:
        raise ValueError(f"vocab must be an int >= {MIN_BPE_VOCAB} (the 256 bytes and {END_OF_TEXT}), got "
                         f"{vocab_size!r}")
    tokenizers = _import_tokenizers()
    from tokenizers import decoders, models, pre_tokenizers, trainers

    tokenizer = tokenizers.Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, min_frequency=min_frequency, show_progress=show_progress,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), special_tokens=[END_OF_TEXT])
    tokenizer.train_from_iterator(texts, trainer=trainer)
    Path(out_path).parent.mkdir(parents=True, exist_ok=True)
    tokenizer.save(str(out_path))
    return BPETokenizer(out_path)
