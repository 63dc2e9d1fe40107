"""`regmem levels`: a model's levels in the sense of Nested Learning (arXiv:2512.24695, Definition 2): which
tensors update how often, the outer optimiser's state included."""

from __future__ import annotations

from pathlib import Path

import torch

from regmem.lab.cli.args import ArgumentTypeError, mixer_name, positive_int

# the commands of this module: name -> the line `regmem --help` shows (cli/__init__.py)
COMMANDS = {
    "levels": "each tensor's update frequency (Nested Learning's levels)",
}

# The outer optimisers whose state `levels` lists (not the trainer's table, regmem.train.optimizers.OPTIMIZERS:
# this one needs no TrainConfig and has "none", a model without an optimiser).
OUTER_OPTIMIZERS = {"adamw": lambda params: torch.optim.AdamW(params),
                    "sgd": lambda params: torch.optim.SGD(params, lr=0.1, momentum=0.9),
                    "none": lambda params: None}


def model_name_or_dir(text: str) -> str:
    """A directory written by LM.save_pretrained, or a mixer name."""
    if Path(text).is_dir():
        if not (Path(text) / "config.json").is_file():
            raise ArgumentTypeError(f"{text!r} holds no config.json (a directory written by LM.save_pretrained)")
        return text
    try:
        return mixer_name(text)
    except ArgumentTypeError as err:
        raise ArgumentTypeError(f"neither a model directory nor a mixer: {err}") from None


def add_levels(commands) -> None:
    parser = commands.add_parser("levels", help=COMMANDS["levels"])
    parser.add_argument("--model", required=True, type=model_name_or_dir,
                        help="a mixer name (hope, hope_attention, attn, ...) or a checkpoint directory "
                             "(save_pretrained)")
    parser.add_argument("--ffn", choices=("swiglu", "cms", "none"), default=None,
                        help="the FFN of a named model (default: none for hope/hope_attention, else swiglu)")
    parser.add_argument("--d-model", type=positive_int, default=64, help="width of a named model")
    parser.add_argument("--n-layers", type=positive_int, default=2, help="layers of a named model")
    parser.add_argument("--optimizer", choices=tuple(OUTER_OPTIMIZERS), default="adamw",
                        help="the outer optimiser whose state is listed as a level")
    parser.set_defaults(handler=_levels, parser=parser)


def _levels(args) -> None:
    from regmem.models import LM, LMConfig
    from regmem.nested import describe_levels, format_levels

    if Path(args.model).is_dir():
        try:
            model = LM.from_pretrained(args.model)  # verified against its manifest
        except ValueError as err:
            args.parser.error(f"argument --model: {err}")
    else:
        ffn = args.ffn or ("none" if args.model in ("hope", "hope_attention") else "swiglu")
        try:
            model = LM(LMConfig(vocab_size=256, d_model=args.d_model, n_layers=args.n_layers,
                                n_heads=max(args.d_model // 16, 1), mixer=args.model, ffn=ffn))
        except ValueError as err:
            args.parser.error(f"argument --model {args.model} with --ffn {ffn} --d-model {args.d_model}: {err}")
    config = model.config
    print(f"levels of an LM: mixer {config.mixer}, ffn {config.ffn.kind}, {config.n_layers} layer(s), d_model "
          f"{config.d_model}; optimiser {args.optimizer} (Nested Learning, arXiv:2512.24695, Definition 2)\n")
    print(format_levels(describe_levels(model, OUTER_OPTIMIZERS[args.optimizer](model.parameters()))))
