"""A user's corpus for the text task: what its `data` field names, read as documents, tokenised, split by document.

`data` may name (`corpus_kind` tells which):
- a prepared directory (`regmem prepare` wrote it: train.bin, valid.bin, test.bin and meta.json): its splits are
  memory-mapped, so a corpus larger than memory trains; the splits and tokenizer are those it was prepared with;
- a file of token ids: `.bin` (nanoGPT's format: raw uint16) or `.npy` (any integer dtype), memory-mapped; with
  `eot` its documents end at that token (nanoGPT's GPT-2 files: 50256), else the splits are token ranges;
- a JSON-lines file (`.jsonl`): one document per line, the string under `text_field` ("text");
- a folder: every file under it (recursively, sorted by path, hidden ones left out) a document; files that are
  not UTF-8 text (a NUL byte or invalid UTF-8 in their first 8 KiB) are skipped and counted;
- a glob pattern (`Lib/**/*.py`): every file it matches, a document each, sorted;
- a text file: its paragraphs (separated by a blank line) are its documents.

Text is tokenised by `tokenizer` (tasks/tokenizer.py: bytes, or a BPE file); documents are joined by a blank line
(bytes) or the BPE's end-of-text token. The splits are whole documents, in order: training, then validation, then
test, cut at the document boundaries nearest to `1 - validation_fraction - test_fraction` and `1 - test_fraction`
of the text's bytes (as the built-in corpus is cut at topic starts, tasks/text.py), so every tokenizer splits the
same documents alike. A corpus that cannot be cut so (fewer
than three documents), a missing path, an empty corpus or a binary file is refused by a ValueError naming `data`.
"""

from __future__ import annotations

import codecs
import fnmatch
import functools
import glob
import json
import math
import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from regmem.tasks.tokenizer import END_OF_TEXT, BPETokenizer, load_tokenizer

META_FILE = "meta.json"  # a prepared corpus's description (`prepare_corpus`)
SPLITS = ("train", "valid", "test")
TOKEN_SUFFIXES = (".bin", ".npy")
PARAGRAPH = re.compile(rb"\n[ \t\r]*\n")  # a blank line: a text file's documents are its paragraphs
PROBE = 8192  # bytes read to tell text from binary


@dataclass(frozen=True)
class Corpus:
    train: np.ndarray  # 1-D token ids (an array, or a read-only memory map)
    valid: np.ndarray
    test: np.ndarray
    vocab_size: int
    bytes_per_token: float  # UTF-8 bytes of text per token over the corpus (1 for bytes; bits per byte from it)
    documents: tuple[int, int, int]  # per split (0 where a token file has no document ends)
    tokenizer: str  # "bytes" or the tokenizer file
    skipped: int = 0  # files of a folder or glob that are not text

    def split(self, name: str) -> np.ndarray:
        return getattr(self, name)


def topics() -> dict[str, str]:
    """The documentation topics of `pydoc_data.topics`, name -> text; raises RuntimeError if the module is absent."""
    try:
        from pydoc_data.topics import topics as pydoc_topics
    except ImportError as error:
        raise RuntimeError(
            "the text task's corpus is pydoc_data.topics from CPython's standard library, which this Python "
            "installation lacks (some distributions strip it); use a Python that ships pydoc_data"
        ) from error
    return pydoc_topics


def check_fractions(validation_fraction, test_fraction) -> None:
    """Raises ValueError naming the field unless each is a real number in (0, 1) and together they are below 1."""
    for name, value in (("validation_fraction", validation_fraction), ("test_fraction", test_fraction)):
        if isinstance(value, bool) or not isinstance(value, int | float) or not 0 < value < 1:
            raise ValueError(f"{name} must be a number in (0, 1), got {value!r}")
    if validation_fraction + test_fraction >= 1:
        raise ValueError(f"validation_fraction + test_fraction must be below 1, got {validation_fraction} + "
                         f"{test_fraction}")


def corpus_kind(data: str) -> str:
    """"prepared", "tokens", "jsonl", "folder", "glob" or "text" (module docstring); ValueError for a path that
    does not exist."""
    if not data:
        raise ValueError("data: must not be empty (a file, folder or glob pattern)")
    path = Path(data)
    if glob.has_magic(data):
        return "glob"
    if path.is_dir():
        return "prepared" if (path / META_FILE).is_file() else "folder"
    if not path.is_file():
        raise ValueError(f"data: no file or folder {data!r}")
    if path.suffix in TOKEN_SUFFIXES:
        return "tokens"
    return "jsonl" if path.suffix == ".jsonl" else "text"


def is_text(head: bytes) -> bool:
    """Whether the first bytes of a file read as UTF-8 text without NUL (a multi-byte character cut at the end is
    allowed)."""
    if b"\x00" in head:
        return False
    try:
        codecs.getincrementaldecoder("utf-8")().decode(head, final=False)
    except UnicodeDecodeError:
        return False
    return True


def _read_text(path: Path) -> bytes | None:
    data = path.read_bytes()
    return data if is_text(data[:PROBE]) else None


def glob_root(pattern: str) -> str:
    """The directory part of a glob pattern before its first wildcard ("Lib/**/*.py" -> "Lib")."""
    parts = Path(pattern).parts
    fixed = list(parts[:next(i for i, p in enumerate(parts) if glob.has_magic(p))])
    return str(Path(*fixed)) if fixed else "."


def text_documents(data: str, *, text_field: str = "text", exclude: tuple[str, ...] = ()) -> tuple[list[bytes], int]:
    """(the documents of a text source as UTF-8 bytes, the files skipped as not text). `exclude`: a folder's or
    glob's files with a path component matching one of these patterns are left out (e.g. "site-packages")."""
    kind = corpus_kind(data)
    if kind in ("prepared", "tokens"):
        raise ValueError(f"data: {data!r} holds token ids, not text (a tokenizer learns from text: give the text "
                         "it was made from)")
    if kind in ("folder", "glob"):
        root = Path(data) if kind == "folder" else Path(glob_root(data))
        found = root.rglob("*") if kind == "folder" else map(Path, glob.glob(data, recursive=True))

        def kept(path: Path) -> bool:  # hidden files and folders (.git) left out; `exclude` on the parts below root
            parts = path.relative_to(root).parts if path.is_relative_to(root) else path.parts
            return (path.is_file() and not any(part.startswith(".") for part in parts)
                    and not any(fnmatch.fnmatch(part, pattern) for part in parts for pattern in exclude))

        paths = sorted(filter(kept, found))
        texts = [_read_text(p) for p in paths]
        documents = [t for t in texts if t]
        if not documents:
            raise ValueError(f"data: {data!r} holds no text file ({len(paths)} files, none UTF-8 text)")
        return documents, sum(t is None for t in texts)
    path = Path(data)
    if kind == "jsonl":
        documents = []
        with open(path, encoding="utf-8") as lines:
            for number, line in enumerate(lines, 1):
                if not line.strip():
                    continue
                try:
                    record = json.loads(line)
                except json.JSONDecodeError as err:
                    raise ValueError(f"data: {data!r} line {number} is not JSON ({err.msg})") from None
                if not isinstance(record, dict) or not isinstance(record.get(text_field), str):
                    raise ValueError(f"data: {data!r} line {number} has no string field {text_field!r} "
                                     "(text_field names it)")
                documents.append(record[text_field].encode("utf-8"))
        return documents, 0
    text = _read_text(path)
    if text is None:
        raise ValueError(f"data: {data!r} is not UTF-8 text (a binary file? token ids go in a .bin or .npy file)")
    return [p for p in PARAGRAPH.split(text) if p.strip()], 0


def cut_points(lengths: list[int], validation_fraction: float, test_fraction: float, data: str) -> tuple[int, int]:
    """(v, t): the documents [0, v) train, [v, t) validate, [t, n) test, cut at the boundaries nearest to the
    fractions of the total length (the earlier wins a tie); ValueError naming `data` when a split would be empty."""
    ends = np.cumsum(lengths)
    total = int(ends[-1]) if len(ends) else 0

    def nearest(target: float) -> int:
        return min(range(1, len(lengths)), key=lambda i: (abs(int(ends[i - 1]) - target), i), default=0)

    check_fractions(validation_fraction, test_fraction)
    v = nearest((1 - validation_fraction - test_fraction) * total)
    t = nearest((1 - test_fraction) * total)
    if len(lengths) >= 3 and not 0 < v < t < len(lengths):
        raise ValueError(f"data: validation_fraction {validation_fraction} and test_fraction {test_fraction} cut "
                         f"{data!r}'s {len(lengths)} documents at one boundary: a split would be empty")
    if not 0 < v < t < len(lengths):
        raise ValueError(f"data: {data!r} has {len(lengths)} documents, too few to split into training, validation "
                         "and test by document (separate a text file's documents by blank lines, or give a folder "
                         "of files or JSON lines)")
    return v, t


def _dtype(vocab_size: int):
    return np.uint8 if vocab_size <= 2**8 else np.uint16 if vocab_size <= 2**16 else np.uint32


def _from_text(data: str, tokenizer_spec: str, validation_fraction, test_fraction, text_field, exclude) -> Corpus:
    if data is None:  # the built-in corpus through another tokenizer: its topics are the documents
        documents, skipped, data = [t.encode("utf-8") for _, t in sorted(topics().items())], 0, "the built-in corpus"
    else:
        documents, skipped = text_documents(data, text_field=text_field, exclude=exclude)
    if not any(d.strip() for d in documents):
        raise ValueError(f"data: {data!r} is empty (no text)")
    tokenizer = load_tokenizer(tokenizer_spec)
    if isinstance(tokenizer, BPETokenizer):
        end = tokenizer.encode(END_OF_TEXT)
        encoded = [np.asarray(ids + end, dtype=np.int64)
                   for ids in tokenizer.encode_batch([d.decode("utf-8", errors="replace") for d in documents])]
    else:
        encoded = [np.frombuffer(d + b"\n\n", dtype=np.uint8) for d in documents]
    # cut by the documents' bytes, not tokens: every tokenizer splits the same documents the same way, and a BPE
    # learnt from the training split (`regmem tokenizer train`) has seen no held-out document
    v, t = cut_points([len(d) for d in documents], validation_fraction, test_fraction, data)
    dtype = _dtype(tokenizer.vocab_size)
    parts = [np.concatenate(encoded[a:b]).astype(dtype) for a, b in ((0, v), (v, t), (t, len(encoded)))]
    # bits per byte divide by the bytes of text (a BPE's end-of-text token stands for none; bytes: every token one)
    size = sum(map(len, encoded)) if not isinstance(tokenizer, BPETokenizer) else sum(map(len, documents))
    return Corpus(*parts, vocab_size=tokenizer.vocab_size, bytes_per_token=size / sum(len(p) for p in parts),
                  documents=(v, t - v, len(encoded) - t), tokenizer=tokenizer.name, skipped=skipped)


def _memory_map(path: Path) -> np.ndarray:
    if path.suffix == ".npy":
        tokens = np.load(path, mmap_mode="r")
        if tokens.ndim != 1 or not np.issubdtype(tokens.dtype, np.integer):
            raise ValueError(f"data: {str(path)!r} must hold a 1-D integer array, got {tokens.dtype} "
                             f"{list(tokens.shape)}")
        return tokens
    if path.stat().st_size % 2:
        raise ValueError(f"data: {str(path)!r} is not a file of uint16 token ids (an odd number of bytes)")
    return np.memmap(path, dtype=np.uint16, mode="r")


def _chunked(tokens: np.ndarray, step: int = 1 << 24):
    for start in range(0, len(tokens), step):
        yield start, np.asarray(tokens[start:start + step])


def _from_tokens(data: str, validation_fraction, test_fraction, eot) -> Corpus:
    tokens = _memory_map(Path(data))
    if len(tokens) == 0:
        raise ValueError(f"data: {data!r} is empty (no token ids)")
    vocab_size = max(int(chunk.max()) for _, chunk in _chunked(tokens)) + 1
    if eot is None:  # no document ends: cut at token positions
        v = int(len(tokens) * (1 - validation_fraction - test_fraction))
        t = int(len(tokens) * (1 - test_fraction))
        documents = (0, 0, 0)
        if not 0 < v < t < len(tokens):
            raise ValueError(f"data: {data!r} has {len(tokens)} tokens, too few to split")
    else:
        ends = np.concatenate([start + np.flatnonzero(chunk == eot) + 1 for start, chunk in _chunked(tokens)])
        if len(ends) == 0 or ends[-1] != len(tokens):
            ends = np.append(ends, len(tokens))
        lengths = np.diff(np.concatenate([[0], ends])).tolist()
        dv, dt = cut_points(lengths, validation_fraction, test_fraction, data)
        v, t = int(ends[dv - 1]), int(ends[dt - 1])
        documents = (dv, dt - dv, len(lengths) - dt)
    return Corpus(tokens[:v], tokens[v:t], tokens[t:], vocab_size=max(vocab_size, (eot or 0) + 1),
                  bytes_per_token=float("nan"), documents=documents, tokenizer="token ids")


def _prepared(data: str) -> Corpus:
    directory = Path(data)
    meta = json.loads((directory / META_FILE).read_text())
    splits = [np.memmap(directory / f"{name}.bin", dtype=np.dtype(meta["dtype"]), mode="r") for name in SPLITS]
    tokenizer = meta["tokenizer"]
    if tokenizer not in ("bytes", "token ids"):
        tokenizer = str(directory / tokenizer)
    per_token = meta["bytes_per_token"]
    return Corpus(*splits, vocab_size=meta["vocab_size"],
                  bytes_per_token=float("nan") if per_token is None else per_token,
                  documents=tuple(meta["documents"]), tokenizer=tokenizer, skipped=meta.get("skipped", 0))


@functools.cache
def load_corpus(data: str | None, tokenizer: str = "bytes", validation_fraction: float = 0.04,
                test_fraction: float = 0.06, text_field: str = "text", eot: int | None = None,
                exclude: tuple[str, ...] = ()) -> Corpus:
    """The corpus `data` names, tokenised and split (module docstring); cached per process. A prepared directory
    or a token file brings its own tokens: `tokenizer` must then be "bytes" (its default). `exclude`: see
    `text_documents`."""
    if data is not None and corpus_kind(data) in ("prepared", "tokens"):
        if tokenizer != "bytes":
            raise ValueError(f"tokenizer: {data!r} holds token ids already; give no tokenizer (a prepared "
                             "directory keeps the one it was made with)")
        kind = corpus_kind(data)
        return _prepared(data) if kind == "prepared" else _from_tokens(data, validation_fraction, test_fraction, eot)
    return _from_text(data, tokenizer, validation_fraction, test_fraction, text_field, tuple(exclude))


def prepare_corpus(data: str | None, out_dir: str | Path, *, tokenizer: str = "bytes",
                   validation_fraction: float = 0.04, test_fraction: float = 0.06, text_field: str = "text",
                   eot: int | None = None, exclude: tuple[str, ...] = (), progress: bool = True) -> Corpus:
    """Tokenises `data` once (`load_corpus`) into `out_dir`: train.bin, valid.bin, test.bin (uint8 for bytes,
    uint16 below 65,536 tokens, else uint32), meta.json and, for a BPE, its tokenizer.json; `data=out_dir` then
    memory-maps them. The text is held in memory while it is tokenised; the prepared splits need not be."""
    import shutil

    from tqdm import tqdm

    corpus = load_corpus(data, tokenizer, validation_fraction, test_fraction, text_field, eot, tuple(exclude))
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    dtype = _dtype(corpus.vocab_size)
    total = sum(len(corpus.split(name)) for name in SPLITS)
    with tqdm(total=total, unit="tok", unit_scale=True, disable=not progress, desc="prepare") as bar:
        for name in SPLITS:
            with open(out / f"{name}.bin", "wb") as file:
                for _, chunk in _chunked(corpus.split(name)):
                    chunk.astype(dtype).tofile(file)
                    bar.update(len(chunk))
    name = corpus.tokenizer if corpus.tokenizer in ("bytes", "token ids") else None
    if name is None:
        name = "tokenizer.json"
        if Path(corpus.tokenizer).resolve() != (out / name).resolve():
            shutil.copyfile(corpus.tokenizer, out / name)
    meta = {"source": str(data) if data is not None else "built-in", "tokenizer": name,
            "vocab_size": corpus.vocab_size, "dtype": np.dtype(dtype).name,
            "bytes_per_token": corpus.bytes_per_token if math.isfinite(corpus.bytes_per_token) else None,
            "documents": list(corpus.documents), "tokens": [len(corpus.split(n)) for n in SPLITS],
            "skipped": corpus.skipped, "validation_fraction": validation_fraction, "test_fraction": test_fraction}
    (out / META_FILE).write_text(json.dumps(meta, indent=1))
    return _prepared(str(out))
