"""A language model around any mixer: embeddings -> pre-norm residual blocks -> norm -> head.

    x = x + mixer(norm(x));  x = x + ffn(norm(x))        (ffn: SwiGLU, none, or an associative-memory FFN of
                                                           regmem.layers.ffn: relu, moe, multihead; no state)
    x = x + mixer(norm(x));  x = CMS(x)                   (ffn a CMSConfig: each CMS level is pre-norm residual, so
                                                           a one-level CMS that never updates is the SwiGLU block)

`LMConfig.ffn` is one of the FFN configs of regmem/models/ffn.py, which builds the module (`build_ffn`).

A block's decoding state is its mixer's state, or `BlockState(mixer, ffn)` when the FFN is a CMS (whose fast
weights and partial-chunk gradients are part of the context).

`forward(input_ids, state=None, *, attention_mask=None, return_state=False)` returns logits [B, T, vocab] (and
the per-layer states). `generate` decodes with the mixers' states: one prefill, then one-token steps.
Checkpoints are safetensors + a JSON config + a manifest of their checksums (`save_pretrained` / `LM.from_pretrained`,
which refuses files altered since they were saved); no pickle.
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import NamedTuple

import torch
from safetensors.torch import save_model
from torch import nn

from regmem.layers import build_mixer
from regmem.models.config import LMConfig
from regmem.models.ffn import build_ffn
from regmem.nested import CMS, CMSState
from regmem.storage import (
    CorruptFileError,
    load_safetensors_into,
    read_json,
    temporary_path,
    verify_manifest,
    write_atomic,
    write_manifest,
)

MODEL_FILE, CONFIG_FILE = "model.safetensors", "config.json"  # what save_pretrained writes, beside manifest.json


class BlockState(NamedTuple):
    """The state of a block whose FFN is a CMS."""

    mixer: object
    ffn: CMSState | None


class Block(nn.Module):
    def __init__(self, config: LMConfig, mixer: str):
        super().__init__()
        self.mixer_norm = nn.RMSNorm(config.d_model, eps=config.norm_eps)
        self.mixer = build_mixer(mixer, config.d_model, config.n_heads, **config.mixer_kwargs.get(mixer, {}))
        self.ffn = build_ffn(config.ffn, config.d_model, config.norm_eps)
        if self.ffn is not None and not isinstance(self.ffn, CMS):  # a CMS's levels have their own norms
            self.ffn_norm = nn.RMSNorm(config.d_model, eps=config.norm_eps)

    def forward(self, x, state=None, attention_mask=None):
        if isinstance(self.ffn, CMS):
            mixer_state, ffn_state = state if state is not None else (None, None)
            y, mixer_state = self.mixer(self.mixer_norm(x), mixer_state, attention_mask=attention_mask)
            x, ffn_state = self.ffn(x + y, ffn_state, attention_mask=attention_mask)
            return x, BlockState(mixer_state, ffn_state)
        y, state = self.mixer(self.mixer_norm(x), state, attention_mask=attention_mask)
        x = x + y
        if self.ffn is not None:
            x = x + self.ffn(self.ffn_norm(x))
        return x, state

    def state_floats(self, seq_len: int) -> int:
        return self.mixer.state_floats(seq_len) + (self.ffn.state_floats() if isinstance(self.ffn, CMS) else 0)


class LM(nn.Module):
    def __init__(self, config: LMConfig):
        super().__init__()
        self.config = config
        self.embed = nn.Embedding(config.vocab_size, config.d_model)
        self.blocks = nn.ModuleList(Block(config, name) for name in config.layer_mixers())
        self.norm = nn.RMSNorm(config.d_model, eps=config.norm_eps)
        self.head = nn.Linear(config.d_model, config.vocab_size, bias=False)
        self.apply(self._init)
        if config.tie_embeddings:
            self.head.weight = self.embed.weight

    def _init(self, module):
        if isinstance(module, nn.Linear | nn.Embedding):
            nn.init.normal_(module.weight, std=self.config.init_std)
            if getattr(module, "bias", None) is not None:
                nn.init.zeros_(module.bias)
        elif isinstance(module, CMS):  # its levels stand for the SwiGLU FFN: the same init (CMS.reset_parameters)
            module.reset_parameters(std=self.config.init_std)

    def mlp_parameters(self) -> list[nn.Parameter]:
        """The parameters of its MLPs, every block's FFN and every CMS (Hope's, inside its mixer, too): the optimiser
        trains them at lr * `TrainConfig.mlp_lr_scale` (regmem/train/optimizers.py)."""
        found = {}
        for module in self.modules():
            mlp = module.ffn if isinstance(module, Block) else module if isinstance(module, CMS) else None
            if mlp is not None:
                found.update((id(p), p) for p in mlp.parameters())
        return list(found.values())

    def forward(self, input_ids, state=None, *, attention_mask=None, return_state=False):
        """input_ids: [B, T] int64; state: a list of per-layer states or None; attention_mask: [B, T] (1 = token)."""
        check_token_ids("input_ids", input_ids)
        x = self.embed(input_ids)  # [B, T, d_model]
        states = state if state is not None else [None] * len(self.blocks)
        new_states = []
        for block, layer_state in zip(self.blocks, states, strict=True):
            x, layer_state = block(x, layer_state, attention_mask)
            new_states.append(layer_state)
        logits = self.head(self.norm(x))  # [B, T, vocab]
        return (logits, new_states) if return_state else logits

    @torch.no_grad()
    def generate(self, prompt, max_new_tokens: int, *, temperature: float = 1.0, top_k: int | None = None,
                 attention_mask=None, generator: torch.Generator | None = None):
        """prompt: [B, T] int64 with B, T >= 1 (left-padded when attention_mask is given). max_new_tokens: an int
        >= 0. temperature: >= 0, 0 means greedy; top_k: None or an int >= 1 (`sample`). Returns [B, T + max_new_tokens].
        Every argument is checked before the prefill: ValueError naming it."""
        check_token_ids("prompt", prompt)
        if isinstance(max_new_tokens, bool) or not isinstance(max_new_tokens, int) or max_new_tokens < 0:
            raise ValueError(f"max_new_tokens must be an int >= 0, got {max_new_tokens!r}")
        check_sampling(temperature, top_k)
        if attention_mask is not None and not bool(attention_mask[:, -1].all()):
            raise ValueError("attention_mask must pad on the left: the last prompt token of every row must be real")
        logits, state = self(prompt, attention_mask=attention_mask, return_state=True)
        tokens = [prompt]
        for _ in range(max_new_tokens):
            next_token = sample(logits[:, -1], temperature, top_k, generator)  # [B, 1]
            tokens.append(next_token)
            logits, state = self(next_token, state, return_state=True)
        return torch.cat(tokens, dim=1)

    def num_parameters(self) -> int:
        return sum(p.numel() for p in self.parameters())

    def state_floats(self, seq_len: int) -> int:
        """Floats of decoding state per sequence after `seq_len` tokens, summed over layers."""
        return sum(block.state_floats(seq_len) for block in self.blocks)

    def save_pretrained(self, directory: str | Path) -> None:
        """Writes `directory/model.safetensors`, `config.json` and `manifest.json` (their checksums, written last;
        regmem/storage.py), each file whole under a temporary name, then renamed into place: an interrupted save
        never leaves half a file, and files of two saves side by side fail `from_pretrained`'s check of the
        manifest rather than load as one model."""
        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        weights = temporary_path(directory / MODEL_FILE)
        try:
            save_model(self, str(weights))
            os.replace(weights, directory / MODEL_FILE)
        finally:
            weights.unlink(missing_ok=True)
        write_atomic(directory / CONFIG_FILE, json.dumps(self.config.to_dict(), indent=1))
        write_manifest(directory, (MODEL_FILE, CONFIG_FILE))

    @classmethod
    def from_pretrained(cls, directory: str | Path, device: str | torch.device = "cpu") -> LM:
        """The model `save_pretrained` wrote, checked against its manifest first: a file altered, truncated or
        replaced since (or a config.json that is not JSON, weights that are not safetensors) raises
        `regmem.storage.CorruptFileError`, a ValueError naming the file."""
        directory = Path(directory)
        verify_manifest(directory, required=(MODEL_FILE, CONFIG_FILE))
        config = read_json(directory / CONFIG_FILE)
        if not isinstance(config, dict):
            raise CorruptFileError(f"{directory / CONFIG_FILE}: not an LM config (a JSON object)")
        model = cls(LMConfig.from_dict(config))
        load_safetensors_into(model, directory / MODEL_FILE, device=str(device))
        return model


def check_token_ids(name: str, ids) -> None:
    """ValueError naming `name` unless `ids` is a [B, T] int64 tensor with B, T >= 1 (an empty one would fail
    inside a mixer, regmem/layers/base.py)."""
    if not isinstance(ids, torch.Tensor) or ids.dtype != torch.int64 or ids.ndim != 2 or 0 in ids.shape:
        raise ValueError(f"{name} must be an int64 tensor of shape [B, T] with B, T >= 1, got {_described(ids)}")


def check_sampling(temperature: float, top_k: int | None) -> None:
    """ValueError naming the option unless temperature is a finite number >= 0 and top_k None or an int >= 1."""
    number = isinstance(temperature, int | float) and not isinstance(temperature, bool)
    if not (number and math.isfinite(temperature) and temperature >= 0):
        raise ValueError(f"temperature must be a finite number >= 0 (0: greedy), got {temperature!r}")
    if top_k is not None and (isinstance(top_k, bool) or not isinstance(top_k, int) or top_k < 1):
        raise ValueError(f"top_k must be None or an int >= 1, got {top_k!r}")


def sample(logits, temperature: float, top_k: int | None, generator: torch.Generator | None):
    """logits: [B, vocab] floats with B, vocab >= 1 -> [B, 1] token ids. temperature: >= 0, 0 means greedy (the
    argmax); top_k: None (the whole vocabulary) or an int >= 1, the most likely tokens sampled among."""
    if not isinstance(logits, torch.Tensor) or not logits.is_floating_point() or logits.ndim != 2 or 0 in logits.shape:
        raise ValueError(f"logits must be a float tensor of shape [B, vocab] with B, vocab >= 1, "
                         f"got {_described(logits)}")
    check_sampling(temperature, top_k)
    if temperature == 0:
        return logits.argmax(dim=-1, keepdim=True)
    logits = logits / temperature
    if top_k is not None:
        kth = torch.topk(logits, min(top_k, logits.shape[-1]), dim=-1).values[:, -1:]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    return torch.multinomial(torch.softmax(logits, dim=-1), 1, generator=generator)


def _described(value) -> str:
    """A tensor's dtype and shape, or another value's type, for an error message."""
    return f"{value.dtype} of shape {list(value.shape)}" if isinstance(value, torch.Tensor) else type(value).__name__
