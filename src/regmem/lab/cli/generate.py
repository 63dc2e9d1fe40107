"""`regmem generate`: continue a prompt with a text model saved by `regmem train text` (bytes, or the BPE saved
beside it)."""

from __future__ import annotations

from pathlib import Path

from regmem.lab.cli.args import ArgumentTypeError, non_negative_float, positive_int, seed

# the commands of this module: name -> the line `regmem --help` shows (cli/__init__.py)
COMMANDS = {
    "generate": "continue a prompt with a text model (`regmem train text`)",
}


def model_dir(text: str) -> str:
    """A directory written by LM.save_pretrained (config.json and weights)."""
    if not (Path(text) / "config.json").is_file():
        raise ArgumentTypeError(f"no saved model in {text!r} (expected <train --out-dir>/model with config.json)")
    return text


def add_generate(commands) -> None:
    parser = commands.add_parser("generate", help=COMMANDS["generate"])
    parser.add_argument("model_dir", type=model_dir, help="a saved model: <train --out-dir>/model")
    parser.add_argument("--prompt", required=True, help="text to continue (UTF-8)")
    parser.add_argument("--max-new-bytes", type=positive_int, default=200,
                        help="bytes to sample (tokens, for a model with a BPE tokenizer.json)")
    parser.add_argument("--temperature", type=non_negative_float, default=0.8,
                        help="softmax temperature; 0 is greedy")
    parser.add_argument("--top-k", type=positive_int, default=None, help="sample among the k most likely bytes")
    parser.add_argument("--seed", type=seed, default=0, help="seed of the sampling")
    parser.set_defaults(handler=_generate, parser=parser)


def _generate(args) -> None:
    from regmem.lab.experiments.generation import generate_text

    if not args.prompt:
        args.parser.error("argument --prompt: must not be empty")
    try:
        text = generate_text(args.model_dir, args.prompt, max_new_bytes=args.max_new_bytes,
                             temperature=args.temperature, top_k=args.top_k, seed=args.seed)
    except ValueError as err:
        args.parser.error(f"argument model_dir: {err}")
    print(args.prompt + text)
