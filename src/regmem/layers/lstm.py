"""LSTM (Hochreiter & Schmidhuber, "Long Short-Term Memory", Neural Computation 9(8), 1997), on `torch.nn.LSTM`:

    i, f, o = sigmoid(W_{i,f,o} [x_t, h_{t-1}] + b),  z = tanh(W_z [x_t, h_{t-1}] + b_z)
    c_t = f ⊙ c_{t-1} + i ⊙ z,   h_t = o ⊙ tanh(c_t),   y_t = W_out h_t

(the forget gate f is Gers, Schmidhuber & Cummins 2000's addition, as in every modern LSTM and in torch's). It is
the reference row of *Nested Learning*'s formal-language table (arXiv:2512.24695, Sec. 9.5, Table 5, after Irie et
al., arXiv:2310.16076): a nonlinear recurrence, whose gates read the previous hidden state, recognises the
counter and regular languages there that parallel linear recurrences find hard.

Not a point of the design space. The TTR recipes (`regmem.recipe`) describe memories that solve a regression
over key -> value pairs inside the forward pass (arXiv:2501.12352, Sec. 3, eq. (8)); the LSTM's cell is a
gated vector whose gates depend on h_{t-1} through a nonlinearity, so it is no such regression. Its `recipe` is
therefore None (and `recipe_name` empty): `build_mixer` never returns it for a recipe, and `regmem recipes` does not
list it.

Options: `hidden_size` (None: d_model) is the width of h and c; `short_conv` (default 0 = off, as for attention)
is the kernel of a causal depthwise convolution with SiLU on the input before the LSTM (layers/conv.py), kept for
the common constructor scheme, so presets can give every mixer the same local mixing. `n_heads` is accepted for
the common mixer signature and unused: an LSTM has no heads.

State: `LSTMState(h, c, conv)` with h, c `[1, B, hidden_size]` as `torch.nn.LSTM` takes and returns them, and the
convolution's cache (None without one). Padding (regmem/ops/common/padding.py, "real tokens first"): padded inputs
are zeroed; given a mask, each row's real tokens are moved to the front in order and run as a packed sequence
(`torch.nn.utils.rnn.pack_padded_sequence`), so the LSTM never steps over a padded token and the final state is the
one after each row's last real token; outputs go back to the real tokens' positions, and padded positions output
zeros.
"""

from __future__ import annotations

from typing import NamedTuple

import torch
from torch import nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

from regmem.layers.base import Mixer, check_mixer_input
from regmem.layers.conv import ShortConvolution
from regmem.ops.common import permute_time, real_first_order, restore_time, zero_padding


class LSTMState(NamedTuple):
    """h, c: [1, B, hidden_size] (torch.nn.LSTM's layout); conv: the short convolution's cache [B, d_model, W - 1],
    or None without one."""

    h: torch.Tensor
    c: torch.Tensor
    conv: torch.Tensor | None


class LSTM(Mixer):
    """The LSTM mixer (module docstring): optional short convolution, `torch.nn.LSTM`, output projection."""

    recipe_name = ""  # outside the design space (module docstring)

    def __init__(
        self,
        d_model: int,
        n_heads: int = 1,  # unused (module docstring)
        *,
        hidden_size: int | None = None,  # width of h and c; None means d_model
        short_conv: int = 0,  # kernel of a causal depthwise conv on the input; 0 = off
    ):
        super().__init__()
        self.d_model, self.short_conv = d_model, short_conv
        self.hidden_size = hidden_size or d_model
        self.conv = ShortConvolution(d_model, short_conv) if short_conv else None
        self.lstm = nn.LSTM(d_model, self.hidden_size, batch_first=True)
        self.out_proj = nn.Linear(self.hidden_size, d_model, bias=False)

    def levels(self) -> list[dict]:
        """For `regmem.nested.describe_levels`: h and c change at every token, by a fixed gated rule that minimises
        no inner objective (the base class's row would read the recipe, which the LSTM does not have)."""
        return [{"tensors": "h, c (LSTM hidden and cell state)", "period": 1,
                 "objective": "none: a nonlinear gated recurrence, not a regression"}]

    def forward(self, x, state=None, *, attention_mask=None):
        check_mixer_input(x, attention_mask, self.d_model)
        mask = attention_mask.bool() if attention_mask is not None else None
        x = zero_padding(x, mask)
        conv_cache = None
        if self.conv is not None:
            x, conv_cache = self.conv(x, state.conv if state is not None else None, mask)
        hc = (state.h, state.c) if state is not None else None
        if mask is None:
            y, (h, c) = self.lstm(x, hc)
        else:
            y, (h, c) = self._packed(x, mask, hc)
        return self.out_proj(y), LSTMState(h, c, conv_cache)

    def _packed(self, x: torch.Tensor, mask: torch.Tensor, hc):
        """The LSTM over each row's real tokens only: x [B, T, D], mask [B, T] bool -> y [B, T, H] (zeros at
        padded positions), (h, c) after each row's last real token (the given state for a row with none)."""
        B, T, _ = x.shape
        order = real_first_order(mask)  # [B, T]
        front = permute_time(x, order)  # [B, T, D], real tokens first
        lengths = mask.sum(dim=1)  # [B]
        # pack_padded_sequence takes its lengths on the CPU (a host read) and refuses 0: a row without a real
        # token runs one (zeroed) token, and its state is put back below.
        packed = pack_padded_sequence(front, lengths.clamp(min=1).cpu(), batch_first=True, enforce_sorted=False)
        out, (h, c) = self.lstm(packed, hc)
        out, _ = pad_packed_sequence(out, batch_first=True, total_length=T)  # [B, T, H], zeros past each length
        y = zero_padding(restore_time(out, order), mask)  # back to the positions
        empty = (lengths == 0).view(1, B, 1)
        h0, c0 = hc if hc is not None else (torch.zeros_like(h), torch.zeros_like(c))
        return y, (torch.where(empty, h0, h), torch.where(empty, c0, c))

    def state_floats(self, seq_len: int) -> int:
        conv = self.d_model * (self.short_conv - 1) if self.conv is not None else 0
        return 2 * self.hidden_size + conv
