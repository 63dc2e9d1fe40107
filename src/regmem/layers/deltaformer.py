"""DeltaFormer: softmax attention whose values are first processed by the delta rule (Zhong, Xu, Ao, Shi,
*Understanding Transformer from the Perspective of Associative Memory*, arXiv:2505.19488, Sec. 2.2, eqs. 41-42,
App. E.2 eq. 111, Listing 2).

    u_t = alpha v_t - beta_t sum_{i<t} sum_j a_j kappa_1(w_t^j . k_i / sqrt(D)) u_i      (erase, op `deltaformer`)
    o_t = sum_{i<=t} kappa_2(q_t . k_i / sqrt(D)) u_i                                   (read)

Projections as Listing 2: q and the erase vectors w have one head per query head, k and v one per key/value head;
with n_kv_heads < n_heads the G = n_heads / n_kv_heads erase vectors of a group mix into one erase kernel by
learnable weights a_j (eq. 111, initialised to their mean, as Listing 2's average over the group) and the u of a
key/value head are read by its G query heads (grouped-query reads). alpha and beta are learnable per key/value
head and start at 1 (Listing 2's scalars); `beta="token"` makes beta_t = sigmoid(Linear(x_t)) per head instead.

Forms: a call without a state runs the op's chunk form; a call with a state and one token, the decode step, runs
its recurrent form by name (O(S (K + V)) per step in the cache length S, like attention's KV cache: Sec. 2.2.1's
O(d^2) assumes a finite feature map). The state is the key-u cache with a mask of the real tokens.

Padding: padded tokens stay in the cache with mask False; the op's `key_mask` keeps them out of every other
token's erase and read, and rotary positions count each row's real tokens, so padding changes no real output.

`listing2_softmax=True` reproduces Listing 2's kappa_1 = softmax, which fills masked scores with 0 (not -inf)
before normalising: row t's denominator gains T - t spurious exp(0) terms, so a prefix's output depends on the
call's length. It is a full-sequence path (materialised T x T, no cache, no padding) kept to compare with the
paper's toy runs; the default is the normalised kernel of eq. 94.

`normalizer="rms"` puts RMSNorm in place of the normalisers Z^(1), Z^(2) of eqs. 94-95, as App. D.2 proposes
("the normalization terms could alternatively use RMSNorm"): with the exp kernel and per-head norms over D with
learnable gains (initialised at 1),

    u_t = alpha v_t - beta_t RMSNorm_1( sum_{i<t} sum_j a_j exp(w_t^j . k_i / sqrt(D)) u_i )
    o_t = RMSNorm_2( sum_{i<=t} exp(q_t . k_i / sqrt(D)) u_i )

Our reading (the paper gives no formula): each norm acts on the whole unnormalised sum of its pass, where Z would divide
it. RMSNorm is scale invariant, so each sum may be computed divided by a positive number of its row, which keeps exp
from overflowing and equals the formula with eps scaled by that number squared (identical as eps -> 0): the read is the
op's softmax read (divided by Z^(2) itself) followed by RMSNorm_2, the erase sum is divided by the largest exp of its
row. So `norm_eps` is the eps of the scaled sums: App. D.2's literal formula with eps x Z^2 in the read and eps x
(largest exp)^2 in the erase pass (at eps 1e-5 the literal eps moves outputs by ~1e-3; both are checked in
tests/layers/test_deltaformer_layer.py). The value pass is no longer linear in u (the norm of row t depends on the
earlier u), so no triangular solve or chunk form computes it: the layer runs it token by token (`_rms_values`, O(T^2 D)
work in T sequential steps) and hands the u to the op with beta = 0, which then only reads. Both kernels must be
"softmax", the normalised kernels whose Z the norm replaces.
"""

from __future__ import annotations

from typing import Literal, NamedTuple, get_args

import torch
import torch.nn.functional as F
from einops import rearrange
from torch import nn

from regmem.layers.base import Mixer, check_mixer_input, split_heads
from regmem.layers.conv import ShortConvolution
from regmem.layers.rotary import RotaryEmbedding
from regmem.ops import KUState, deltaformer
from regmem.ops.common import ScoreKernel, score_kernel
from regmem.ops.deltaformer import check_kernels

BetaKind = Literal["scalar", "token"]  # a learnable beta per head (Listing 2), or sigmoid(Linear(x_t)) per token
Normalizer = Literal["z", "rms"]  # Z^(1), Z^(2) of eqs. 94-95, or RMSNorm in their place (App. D.2)


def check_normalizer(normalizer: Normalizer, erase_kernel: ScoreKernel, read_kernel: ScoreKernel,
                     listing2_softmax: bool) -> None:
    """ValueError unless `normalizer` is "z" or "rms", and "rms" comes with both kernels "softmax" (whose Z it
    replaces) and without Listing 2's path."""
    if normalizer not in get_args(Normalizer):
        raise ValueError(f"normalizer must be one of {get_args(Normalizer)}, got {normalizer!r}")
    if normalizer == "rms" and (erase_kernel, read_kernel) != ("softmax", "softmax"):
        raise ValueError(f"normalizer='rms' replaces the Z of the softmax kernels: erase_kernel and read_kernel must "
                         f"be 'softmax', got {erase_kernel!r} and {read_kernel!r}")
    if normalizer == "rms" and listing2_softmax:
        raise ValueError("normalizer='rms' and listing2_softmax exclude each other")


class DeltaFormerState(NamedTuple):
    """conv: the short convolutions' caches or None; cache: KUState(k [B, S, H_kv, D] after rotary, u [B, S, H_kv,
    D]); mask: [B, S] bool, False at padded tokens."""

    conv: tuple[torch.Tensor, ...] | None
    cache: KUState
    mask: torch.Tensor


class DeltaFormer(Mixer):
    recipe_name = "deltaformer"

    def __init__(
        self,
        d_model: int,
        n_heads: int,
        head_dim: int | None = None,  # None means d_model // n_heads
        n_kv_heads: int | None = None,  # grouped-query: G = n_heads / n_kv_heads erase vectors per kv head (eq. 111)
        erase_kernel: ScoreKernel = "softmax",  # kappa_1 (regmem.ops.common.kernels.SCORE_KERNELS)
        read_kernel: ScoreKernel = "softmax",  # kappa_2
        decimals: int = 0,  # places kept by a "round" kernel (Fig. 4 uses 2, Theorem 1 integers)
        beta: BetaKind = "scalar",  # learnable per-head beta (Listing 2) or sigmoid(Linear(x_t))
        rotary: bool = True,  # RoPE on q, k and w; Listing 2 runs without (NoPE), the paper's text with
        rope_base: float = 10000.0,
        short_conv: int = 0,  # kernel of a causal depthwise conv on q, k, v, w; 0 = off
        bias: bool = False,  # biases on the projections (Listing 2's nn.Linear defaults have them)
        chunk_size: int = 64,  # rows per block of the chunk form
        listing2_softmax: bool = False,  # Listing 2's zero-filled softmax for kappa_1 (module docstring)
        normalizer: Normalizer = "z",  # "rms": RMSNorm in place of Z^(1), Z^(2) (App. D.2, module docstring)
        norm_eps: float = 1e-5,  # eps of those norms, on each row's scaled sum (module docstring)
    ):
        super().__init__()
        n_kv_heads = n_kv_heads or n_heads
        if n_heads % n_kv_heads:
            raise ValueError(f"n_heads ({n_heads}) must be a multiple of n_kv_heads ({n_kv_heads})")
        check_kernels(erase_kernel, read_kernel, decimals)  # the op's rule, at construction (fails at build time)
        if beta not in get_args(BetaKind):
            raise ValueError(f"beta must be 'scalar' or 'token', got {beta!r}")
        if listing2_softmax and erase_kernel != "softmax":
            raise ValueError(f"listing2_softmax applies to erase_kernel='softmax', got {erase_kernel!r}")
        check_normalizer(normalizer, erase_kernel, read_kernel, listing2_softmax)
        self.d_model, self.n_heads, self.n_kv_heads = d_model, n_heads, n_kv_heads
        self.head_dim, self.short_conv, self.chunk_size = head_dim or d_model // n_heads, short_conv, chunk_size
        self.kernels = {"erase_kernel": erase_kernel, "read_kernel": read_kernel, "decimals": decimals}
        self.listing2_softmax = listing2_softmax
        q_dim, kv_dim = n_heads * self.head_dim, n_kv_heads * self.head_dim
        dims = (q_dim, kv_dim, kv_dim, q_dim)  # q, k, v, w
        self.q_proj, self.k_proj, self.v_proj, self.w_proj = (nn.Linear(d_model, d, bias=bias) for d in dims)
        self.convs = nn.ModuleList(ShortConvolution(d, short_conv) for d in dims) if short_conv else None
        self.rotary = RotaryEmbedding(self.head_dim, rope_base) if rotary else None
        self.alpha = nn.Parameter(torch.ones(n_kv_heads))
        self.beta = nn.Parameter(torch.ones(n_kv_heads)) if beta == "scalar" else None
        self.beta_proj = nn.Linear(d_model, n_kv_heads) if beta == "token" else None
        groups = n_heads // n_kv_heads
        self.erase_weights = nn.Parameter(torch.full((n_kv_heads, groups), 1.0 / groups))  # a_j of eq. 111
        self.o_proj = nn.Linear(q_dim, d_model, bias=bias)
        rms = normalizer == "rms"
        self.erase_norm = nn.RMSNorm(self.head_dim, eps=norm_eps) if rms else None  # RMSNorm_1, in place of Z^(1)
        self.read_norm = nn.RMSNorm(self.head_dim, eps=norm_eps) if rms else None  # RMSNorm_2, in place of Z^(2)

    def forward(self, x, state=None, *, attention_mask=None):
        check_mixer_input(x, attention_mask, self.d_model)
        B, T = x.shape[:2]
        conv_cache, past, past_mask = state if state is not None else (None, None, None)
        given_mask = attention_mask.bool() if attention_mask is not None else None
        q, k, v, w, conv_cache = self._project(x, given_mask, conv_cache)
        if self.rotary is not None:
            positions = self._positions(T, given_mask, past_mask, x.device)
            q, k, w = (self.rotary(t, positions) for t in (q, k, w))
        w = rearrange(w, "b t (h g) d -> b t h g d", h=self.n_kv_heads)  # [B, T, H_kv, G, D]
        alpha = self.alpha.to(x.dtype).expand(B, T, -1)  # [B, T, H_kv]
        beta = torch.sigmoid(self.beta_proj(x)) if self.beta is None else self.beta.to(x.dtype).expand(B, T, -1)
        if self.listing2_softmax:
            if state is not None or given_mask is not None:
                raise ValueError("listing2_softmax is a full-sequence path: no state and no attention_mask")
            return self._listing2(q, k, v, w, alpha, beta), None
        mask = given_mask if given_mask is not None else torch.ones(B, T, dtype=torch.bool, device=x.device)
        key_mask = mask if past is None else torch.cat([past_mask, mask], dim=1)
        plain = past is None and given_mask is None  # no cache and no padding: the op needs no key mask
        # the decode step uses the recurrent form by name (module docstring); everything else the chunk form
        mode = "recurrent" if past is not None and T == 1 else "chunk"
        options = {"chunk_size": self.chunk_size} if mode == "chunk" else {}
        erase_weights = self.erase_weights.to(x.dtype)
        if self.erase_norm is not None:  # RMSNorm in place of Z^(1): the values token by token; the op only reads
            v = self._rms_values(k, v, w, alpha, beta, past, None if plain else key_mask)
            alpha, beta = torch.ones_like(alpha), torch.zeros_like(beta)
        o, cache = deltaformer(q, k, v, w, alpha, beta, erase_weights=erase_weights, initial_state=past,
                               output_final_state=True, key_mask=None if plain else key_mask, mode=mode,
                               **self.kernels, **options)
        if self.read_norm is not None:  # RMSNorm in place of Z^(2), on the softmax read (module docstring)
            o = self.read_norm(o)
        return self.o_proj(o.flatten(-2)), DeltaFormerState(conv_cache, cache, key_mask)

    def _rms_values(self, k, v, w, alpha, beta, past, key_mask):
        """u_t = alpha v_t - beta_t RMSNorm_1(sum_{i<t} A[t, i] u_i) over the new tokens, one at a time (module
        docstring): k, v [B, T, H_kv, D]; w [B, T, H_kv, G, D]; alpha, beta [B, T, H_kv]; past: the KUState cache
        or None; key_mask [B, S + T] or None. Returns u [B, T, H_kv, D] in v's dtype."""
        dtype = torch.promote_types(v.dtype, torch.float32)
        keys = k if past is None else torch.cat([past.k.to(k.dtype), k], dim=1)  # [B, S + T, H_kv, D]
        values = [] if past is None else list(past.u.to(dtype).unbind(1))  # u of the cached tokens, [B, H_kv, D] each
        S, weights, norm = len(values), self.erase_weights.to(dtype), self.erase_norm
        gain = norm.weight.to(dtype)  # RMSNorm_1 in the compute dtype
        for t in range(v.shape[1]):
            e = v.new_zeros(v.shape[0], v.shape[2], v.shape[3], dtype=dtype)  # [B, H_kv, D]: the empty sum
            if S + t:
                scores = torch.einsum("bhgd,bshd->bhgs", w[:, t], keys[:, :S + t]).to(dtype) * self.head_dim ** -0.5
                if key_mask is not None:  # padded keys take no part
                    scores = scores.masked_fill(~key_mask[:, None, None, :S + t], float("-inf"))
                peak = scores.amax(dim=(-2, -1), keepdim=True).clamp(min=torch.finfo(dtype).min)  # [B, H_kv, 1, 1]
                A = torch.einsum("bhgs,hg->bhs", torch.exp(scores - peak), weights)  # [B, H_kv, S + t]
                e = torch.einsum("bhs,bshd->bhd", A, torch.stack(values, dim=1))
            values.append(alpha[:, t, :, None].to(dtype) * v[:, t].to(dtype)
                          - beta[:, t, :, None].to(dtype) * F.rms_norm(e, norm.normalized_shape, gain, norm.eps))
        return torch.stack(values[S:], dim=1).to(v.dtype)  # [B, T, H_kv, D]

    def _project(self, x, mask, conv_cache):
        """q, w: [B, T, H, D]; k, v: [B, T, H_kv, D], through the short convolutions when there are any."""
        projected = [proj(x) for proj in (self.q_proj, self.k_proj, self.v_proj, self.w_proj)]
        if self.convs is not None:
            if mask is not None:
                projected = [t.masked_fill(~mask.unsqueeze(-1), 0.0) for t in projected]
            caches = conv_cache if conv_cache is not None else (None,) * 4
            outs = [conv(t, c, mask) for conv, t, c in zip(self.convs, projected, caches, strict=True)]
            projected, conv_cache = [o for o, _ in outs], tuple(c for _, c in outs)
        q, k, v, w = (split_heads(t, self.head_dim) for t in projected)
        return q, k, v, w, conv_cache

    @staticmethod
    def _positions(T, mask, past_mask, device):
        """Rotary positions: each token's index among its row's real tokens ([T] or [B, T])."""
        positions = torch.arange(T, device=device) if mask is None else (mask.cumsum(1) - 1).clamp(min=0)
        if past_mask is not None:
            positions = past_mask.sum(1, keepdim=True) + positions  # [B, T]
        return positions

    def _listing2(self, q, k, v, w, alpha, beta):
        """Listing 2's DeltaAttention with kappa_1 = softmax over zero-filled scores, materialised."""
        T, G, scale = q.shape[1], w.shape[3], self.head_dim ** -0.5
        strict = torch.ones(T, T, dtype=torch.bool, device=q.device).tril(-1)
        scores = torch.einsum("bthgd,bihd->bhgti", w, k) * scale  # [B, H_kv, G, T, T]
        A = torch.softmax(scores.masked_fill(~strict, 0.0), dim=-1)  # the listing's quirk (a)
        A = torch.einsum("bhgti,hg->bhti", A, self.erase_weights.to(q.dtype)) * strict  # [B, H_kv, T, T]
        rhs = rearrange(alpha.unsqueeze(-1) * v, "b t h d -> b h t d")
        u = torch.linalg.solve_triangular(rearrange(beta, "b t h -> b h t 1") * A, rhs, upper=False,
                                          unitriangular=True)  # [B, H_kv, T, D]
        read = torch.einsum("bthd,bihd->bhti", q, k.repeat_interleave(G, dim=2)) * scale  # [B, H, T, T]
        P = score_kernel(self.kernels["read_kernel"], read, strict | torch.eye(T, dtype=torch.bool, device=q.device),
                         decimals=self.kernels["decimals"])
        o = P @ u.repeat_interleave(G, dim=1)  # [B, H, T, D]
        return self.o_proj(rearrange(o, "b h t d -> b t (h d)"))

    def levels(self) -> list[dict]:
        """Like attention, a non-parametric memory that keeps a pair per token; its values are the delta rule's u."""
        return [{"tensors": "key-u cache (every key and processed value)", "period": 1,
                 "objective": "delta rule in the kernel's feature space (eq. 37), read by the kernel"}]

    def state_floats(self, seq_len: int) -> int:
        conv = sum(c.conv.in_channels for c in self.convs) * (self.short_conv - 1) if self.convs is not None else 0
        return 2 * self.n_kv_heads * self.head_dim * seq_len + conv
