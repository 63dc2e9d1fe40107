"""What every converter does: check the upstream keys, and copy tensors into a layer's parameters by name."""

from __future__ import annotations

import torch
from torch import nn


def check_keys(state_dict: dict, required: set[str], optional: set[str], upstream: str) -> None:
    """ValueError naming the keys of `state_dict` that `upstream`'s converter does not know, or the required ones
    it lacks."""
    keys = set(state_dict)
    unknown, missing = sorted(keys - required - optional), sorted(required - keys)
    if unknown:
        raise ValueError(f"state_dict has keys {upstream}'s converter does not know: {unknown} (known: "
                         f"{sorted(required | optional)})")
    if missing:
        raise ValueError(f"state_dict lacks {upstream}'s keys {missing}")


def check_shapes(state_dict: dict, expected: dict, upstream: str) -> None:
    """ValueError naming the first key of `state_dict` whose shape is not `expected[key]` (upstream's names, before
    any tensor is rearranged into regmem's)."""
    for key, shape in expected.items():
        if tuple(state_dict[key].shape) != tuple(shape):
            raise ValueError(f"{upstream}: {key} must have shape {list(shape)}, got {list(state_dict[key].shape)}")


def load_exact(layer: nn.Module, tensors: dict[str, torch.Tensor]) -> nn.Module:
    """Copies `tensors` into `layer`'s parameters of the same names and shapes; every parameter must be given."""
    params = dict(layer.named_parameters())
    missing = sorted(set(params) - set(tensors))
    if missing:
        raise AssertionError(f"converter left parameters unset: {missing}")
    with torch.no_grad():
        for name, value in tensors.items():
            if params[name].shape != value.shape:
                raise ValueError(f"{name}: the converted tensor has shape {list(value.shape)}, the layer "
                                 f"{list(params[name].shape)}")
            params[name].copy_(value)
    return layer
