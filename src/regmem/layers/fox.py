"""ForgettingAttention (FoX): softmax attention with a data-dependent forget gate.

Zhong et al., *Understanding Transformer from the Perspective of Associative Memory* (arXiv:2505.19488), Sec. 2.1,
eqs. 30-31, write gated attention as o_t = sum_{i<=t} v_i g_i(x_{i:t}) kappa(q_t, k_i) with the cumulative forget
product g_i = prod_{j=i+1}^{t} alpha_j, alpha_j = sigmoid(Linear(x_j)) in (0, 1): GLA with the linear kernel, the
Forgetting Transformer (Lin, Nikishin, He, Courville; arXiv:2503.02130) with the exp kernel and the softmax
normaliser. Per head h:

    alpha_{j,h} = sigmoid(w_h . x_j + b_h)                                 forget gate (retention), one per head
    D_{t,i}   = sum_{j=i+1}^{t} log alpha_{j,h}                            log decay, 0 on the diagonal
    o_{t,h}   = sum_{i<=t} exp(q_t.k_i / sqrt(D) + D_{t,i}) v_i / sum_{i<=t} exp(q_t.k_i / sqrt(D) + D_{t,i})

so the decay is an additive bias on the scores: the full forward is torch's scaled_dot_product_attention with the
float mask D (`regmem.ops.common.decay.segsum`, which sums exactly the gates each entry spans). This materialises a
[B, H, T, S] bias, O(T^2) memory per head like any masked SDPA call; a fused kernel is out of scope here. Like
`SoftmaxAttention` (attention.py says why) its forward ends in SDPA, not in a regmem op: no op computes softmax
attention with a forget gate, and the layer needs nothing beyond SDPA's float mask.

Decoding: the KV cache also keeps, per key i and head, its log decay to the newest token, sum_{j=i+1}^{t} log
alpha_j; a new chunk adds its own gates to it (never a difference of two long cumulative sums, for float32
accuracy), so a prefill followed by one-token or multi-token steps equals one full forward.

Padding: padded tokens get log alpha = 0 (they decay nothing) and masked keys, so real tokens never see them.
The rest is `SoftmaxAttention`'s: GQA, QK-norm, short convs, per-head output RMSNorm (`head_norm`). Rotary
positions are off by default, as in FoX, which needs no positional embedding (the gate orders the tokens).

The gate bias b_h is a parameter of its own, initialised at `gate_bias_init` (default 0: alpha starts near 1/2,
strong recency, as with a default-initialised bias; a large value starts close to plain softmax attention), so an
LM's init, which zeroes every Linear bias, keeps it.

`gate="bilinear"` replaces the cumulative forget product by the FFN-style gate the paper proposes after eq. 31,
g_i(x_{i:t}) = (W_G x_i)^T x_t (`regmem.layers.gates.BilinearGate`, one W_G per head), with no cumulative product:

    o_{t,h} = sum_{i<=t} g_{t,i,h} exp(q_t.k_i / sqrt(D)) v_i / sum_{i<=t} exp(q_t.k_i / sqrt(D))

The gate is signed, so it cannot be a bias inside the softmax, nor join its normaliser (a signed denominator could
vanish): our choice is softmax attention's own normaliser, i.e. the gate multiplies the softmax weights (the paper
omits normalisers, eq. 30). The read is then a materialised [B, H, T, S] product of the softmax weights and the
gate (torch, not SDPA), and the KV cache also keeps each token's input x_i (d_model floats per token) for the gate.
The forget gate's parameters (`f_proj`, `f_bias`) do not exist in this mode.

Not a point of the design space: the test-time-regression recipes (`regmem.recipe`) have one weighting per point,
and FoX's weights are the product of query similarity (softmax attention's) and a scalar decay (GLA's, Mamba-2's).
Its `recipe` is therefore None (as for the LSTM, regmem/layers/lstm.py), and `regmem recipes` does not list it.
"""

from __future__ import annotations

from typing import Literal, NamedTuple, get_args

import torch
import torch.nn.functional as F
from torch import nn

from regmem.layers.attention import AttentionState, SoftmaxAttention
from regmem.layers.base import repeat_heads
from regmem.layers.gates import BilinearGate
from regmem.ops.common import zero_padding
from regmem.ops.common.decay import segsum
from regmem.ops.nonparametric.similarity import allowed_pairs

GateKind = Literal["forget", "bilinear"]  # eq. 31's cumulative forget product, or the bilinear gate (docstring)


class ForgettingKVCache(NamedTuple):
    """k, v: [B, S, H_kv, D] after rotary; mask: [B, S] bool, False at padded tokens; log_decay: [B, S, H], each
    key's sum of log forget gates from the key (exclusive) to the newest token (inclusive)."""

    k: torch.Tensor
    v: torch.Tensor
    mask: torch.Tensor
    log_decay: torch.Tensor


class BilinearKVCache(NamedTuple):
    """k, v: [B, S, H_kv, D] after rotary; mask: [B, S] bool, False at padded tokens; x: [B, S, d_model], each
    token's mixer input (the x_i of the bilinear gate)."""

    k: torch.Tensor
    v: torch.Tensor
    mask: torch.Tensor
    x: torch.Tensor


class ForgettingAttention(SoftmaxAttention):
    """FoX's forgetting attention (module docstring): SoftmaxAttention plus a forget gate per head."""

    recipe_name = ""  # outside the design space (module docstring)

    def __init__(
        self,
        d_model: int,
        n_heads: int,
        head_dim: int | None = None,  # None means d_model // n_heads
        n_kv_heads: int | None = None,  # grouped-query attention; None means n_heads
        rotary: bool = False,  # FoX needs no positional embedding
        rope_base: float = 10000.0,
        qk_norm: bool = False,  # unit-norm q, k with a learnable temperature (initialised at sqrt(head_dim))
        short_conv: int = 0,  # kernel of a causal depthwise conv on q, k, v; 0 = off
        head_norm: bool = False,  # per-head RMSNorm on the attention output
        norm_eps: float = 1e-5,  # eps of that norm
        gate_bias_init: float = 0.0,  # initial b_h; alpha = sigmoid(b_h) at x = 0 (gate "forget" only)
        gate: GateKind = "forget",  # eq. 31's forget product, or the bilinear gate (module docstring)
    ):
        super().__init__(d_model, n_heads, head_dim, n_kv_heads, rotary, rope_base, qk_norm, short_conv,
                         head_norm, norm_eps)
        if gate not in get_args(GateKind):
            raise ValueError(f"gate must be one of {get_args(GateKind)}, got {gate!r}")
        if gate == "bilinear" and gate_bias_init != 0.0:
            raise ValueError("gate_bias_init applies to gate='forget', not to the bilinear gate")
        self.bilinear = BilinearGate(d_model, n_heads) if gate == "bilinear" else None
        if gate == "forget":
            self.f_proj = nn.Linear(d_model, n_heads, bias=False)
            self.f_bias = nn.Parameter(torch.full((n_heads,), float(gate_bias_init)))

    def levels(self) -> list[dict]:
        if self.bilinear is not None:
            return [{"tensors": "KV cache (every key and value) and each token's input", "period": 1,
                     "objective": "none: softmax attention weights times a bilinear gate (W_G x_i)^T x_t"}]
        return [{"tensors": "KV cache (every key and value) and each key's log decay", "period": 1,
                 "objective": "none: softmax attention re-weighted by a cumulative forget gate, not one regression"}]

    def forward(self, x, state=None, *, attention_mask=None):
        q, k, v, conv_cache, past, given_mask, mask = self._prologue(x, state, attention_mask)
        offset = past.k.shape[1] if past is not None else 0
        if self.bilinear is not None:
            o, cache = self._bilinear_read(x, q, k, v, mask, past)
            return self._output(o), AttentionState(conv_cache, cache)
        log_decay = self._log_decay(self.log_forget(x, given_mask), past)  # [B, H, T, S]
        if past is not None:
            k, v, mask = torch.cat([past.k, k], 1), torch.cat([past.v, v], 1), torch.cat([past.mask, mask], 1)
        o = self._attend(q, k, v, mask, offset, plain=False, log_decay=log_decay)
        cache = ForgettingKVCache(k, v, mask, log_decay[:, :, -1].transpose(1, 2))  # decay to the newest token
        return self._output(o), AttentionState(conv_cache, cache)

    def _bilinear_read(self, x, q, k, v, mask, past):
        """o_t = sum_{i<=t} g_ti softmax_i(q_t.k_i scale) v_i with the bilinear gate g (module docstring): x
        [B, T, d_model], q [B, T, H, D], k, v [B, T, H_kv, D], mask [B, T] -> o [B, T, H, D] and the cache."""
        offset = past.k.shape[1] if past is not None else 0
        if past is not None:
            k, v, mask = torch.cat([past.k, k], 1), torch.cat([past.v, v], 1), torch.cat([past.mask, mask], 1)
            x = torch.cat([past.x, x], 1)  # [B, S, d_model]
        gate = self.bilinear(x[:, offset:], x)  # [B, H, T, S]
        q_scaled, k_scaled, scale = self._scaled(q, k)
        scale = self.head_dim ** -0.5 if scale is None else scale
        logits = scale * torch.einsum("bthd,bshd->bhts", q_scaled, repeat_heads(k_scaled, self.n_heads))
        allowed = allowed_pairs(q.shape[1], k.shape[1], offset, mask, device=q.device)  # [B, 1, T, S]
        weights = torch.softmax(logits.masked_fill(~allowed, float("-inf")), dim=-1) * gate  # [B, H, T, S]
        o = torch.einsum("bhts,bshd->bthd", weights, repeat_heads(v, self.n_heads))
        return o, BilinearKVCache(k, v, mask, x)

    def log_forget(self, x: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        """log alpha_t = logsigmoid(w . x_t + b) per head: x [B, T, d_model] -> [B, T, H], in at least float32;
        0 (keep everything) at padded tokens (mask [B, T] bool, False there)."""
        dtype = torch.promote_types(x.dtype, torch.float32)
        logits = self.f_proj(x).to(dtype) + self.f_bias.to(dtype)  # [B, T, H]
        return zero_padding(F.logsigmoid(logits), mask)

    @staticmethod
    def _log_decay(log_f: torch.Tensor, past: ForgettingKVCache | None) -> torch.Tensor:
        """D[b, h, t, s] = sum of log alpha over (key s, query t]: log_f [B, T, H] -> [B, H, T, S], S = S_past + T;
        -inf above the diagonal of the new block."""
        g = log_f.transpose(1, 2)  # [B, H, T]
        within = segsum(g)  # [B, H, T, T]
        if past is None:
            return within
        upto = g.cumsum(dim=-1)  # [B, H, T]: the new gates up to and including query t
        from_past = past.log_decay.transpose(1, 2).unsqueeze(-2) + upto.unsqueeze(-1)  # [B, H, T, S_past]
        return torch.cat([from_past, within], dim=-1)  # [B, H, T, S]

    def state_floats(self, seq_len: int) -> int:
        if self.bilinear is not None:
            return super().state_floats(seq_len) + self.d_model * seq_len  # every cached token's input
        return super().state_floats(seq_len) + self.n_heads * seq_len  # the log decay of every cached key
