"""HLA's decay per token (hla2, ahla: `g` [B, T, H] beside the paper's per-head [H], sec. 4.3): the three forms
agree with every gradient (the decay's included) and a constant per-token decay is the per-head one; and a token
with q = k = 0 and decay 0 is neutral anywhere in a row (regmem/ops/common/padding.py, "neutral tokens"): the
outputs of the other tokens and the final state equal a call on the other tokens alone, and it reads 0. This is
how the HLA layers take padding (regmem/layers/hla.py)."""

from functools import partial

import pytest
import torch

from helpers import assert_close, assert_forms_agree, flatten_state, random_log_gate, random_qkv, unit_key_inputs
from regmem.ops.hla import AHLAState, HLA2State, ahla, hla2

B, T, H, K, V = 2, 19, 2, 4, 3
OPS = {
    "hla2": hla2,
    "hla2-unmasked": partial(hla2, masked=False),
    "hla2-normalize-ridge": partial(hla2, normalize=True, ridge=0.5),
    "ahla": ahla,
    "ahla-normalize": partial(ahla, normalize=True),
}


def _state(name, dtype=torch.float64, seed=3):
    gen = torch.Generator().manual_seed(seed)
    A = torch.randn(B, H, K, K, generator=gen, dtype=dtype) * K**-0.5
    if name.startswith("hla2"):
        return HLA2State(A @ A.transpose(-1, -2), *(0.3 * torch.randn(B, H, *s, generator=gen, dtype=dtype)
                                                   for s in ((K, V), (K,), (K, V), (K,))))
    return AHLAState(*(0.3 * torch.randn(B, H, *s, generator=gen, dtype=dtype) for s in ((K, V), (K,), (K, V), (K,))))


def _inputs(name, seed=0):
    inputs = unit_key_inputs(B, T, H, K, V, seed=seed)
    inputs["g"] = 0.3 * random_log_gate((B, T, H), 1.0, seed=seed + 5)  # [B, T, H] in [-0.3, 0], exact zeros
    inputs["initial_state"] = _state(name)
    return inputs


@pytest.mark.parametrize("name", OPS)
def test_per_token_decay_forms_match_reference_with_grads(name):
    assert_forms_agree(OPS[name], _inputs(name), chunk_size=8)


@pytest.mark.parametrize("name", OPS)
def test_a_constant_per_token_decay_is_the_per_head_decay(name):
    inputs = _inputs(name)
    per_head = -0.3 * torch.rand(H, generator=torch.Generator().manual_seed(9), dtype=torch.float64)
    o_head, s_head = OPS[name](**{**inputs, "g": per_head}, output_final_state=True)
    o_token, s_token = OPS[name](**{**inputs, "g": per_head.expand(B, T, H)}, output_final_state=True)
    assert_close(o_token, o_head, "o")
    for field, value in flatten_state(s_token).items():
        assert_close(value, flatten_state(s_head)[field], field)


@pytest.mark.parametrize("mode", ["chunk", "recurrent", "reference"])
@pytest.mark.parametrize("name", OPS)
def test_a_token_with_zero_query_key_and_decay_is_neutral_anywhere(name, mode):
    """Rows with left padding, right padding and holes: the real tokens' outputs and the final state equal those of
    a call on each row's real tokens alone; a neutral token outputs 0."""
    inputs = _inputs(name, seed=1)
    real = torch.ones(B, T, dtype=torch.bool)
    real[0, :4] = False  # left padding
    real[0, 9:11] = False  # a hole
    real[1, 15:] = False  # right padding
    neutral = {n: inputs[n].masked_fill(~real.view(B, T, *([1] * (inputs[n].ndim - 2))), 0.0)
               for n in ("q", "k", "g")}
    run = partial(OPS[name], mode=mode, chunk_size=4, output_final_state=True)
    o, state = run(**{**inputs, **neutral})
    for b in range(B):
        row = {n: inputs[n][b:b + 1, real[b]] for n in ("q", "k", "v", "g")}
        o_row, state_row = run(**row, initial_state=type(inputs["initial_state"])(
            *(s[b:b + 1] for s in inputs["initial_state"])))
        assert_close(o[b:b + 1, real[b]], o_row, f"row {b}: real tokens")
        assert_close(o[b, ~real[b]], torch.zeros_like(o[b, ~real[b]]), f"row {b}: neutral tokens read 0")
        for field, value in flatten_state(state).items():
            assert_close(value[b:b + 1], flatten_state(state_row)[field], f"row {b}: final {field}")


def test_decay_of_another_shape_is_rejected_naming_it():
    inputs = _inputs("hla2")
    for bad in (torch.zeros(B, T), torch.zeros(B, T, H + 1), torch.zeros(1, T, H)):
        with pytest.raises(ValueError, match="g must|g is"):
            hla2(**{**inputs, "g": bad})


@pytest.mark.parametrize("name", ["hla2", "ahla"])
def test_the_old_argument_name_decay_still_works_for_one_release_with_a_warning(name):
    """`decay` was renamed `g`, the log retention's name in every op (CHANGELOG.md): the old name gives the same
    result with a DeprecationWarning that points at the caller, and both names at once are refused."""
    q, k, v = random_qkv(1, 9, 2, 4, 3)
    g = torch.tensor([-0.2, -0.05], dtype=torch.float64)
    expected, _ = OPS[name](q, k, v, g=g)
    with pytest.warns(DeprecationWarning, match="decay= is renamed g=") as caught:
        o, _ = OPS[name](q, k, v, decay=g)
    assert caught[0].filename == __file__
    torch.testing.assert_close(o, expected, rtol=0, atol=0)
    with pytest.raises(ValueError, match="give g only"):
        OPS[name](q, k, v, g=g, decay=g)
