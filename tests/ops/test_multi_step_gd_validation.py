"""Bad input to multi_step_gd fails fast with a ValueError naming the argument."""

import pytest
import torch

from regmem.ops import GDStats, multi_step_gd

B, T, H, K, V, I = 2, 10, 3, 4, 5, 2


def _call(**override):
    args = {"q": torch.randn(B, T, H, K), "k": torch.randn(B, T, H, K), "v": torch.randn(B, T, H, V),
            "beta": torch.rand(B, T, H, I), **override}
    positional = [args.pop(n) for n in ("q", "k", "v", "beta")]
    return multi_step_gd(*positional, **args)


BAD = {
    "q rank 3": ({"q": torch.randn(B, T, H)}, "q"),
    "k mismatched K": ({"k": torch.randn(B, T, H, K + 1)}, "k"),
    "v mismatched H": ({"v": torch.randn(B, T, H + 1, V)}, "v"),
    "beta rank 3": ({"beta": torch.rand(B, T, H)}, "beta"),
    "beta zero steps": ({"beta": torch.rand(B, T, H, 0)}, "beta"),
    "beta mismatched T": ({"beta": torch.rand(B, T + 1, H, I)}, "beta"),
    "beta negative": ({"beta": -torch.rand(B, T, H, I)}, "beta"),
    "beta integer": ({"beta": torch.ones(B, T, H, I, dtype=torch.int64)}, "beta"),
    "beta on meta": ({"beta": torch.rand(B, T, H, I, device="meta")}, "beta"),
    "initial_state a tensor": ({"initial_state": torch.zeros(B, H, K, V)}, "initial_state"),
    "initial_state.R wrong shape": ({"initial_state": GDStats(torch.zeros(B, H, K, V), torch.zeros(B, H, K, V))},
                                    "initial_state.R"),
    "initial_state.C wrong shape": ({"initial_state": GDStats(torch.zeros(B, H, K, K), torch.zeros(B, H, V, K))},
                                    "initial_state.C"),
    "cu_seqlens with B > 1": ({"cu_seqlens": torch.tensor([0, 4, T])}, "cu_seqlens"),
    "mode unknown": ({"mode": "parallel"}, "mode"),
    "chunk_size not a power of two": ({"chunk_size": 48}, "chunk_size"),
    "scale a tensor": ({"scale": torch.tensor(1.0)}, "scale"),
}


@pytest.mark.parametrize("case", list(BAD))
def test_bad_input_raises_value_error_naming_the_argument(case):
    override, name = BAD[case]
    with pytest.raises(ValueError, match=name):
        _call(**override)


def test_error_message_repeats_the_documented_shape():
    expected = r"beta must have shape \[B, T, H, I\] = \[2, 10, 3, 2\], got shape \[2, 11, 3, 2\]"
    with pytest.raises(ValueError, match=expected):
        _call(beta=torch.rand(B, T + 1, H, I))
