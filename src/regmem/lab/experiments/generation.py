"""Text generation from a saved byte-level language model: the qualitative check beside bits per byte.

A model trained on the `text` task (src/regmem/tasks/text.py: next-byte prediction on CPython's documentation,
`pydoc_data.topics`, Python Software Foundation License 2.0, scored in bits per byte) is saved by
`train_and_evaluate` (experiments/runs.py) as `<out_dir>/model/` (`LM.save_pretrained`). `generate_text` loads it,
encodes a prompt as UTF-8 bytes, samples continuation bytes with the model's recurrent decoding (`LM.generate`: one
prefill, then one-byte steps) from a seeded generator, and decodes them; a byte sequence that is not valid UTF-8
shows U+FFFD.

Worked example (a tiny untrained model writes noise; a trained one writes documentation-like prose):

    >>> import tempfile
    >>> import torch
    >>> from regmem.models import LM, LMConfig
    >>> directory = tempfile.mkdtemp()
    >>> _ = torch.manual_seed(0)
    >>> LM(LMConfig(vocab_size=256, d_model=16, n_layers=1, n_heads=1, mixer="linear")).save_pretrained(directory)
    >>> text = generate_text(directory, "The ", max_new_bytes=20, seed=0)
    >>> text == generate_text(directory, "The ", max_new_bytes=20, seed=0)
    True
"""

from __future__ import annotations

from pathlib import Path

import torch

from regmem.models import LM
from regmem.tasks.base import check_int
from regmem.tasks.text import VOCAB_SIZE, decode, encode
from regmem.tasks.tokenizer import TOKENIZER_FILE, load_tokenizer


def generate_text(
    model_dir: str | Path, prompt: str, *, max_new_bytes: int = 200, temperature: float = 0.8,
    top_k: int | None = None, seed: int = 0,
) -> str:
    """The text a saved byte-level LM writes after `prompt` (without the prompt).

    model_dir: a directory written by `LM.save_pretrained` (config.json + model.safetensors) whose vocabulary is
    the 256 byte values. prompt: non-empty text, encoded as UTF-8. max_new_bytes: bytes to sample (>= 1; the
    decoded string may be shorter, several bytes making one character). temperature: softmax temperature, 0 for
    greedy decoding. top_k: sample among the k most likely bytes only (None: all 256). A model trained on a BPE
    corpus has its tokenizer.json beside it (`train_and_evaluate` copies it): the prompt is encoded and the
    continuation decoded with it, and max_new_bytes counts its tokens. seed: seeds the sampling
    generator; global RNG state is untouched. Runs on CPU without gradients.
    """
    if not isinstance(prompt, str) or not prompt:
        raise ValueError(f"prompt must be a non-empty str, got {prompt!r}")
    check_int("max_new_bytes", max_new_bytes, 1)
    if isinstance(temperature, bool) or not isinstance(temperature, int | float) or temperature < 0:
        raise ValueError(f"temperature must be a number >= 0 (0: greedy), got {temperature!r}")
    if top_k is not None:
        check_int("top_k", top_k, 1)
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise ValueError(f"seed must be an int, got {seed!r}")
    model = LM.from_pretrained(model_dir)
    tokenizer = None
    if (Path(model_dir) / TOKENIZER_FILE).is_file():  # a model of a BPE corpus carries its tokenizer
        tokenizer = load_tokenizer(Path(model_dir) / TOKENIZER_FILE)
        if model.config.vocab_size != tokenizer.vocab_size:
            raise ValueError(f"model_dir's tokenizer has {tokenizer.vocab_size} tokens, its model "
                             f"{model.config.vocab_size}")
    elif model.config.vocab_size != VOCAB_SIZE:
        raise ValueError(f"model_dir must hold a byte-level model (vocab_size {VOCAB_SIZE}) or a tokenizer.json "
                         f"beside it, got vocab_size {model.config.vocab_size} and no tokenizer")
    model.eval()
    if tokenizer is not None:
        prompt_ids = torch.tensor([tokenizer.encode(prompt)], dtype=torch.int64)
        if prompt_ids.shape[1] == 0:
            raise ValueError(f"prompt {prompt!r} encodes to no token")
    else:
        prompt_ids = encode(prompt).unsqueeze(0)  # [1, T]
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        tokens = model.generate(prompt_ids, max_new_bytes, temperature=temperature, top_k=top_k,
                                generator=generator)  # [1, T + max_new_bytes]
    new = tokens[0, prompt_ids.shape[1]:]
    return tokenizer.decode(new.tolist()) if tokenizer is not None else decode(new)
