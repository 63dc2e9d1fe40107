"""The padding helpers every mixer uses (regmem/ops/common/padding.py): `zero_padding` gives padded tokens the neutral
value 0 and leaves real ones; `real_first_order` puts each row's real tokens first, in order (a left-padded row is
rotated, a right-padded one kept, holes close up); `restore_time` undoes `permute_time`, gradients included;
`real_end` is one past the last real token. The mixer contract built on them is checked per mixer in
tests/layers/test_mixers.py (padding changes no real output; a padded prefill then steps equals the unpadded run)."""

import pytest
import torch

from regmem.ops.common import permute_time, real_end, real_first_order, restore_time, zero_padding

MASKS = {
    "left": [[0, 0, 1, 1, 1], [0, 1, 1, 1, 1]],
    "right": [[1, 1, 1, 0, 0], [1, 1, 1, 1, 1]],
    "holes": [[1, 0, 1, 0, 1], [0, 0, 0, 0, 0]],
}


def _mask(name):
    return torch.tensor(MASKS[name], dtype=torch.bool)


@pytest.mark.parametrize("trailing", [(), (3,), (3, 4)], ids=["BT", "BTH", "BTHK"])
def test_zero_padding_zeroes_padded_tokens_only(trailing):
    mask = _mask("holes")
    x = torch.randn(2, 5, *trailing) + 10.0  # no real entry is 0
    out = zero_padding(x, mask)
    assert (out[~mask] == 0).all()
    assert torch.equal(out[mask], x[mask])
    assert zero_padding(x, None) is x


@pytest.mark.parametrize("name", MASKS)
def test_real_first_order_puts_real_tokens_first_in_order(name):
    mask = _mask(name)
    order = real_first_order(mask)
    moved = permute_time(mask, order)
    for b in range(2):
        n = int(mask[b].sum())
        assert moved[b, :n].all() and not moved[b, n:].any(), "the real tokens form a prefix"
        assert order[b, :n].tolist() == mask[b].nonzero().flatten().tolist(), "in their order"
        assert sorted(order[b].tolist()) == list(range(5)), "a permutation of the row"


def test_real_first_rotates_left_padding_and_keeps_right_padding():
    x = torch.arange(10.0).view(2, 5)
    left = permute_time(x, real_first_order(_mask("left")))
    assert left.tolist() == [[2, 3, 4, 0, 1], [6, 7, 8, 9, 5]]  # out[b, t] = x[b, (t + pads) mod T]
    right = permute_time(x, real_first_order(_mask("right")))
    assert torch.equal(right, x)


@pytest.mark.parametrize("name", MASKS)
def test_restore_time_undoes_permute_time_with_gradients(name):
    order = real_first_order(_mask(name))
    x = torch.randn(2, 5, 3, dtype=torch.float64, requires_grad=True)
    y = restore_time(permute_time(x, order), order)
    assert torch.equal(y, x)
    cotangent = torch.randn_like(x)
    (grad,) = torch.autograd.grad(y, x, cotangent)
    assert torch.equal(grad, cotangent)
    assert permute_time(None, order) is None


def test_real_end_is_one_past_the_last_real_token():
    assert real_end(_mask("left")).tolist() == [5, 5]
    assert real_end(_mask("right")).tolist() == [3, 5]
    assert real_end(_mask("holes")).tolist() == [5, 0]
