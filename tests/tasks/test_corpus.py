"""A user's corpus for the text task (regmem/tasks/corpus.py, tokenizer.py): every kind of source read as documents,
split by document, tokenised by bytes or a local BPE, prepared into memory-mapped files; bad input refused by name."""

import json

import numpy as np
import pytest
import torch

from regmem.lab.cli import main
from regmem.tasks.base import split_data
from regmem.tasks.corpus import load_corpus, prepare_corpus, text_documents
from regmem.tasks.text import Text, TextConfig
from regmem.tasks.tokenizer import BPETokenizer, load_tokenizer, train_bpe

DOCUMENTS = [f"document {i}: " + " ".join(f"word{(i * 7 + j) % 50}" for j in range(40 + i)) for i in range(40)]


@pytest.fixture(scope="module")
def sources(tmp_path_factory):
    root = tmp_path_factory.mktemp("corpus")
    (root / "paragraphs.txt").write_text("\n\n".join(DOCUMENTS))
    folder = root / "folder"
    (folder / "sub").mkdir(parents=True)
    for i, text in enumerate(DOCUMENTS):
        (folder / ("sub" if i % 2 else ".") / f"doc{i:02d}.txt").write_text(text)
    (folder / "image.bin").write_bytes(bytes(range(256)) * 4)  # not text: skipped
    (folder / ".hidden").write_text("never read")
    (folder / ".git").mkdir()
    (folder / ".git" / "HEAD").write_text("ref: refs/heads/main")  # a hidden folder's files are left out too
    (root / "lines.jsonl").write_text("\n".join(json.dumps({"text": t, "id": i}) for i, t in enumerate(DOCUMENTS)))
    return root


@pytest.mark.parametrize("kind", ["paragraphs.txt", "folder", "folder/**/*.txt", "lines.jsonl"])
def test_every_text_source_splits_its_documents_in_order_without_overlap(sources, kind):
    data = str(sources / kind)
    corpus = load_corpus(data, "bytes", 0.1, 0.1)
    documents, skipped = text_documents(data)
    assert skipped == (1 if kind == "folder" else 0)  # the binary file of the folder
    assert sorted(documents) == sorted(d.encode() for d in DOCUMENTS)
    assert sum(corpus.documents) == len(DOCUMENTS) and min(corpus.documents) >= 1
    whole = b"".join(d + b"\n\n" for d in documents)
    split_bytes = b"".join(bytes(np.asarray(corpus.split(name))) for name in ("train", "valid", "test"))
    assert split_bytes == whole and corpus.vocab_size == 256 and corpus.bytes_per_token == 1.0
    train_documents = set(bytes(np.asarray(corpus.train)).split(b"\n\n"))
    test_documents = set(bytes(np.asarray(corpus.test)).split(b"\n\n"))
    assert train_documents & test_documents <= {b""}  # no document in two splits


def test_token_files_are_memory_mapped_and_split_at_end_of_document_tokens(tmp_path):
    tokens = (np.arange(5000) % 97).astype(np.uint16)  # 52 zeros end 52 documents; a 53rd runs to the end
    tokens.tofile(tmp_path / "tokens.bin")
    np.save(tmp_path / "tokens.npy", tokens.astype(np.int32))
    by_range = load_corpus(str(tmp_path / "tokens.npy"), "bytes", 0.1, 0.1)
    assert by_range.vocab_size == 97 and by_range.documents == (0, 0, 0)
    assert (len(by_range.train), len(by_range.valid), len(by_range.test)) == (4000, 500, 500)
    by_document = load_corpus(str(tmp_path / "tokens.bin"), "bytes", 0.1, 0.1, eot=0)
    assert isinstance(by_document.train, np.memmap) and sum(by_document.documents) == 53
    for split in (by_document.train, by_document.valid):
        assert split[-1] == 0  # each split ends where a document ends
    assert np.array_equal(np.concatenate([by_document.train, by_document.valid, by_document.test]), tokens)


def test_a_bpe_learnt_locally_round_trips_and_scores_bits_per_byte(sources, tmp_path):
    tokenizer = train_bpe(DOCUMENTS, 300, tmp_path / "bpe.json", show_progress=False)
    assert isinstance(load_tokenizer(tmp_path / "bpe.json"), BPETokenizer) and 257 <= tokenizer.vocab_size <= 300
    for text in DOCUMENTS[:3] + ["naïve café ✓"]:
        assert tokenizer.decode(tokenizer.encode(text)) == text
    task = Text(TextConfig(data=str(sources / "lines.jsonl"), tokenizer=str(tmp_path / "bpe.json"), seq_len=16))
    corpus = task.config.corpus()
    assert task.config.vocab_size == tokenizer.vocab_size and corpus.bytes_per_token > 1.5  # merges happened
    inputs, targets = split_data(task, "valid", 4, seed=0)
    logits = torch.zeros(4, 16, tokenizer.vocab_size)
    metrics = task.metric(logits, targets)
    assert metrics["bits_per_token"] == pytest.approx(np.log2(tokenizer.vocab_size))
    assert metrics["bits_per_byte"] == pytest.approx(metrics["bits_per_token"] / corpus.bytes_per_token)
    assert task.config.tokenizer_file() == str(tmp_path / "bpe.json")


def test_a_prepared_corpus_memory_maps_the_same_splits(sources, tmp_path):
    data = str(sources / "folder")
    prepared = prepare_corpus(data, tmp_path / "prepared", validation_fraction=0.1, test_fraction=0.1,
                              progress=False)
    direct = load_corpus(data, "bytes", 0.1, 0.1)
    for name in ("train", "valid", "test"):
        assert isinstance(prepared.split(name), np.memmap)
        assert np.array_equal(prepared.split(name), direct.split(name))
    task = Text(TextConfig(data=str(tmp_path / "prepared"), seq_len=8))
    windows = [split_data(task, split, 4, seed=1)[0] for split in ("train", "valid", "test")]
    assert all(w.shape == (4, 8) and w.dtype == torch.int64 for w in windows)


@pytest.mark.parametrize(("fields", "message"), [
    ({"data": "missing.txt"}, "data: no file or folder"),
    ({"data": "{root}/odd.bin"}, "is not a file of uint16 token ids"),
    ({"data": "{root}/binary.txt"}, "is not UTF-8 text"),
    ({"data": "{root}/empty.txt"}, "too few to split|is empty"),
    ({"data": "{root}/one.txt"}, "has 1 documents, too few to split"),
    ({"data": "{root}/lines.jsonl", "text_field": "body"}, "line 1 has no string field 'body'"),
    ({"data": "{root}/lines.jsonl", "tokenizer": "nosuch.json"}, "tokenizer: 'nosuch.json' is neither"),
    ({"data": "{root}/paragraphs.txt", "seq_len": 10**6}, "exceeds the .* tokens of the corpus's"),
])
def test_bad_corpora_are_refused_naming_the_field(sources, fields, message):
    (sources / "binary.txt").write_bytes(b"\x00\x01\x02" * 100)
    (sources / "empty.txt").write_text("")
    (sources / "odd.bin").write_bytes(b"\x01\x02\x03")
    (sources / "one.txt").write_text("a single document without blank lines " * 20)
    fields = {k: v.format(root=sources) if isinstance(v, str) else v for k, v in fields.items()}
    with pytest.raises(ValueError, match=message):
        Text(TextConfig(**{"seq_len": 8, **fields}))


def test_a_vocabulary_below_the_byte_alphabet_is_refused(tmp_path):
    with pytest.raises(ValueError, match="vocab must be an int >= 257"):
        train_bpe(DOCUMENTS, 100, tmp_path / "bpe.json")


def test_tokenize_prepare_train_generate_from_the_command_line(sources, tmp_path, capsys):
    bpe, prepared, run = tmp_path / "bpe.json", tmp_path / "prepared", tmp_path / "run"
    main(["tokenizer", "train", str(sources / "lines.jsonl"), "--vocab", "300", "--out", str(bpe)])
    main(["prepare", str(sources / "lines.jsonl"), "--tokenizer", str(bpe), "--out", str(prepared), "--no-progress"])
    meta = json.loads((prepared / "meta.json").read_text())
    assert meta["tokenizer"] == "tokenizer.json" and (prepared / "tokenizer.json").is_file()
    main(["train", "text", "--mixer", "linear", "--preset", "tiny", "--set", f"data={prepared}", "--set", "seq_len=8",
          "--steps", "2", "--out-dir", str(run), "--no-progress"])
    assert (run / "model" / "tokenizer.json").read_bytes() == bpe.read_bytes()
    capsys.readouterr()
    main(["generate", str(run / "model"), "--prompt", "document 3:", "--max-new-bytes", "5"])
    assert capsys.readouterr().out.startswith("document 3:")


def test_prepared_token_ids_keep_their_kind_and_text_tools_refuse_token_data(tmp_path):
    tokens = (np.arange(4000) % 97).astype(np.uint16)
    tokens.tofile(tmp_path / "ids.bin")
    prepared = prepare_corpus(str(tmp_path / "ids.bin"), tmp_path / "prep", eot=0, progress=False)
    meta = json.loads((tmp_path / "prep" / "meta.json").read_text())  # strict JSON: no NaN
    assert meta["tokenizer"] == "token ids" and meta["bytes_per_token"] is None
    assert prepared.tokenizer == "token ids"
    task = Text(TextConfig(data=str(tmp_path / "prep"), seq_len=8))
    _, targets = split_data(task, "valid", 2, seed=0)
    assert "bits_per_token" in task.metric(torch.zeros(2, 8, 97), targets)  # per token, and said so
    for data in (tmp_path / "ids.bin", tmp_path / "prep"):
        with pytest.raises(ValueError, match="holds token ids, not text"):
            text_documents(str(data))


def test_held_out_fractions_are_checked_and_a_bad_cut_is_named(sources):
    with pytest.raises(ValueError, match="validation_fraction \\+ test_fraction must be below 1"):
        load_corpus(str(sources / "paragraphs.txt"), "bytes", 0.6, 0.6)
    with pytest.raises(ValueError, match="cut .* documents at one boundary"):
        load_corpus(str(sources / "paragraphs.txt"), "bytes", 0.001, 0.001)
