"""Variable-length packing (FlashAttention's `cu_seqlens` convention).

A packed batch holds N sequences back to back in one row: x: [1, total, ...], sequence n is
x[0, cu_seqlens[n]:cu_seqlens[n + 1]]. Ops run on a padded batch [N, T_max, ...] whose padding is *neutral*
(the op's state does not change on a padded token, e.g. k = v = 0 and log-gate 0 for linear memories), so the
state after the padded tail is the state after the sequence. Padding is right-aligned, so outputs of real tokens
never see padded ones.
"""

from __future__ import annotations

import torch


class Packing:
    """Index maps between a packed row [1, total, ...] and a padded batch [N, T_max, ...]."""

    def __init__(self, cu_seqlens: torch.Tensor):
        offsets = cu_seqlens.tolist()
        lengths = [b - a for a, b in zip(offsets, offsets[1:], strict=False)]
        self.num_seqs = len(lengths)
        self.max_len = max(max(lengths), 1)
        seq = torch.repeat_interleave(torch.arange(self.num_seqs), torch.tensor(lengths))  # [total]
        pos = torch.arange(offsets[-1]) - torch.tensor(offsets[:-1])[seq]  # [total], position within its sequence
        self.index = (seq * self.max_len + pos).to(cu_seqlens.device)  # [total], flat index into [N * T_max]

    def pad(self, x: torch.Tensor) -> torch.Tensor:
        """[1, total, ...] -> [N, T_max, ...], zero-filled past each sequence's end."""
        rest = x.shape[2:]
        out = x.new_zeros(self.num_seqs * self.max_len, *rest)
        out = out.index_copy(0, self.index, x[0])  # [N * T_max, ...]
        return out.reshape(self.num_seqs, self.max_len, *rest)  # [N, T_max, ...]

    def unpad(self, x: torch.Tensor) -> torch.Tensor:
        """[N, T_max, ...] -> [1, total, ...]."""
        flat = x.reshape(self.num_seqs * self.max_len, *x.shape[2:])  # [N * T_max, ...]
        return flat.index_select(0, self.index).unsqueeze(0)  # [1, total, ...]


def shared_offset(offset: torch.Tensor) -> int:
    """The one offset all rows of a continued state sit at (one host read); ValueError if rows differ. A
    multi-token call needs it to align its chunk grid; one-token steps keep per-row offsets and never call this."""
    value = offset.flatten()[0]
    if bool((offset != value).any()):
        raise ValueError("state: a multi-token call continues a state whose rows all sit at one offset "
                         "(decode unequal rows one token at a time)")
    return int(value)
