"""`regmem tokenizer train` and `regmem prepare`: a user's corpus for the text task (tasks/corpus.py): a byte-level
BPE learnt from its training split, and the corpus tokenised once into memory-mapped token files."""

from __future__ import annotations

from pathlib import Path

from regmem.lab.cli.args import ArgumentTypeError, output_dir, positive_float, positive_int

# the commands of this module: name -> the line `regmem --help` shows (cli/__init__.py)
COMMANDS = {
    "tokenizer": "train a byte-level BPE on a corpus (Hugging Face tokenizers)",
    "prepare": "tokenise a corpus once into memory-mapped token files",
}


def corpus_path(text: str) -> str:
    """A file, folder or glob pattern that names at least one file (its contents are read by the command)."""
    from regmem.tasks.corpus import corpus_kind

    try:
        corpus_kind(text)
    except ValueError as err:
        raise ArgumentTypeError(str(err).removeprefix("data: ")) from None
    return text


def fraction(text: str) -> float:
    value = positive_float(text)
    if value >= 1:
        raise ArgumentTypeError(f"must be below 1, got {text}")
    return value


def add_tokenizer(commands) -> None:
    parser = commands.add_parser("tokenizer", help=COMMANDS["tokenizer"])
    actions = parser.add_subparsers(dest="action", required=True, metavar="ACTION")
    train = actions.add_parser("train", help="learn a byte-level BPE from a corpus's training split")
    train.add_argument("corpus", type=corpus_path,
                       help="a text file (documents: paragraphs), folder, glob pattern ('Lib/**/*.py') or .jsonl")
    train.add_argument("--vocab", type=positive_int, default=8192, help="tokens in the vocabulary (>= 257)")
    train.add_argument("--out", required=True, help="the tokenizer file to write, e.g. bpe.json")
    train.add_argument("--text-field", default="text", help="a .jsonl's field of text")
    train.add_argument("--exclude", action="append", default=[], metavar="PATTERN",
                       help="leave out a folder's or glob's files with a path component matching this, repeatable "
                            "(e.g. site-packages); give `regmem prepare` the same patterns and fractions, and train "
                            "on its output, so that the tokenizer has seen no held-out document")
    train.add_argument("--validation-fraction", type=fraction, default=0.04,
                       help="the held-out shares, as the text task cuts them: only the documents before the "
                            "validation cut are learnt from")
    train.add_argument("--test-fraction", type=fraction, default=0.06, help="see --validation-fraction")
    train.set_defaults(handler=_train_tokenizer, parser=train)


def _train_tokenizer(args) -> None:
    from regmem.tasks.corpus import cut_points, text_documents
    from regmem.tasks.tokenizer import MIN_BPE_VOCAB, train_bpe

    if args.vocab < MIN_BPE_VOCAB:
        args.parser.error(f"argument --vocab: must be >= {MIN_BPE_VOCAB} (the 256 bytes and an end-of-text token), "
                          f"got {args.vocab}")
    try:
        output_dir(str(Path(args.out).parent))
        documents, skipped = text_documents(args.corpus, text_field=args.text_field, exclude=tuple(args.exclude))
        v, _ = cut_points([len(d) for d in documents], args.validation_fraction, args.test_fraction, args.corpus)
    except (ValueError, ArgumentTypeError) as err:
        args.parser.error(f"argument corpus: {str(err).removeprefix('data: ')}")
    texts = [d.decode("utf-8", errors="replace") for d in documents[:v]]
    tokenizer = train_bpe(texts, args.vocab, args.out)
    print(f"learnt {tokenizer.vocab_size} tokens from {v} of {len(documents)} documents "
          f"({sum(map(len, documents[:v])):,} bytes; {skipped} files skipped as not text); wrote {args.out}")


def add_prepare(commands) -> None:
    parser = commands.add_parser("prepare", help=COMMANDS["prepare"])
    parser.add_argument("corpus", type=corpus_path,
                        help="a text file, folder, glob pattern, .jsonl, or .bin/.npy of token ids")
    parser.add_argument("--out", type=output_dir, required=True,
                        help="the directory of train.bin, valid.bin, test.bin and meta.json; `regmem train text "
                             "--set data=<it>` trains on it")
    parser.add_argument("--tokenizer", default="bytes", help="bytes, or a BPE file of `regmem tokenizer train`")
    parser.add_argument("--text-field", default="text", help="a .jsonl's field of text")
    parser.add_argument("--exclude", action="append", default=[], metavar="PATTERN",
                        help="leave out a folder's or glob's files with a path component matching this, repeatable "
                             "(e.g. site-packages)")
    parser.add_argument("--eot", type=int, default=None, help="a token file's end-of-document id (GPT-2: 50256)")
    parser.add_argument("--validation-fraction", type=fraction, default=0.04, help="share that chooses the lr")
    parser.add_argument("--test-fraction", type=fraction, default=0.06, help="share that is reported")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")
    parser.set_defaults(handler=_prepare, parser=parser)


def _prepare(args) -> None:
    from regmem.tasks.corpus import prepare_corpus

    try:
        corpus = prepare_corpus(args.corpus, args.out, tokenizer=args.tokenizer,
                                validation_fraction=args.validation_fraction, test_fraction=args.test_fraction,
                                text_field=args.text_field, eot=args.eot, exclude=tuple(args.exclude),
                                progress=not args.no_progress)
    except ValueError as err:
        flag = "--tokenizer" if str(err).startswith("tokenizer:") else "corpus"
        args.parser.error(f"argument {flag}: {str(err).removeprefix('data: ').removeprefix('tokenizer: ')}")
    sizes = ", ".join(f"{name} {len(corpus.split(name)):,}" for name in ("train", "valid", "test"))
    print(f"tokens: {sizes} (vocabulary {corpus.vocab_size}, documents {'/'.join(map(str, corpus.documents))}, "
          f"{corpus.skipped} files skipped as not text); wrote {args.out}")
