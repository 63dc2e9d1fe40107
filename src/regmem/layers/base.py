"""The mixer contract (docs/architecture.md, "The mixer contract").

`Mixer.forward(x: [B, T, d_model], state=None, *, attention_mask=None) -> (y: [B, T, d_model], new_state)`.
`state` is the mixer's whole decoding state (memory plus conv or KV cache); None means empty. `attention_mask`
is [B, T] with 1 for tokens and 0 for padding (left or right); padding never changes the outputs of the other
tokens. A prefill followed by one-token steps equals one full forward. Every mixer takes `d_model` and `n_heads`,
positive ints with n_heads dividing d_model unless `head_dim` is given (`check_sizes`, which `build_mixer` applies),
and refuses an empty x (B = 0 or T = 0) with a ValueError (`check_mixer_input`) rather than fail inside an op.
"""

from __future__ import annotations

import torch
from torch import nn

from regmem.recipe import Recipe, get


class MixerType(type):
    """The metaclass of mixers: a mixer class's signature lists every option its constructors take along the
    method resolution order (regmem/layers/options.py), so `help(GatedDeltaNet)` shows them with their defaults."""

    @property
    def __signature__(cls):
        from regmem.layers.options import mixer_signature

        return mixer_signature(cls)


class Mixer(nn.Module, metaclass=MixerType):
    """Base class of every token mixer. A subclass declares its point of the design space at its default options
    as `recipe_name`, a key of `regmem.recipe`'s registry ("" for a mixer outside the design space); an instance
    whose options move it to another point sets its own `recipe_name` or overrides `recipe`. Its options are its
    constructors' keyword arguments (`regmem.layers.options.mixer_options`); a class whose `**kwargs` are the fields
    of a dataclass names it as `options_config`, and one that fixes other defaults lists them in `option_defaults`.
    """

    recipe_name: str = ""
    # True for a mixer with an MLP inside (Hope's CMS), which a run trains at `TrainConfig.mlp_lr_scale` x its lr
    has_mlp: bool = False

    @classmethod
    def default_recipe(cls) -> Recipe | None:
        """The point at the default options, read from the class (`build_mixer` indexes mixers by it)."""
        return get(cls.recipe_name).recipe if cls.recipe_name else None

    @property
    def recipe(self) -> Recipe | None:
        """This instance's point of the design space; None outside it."""
        return get(self.recipe_name).recipe if self.recipe_name else None

    def state_floats(self, seq_len: int) -> int:
        """Floats of decoding state per sequence after `seq_len` tokens (memory, conv and KV caches)."""
        raise NotImplementedError

    def forward(self, x: torch.Tensor, state=None, *, attention_mask: torch.Tensor | None = None):
        raise NotImplementedError

    def levels(self) -> list[dict]:
        """The mixer's in-context components for `regmem.nested.describe_levels` (Nested Learning, Definition 2):
        by default one memory state written at every token by the solver of its recipe."""
        recipe = self.recipe
        return [{"tensors": f"{self.recipe_name} memory state", "period": 1,
                 "objective": f"{recipe.regressor} regression, {recipe.solver}"}]


def check_sizes(d_model, n_heads, head_dim=None) -> None:
    """The sizes every mixer takes: positive ints, and n_heads dividing d_model unless head_dim sets the width of a
    head (a mixer without it splits d_model into n_heads heads of d_model // n_heads, and would floor a remainder).
    Mixers that do not use heads (Mamba, LSTM) follow the same rule, so one LM config suits every mixer."""
    given = {"d_model": d_model, "n_heads": n_heads} | ({"head_dim": head_dim} if head_dim is not None else {})
    for name, value in given.items():
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{name} must be a positive int, got {value!r}")
    if head_dim is None and d_model % n_heads:
        raise ValueError(f"n_heads must divide d_model when head_dim is not given, got d_model = {d_model} and "
                         f"n_heads = {n_heads}")


def check_mixer_input(x: torch.Tensor, attention_mask: torch.Tensor | None, d_model: int) -> None:
    if x.ndim != 3 or x.shape[-1] != d_model:
        raise ValueError(f"x must have shape [B, T, d_model] with d_model = {d_model}, got {list(x.shape)}")
    # Refused here, alike for every mixer: the short convolutions (T = 0) and some ops cannot take an empty axis.
    if x.shape[0] == 0 or x.shape[1] == 0:
        raise ValueError(f"x must hold at least one token (B >= 1 and T >= 1), got shape {list(x.shape)}")
    if attention_mask is not None and tuple(attention_mask.shape) != tuple(x.shape[:2]):
        expected, got = list(x.shape[:2]), list(attention_mask.shape)
        raise ValueError(f"attention_mask must have shape [B, T] = {expected}, got {got}")


def split_heads(x: torch.Tensor, head_dim: int) -> torch.Tensor:
    """[B, T, H * D] -> [B, T, H, D]."""
    return x.unflatten(-1, (-1, head_dim))


def repeat_heads(x: torch.Tensor, n_heads: int) -> torch.Tensor:
    """Grouped heads: [B, T, H_kv, D] -> [B, T, H, D], each kv head serving H / H_kv query heads."""
    groups = n_heads // x.shape[2]
    return x if groups == 1 else x.repeat_interleave(groups, dim=2)
