"""The state of the test-time-training engine and the chunk semantics it carries.

`TTTState(params, momentum, anchor, offset)`:
    params:   [N, H, P]  the inner model's parameters after the last token (flat, `InnerModel.unpack`)
    momentum: [N, H, P]  the momentum of the inner updates, or [N, H, 0] when the op runs without momentum
    anchor:   [N, H, P]  the parameters at the start of the current mini-batch: every inner gradient of that
                         mini-batch is taken there
    offset:   [N, H]     tokens of the current mini-batch seen so far, in [0, C) (a float holding an integer)
N = B, or the number of sequences with `cu_seqlens`.

Mini-batch ("chunk") semantics. The inner gradient of token t is taken at the parameters theta_{s(t)} at the start of
its mini-batch, s(t) = C * floor((t - 1) / C) for 1-based t (TTT, arXiv:2407.04620, Sec. 2.7; Titans,
arXiv:2501.00663, Sec. 3.2; Nested Learning, arXiv:2512.24695, Sec. 8.2, where the printed C * ceil(t / C) would read
the future). With C = 1 this is the plain token recurrence. The mini-batch size C is therefore part of the model —
it changes the function — unlike the chunk size of the linear-memory ops, which only changes speed.

Read scale (`ttt(read_scale=r)`, r: [H, C]): the output of a live token at position i = offset (0-based, before the
token) of its mini-batch reads theta_{s(t)} + r_i (theta_t - theta_{s(t)}); padded tokens read theta_t. The state
itself is never scaled, so r changes the outputs and nothing a later token sees.

Canonical form: when offset = 0 the anchor equals params (the next mini-batch starts from the current parameters).
Every form returns its state in canonical form, so two forms can be compared field by field.

Padding (`live` = 0: varlen tails and padded tokens) leaves the whole state unchanged and does not advance the
offset; the chunk form assumes the live tokens of a row form a prefix (right padding), which is what `cu_seqlens`
and the layers produce (a layer moves left padding to the right before calling the op).
"""

from __future__ import annotations

from typing import NamedTuple

import torch


class TTTState(NamedTuple):
    """State of the test-time-training engine (module docstring): params, momentum [N, H, P] (or [N, H, 0]),
    anchor [N, H, P], offset [N, H]."""

    params: torch.Tensor
    momentum: torch.Tensor
    anchor: torch.Tensor
    offset: torch.Tensor


def zero_state(B: int, H: int, P: int, momentum: bool, like: torch.Tensor) -> TTTState:
    params = like.new_zeros(B, H, P)
    return TTTState(params, like.new_zeros(B, H, P if momentum else 0), params, like.new_zeros(B, H))


def start_anchor(state: TTTState) -> torch.Tensor:
    """The anchor in canonical form: params where the offset is 0."""
    return torch.where(state.offset.unsqueeze(-1) == 0, state.params, state.anchor)


def advance(offset: torch.Tensor, live: torch.Tensor, mini_batch: int) -> torch.Tensor:
    """The offset after a token: +1 (mod C) where live, unchanged on padding. offset, live: [N, H]."""
    return torch.remainder(offset + live, mini_batch)


def read_point(reads: torch.Tensor, offset: torch.Tensor, live: torch.Tensor, anchor: torch.Tensor,
               params: torch.Tensor) -> torch.Tensor:
    """The parameters a token's output reads under a read scale (module docstring): reads [N, H, C]; offset (before
    the token), live: [N, H]; anchor (the token's mini-batch start), params (after the token): [N, H, P]."""
    r = torch.gather(reads, -1, offset.long().unsqueeze(-1))  # [N, H, 1], r at the token's position
    r = 1 + live.unsqueeze(-1) * (r - 1)
    return anchor + r * (params - anchor)
