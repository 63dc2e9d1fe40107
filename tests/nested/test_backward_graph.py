"""The CMS and self-modifying Titans cut a block into pieces (a level's chunks, the mini-batches) with one `split`,
whose backward is one `cat`: no backward node slices the whole block along time. A slice per piece (the previous
form) zero-fills a full-length gradient once per piece, O(T^2 / C) memory traffic, which was most of a CMS layer's
backward at T 4096 under the profiler."""

import pytest
import torch

from regmem.layers import build_mixer
from regmem.nested import CMS, CMSConfig


def _full_length_slices(y: torch.Tensor, T: int) -> int:
    """Backward nodes that slice a tensor whose time dim (1) has the block's length T."""
    seen, stack, found = set(), [y.grad_fn], 0
    while stack:
        node = stack.pop()
        if node is None or node in seen:
            continue
        seen.add(node)
        if type(node).__name__ == "SliceBackward0":
            sizes = node._saved_self_sym_sizes
            found += len(sizes) > 1 and sizes[1] == T and node._saved_dim == 1
        stack += [parent for parent, _ in node.next_functions]
    return found


@pytest.mark.parametrize("masked", [False, True])
def test_cms_pieces_come_from_one_split(masked):
    T = 70
    cms = CMS(8, CMSConfig(chunk_sizes=(4, 16), hidden=6))
    x = torch.randn(2, T, 8, requires_grad=True)
    mask = torch.ones(2, T, dtype=torch.bool) if masked else None
    y, _ = cms(x, attention_mask=mask)
    assert _full_length_slices(y, T) == 0


def test_self_modifying_titans_pieces_come_from_one_split():
    T = 70
    mixer = build_mixer("self_modifying_titans", 16, 2, mini_batch=8)
    x = torch.randn(2, T, 16, requires_grad=True)
    y, _ = mixer(x)
    assert _full_length_slices(y, T) == 0
