"""Chunk (parallel, training) forms of the nonparametric memories.

*Test-time regression* (Wang, Shi, Fox; arXiv:2501.12352), Sec. 4 Vignette 4.

Softmax attention (eq. 50): torch's `scaled_dot_product_attention` on the kernel features q', k' (similarity.py;
flash / memory-efficient kernels, which run an online softmax over key blocks internally), with q', k', v
zero-padded to one head dim max(K', V) because the fused kernels need equal head dims. SDPA picks its own blocking,
so `chunk_size` is unused.

Local linear attention (eqs. 52-54), o_t = v_bar + C_vk (C_kk + ridge I)^{-1} (q_t - k_bar):
streams the moments sum p, sum p k, sum p k k^T, sum p v, sum p v k^T as one matmul per block of
C queries against all their causal pairs, p = exp(logit - max) with the block's exact max (a constant: it
cancels after normalisation); then centres and solves one K x K system per query. Memory, per (batch, head):
the pair features [L, F] with F = 1 + K + K(K + 1)/2 + V + V K (k k^T is symmetric: its upper triangle only),
the moments [T, F], and for the block in flight [C, L] weights and [C, K, K] systems; never a [T, T, K]
tensor. Under no_grad that is O(L F + C L). Training keeps the same: the backward recomputes each block's
weights instead of saving them (FlashAttention-style, `CausalMoments`), so autograd holds O(L F + T K^2),
not O(T^2); past FIT_BYTES of pair features and moments for all heads, a group of heads at a time under
activation checkpointing. Time O(T L F) for the moments (about 3x that for forward + backward) plus O(T K^3) for
the solves.
This streams over query blocks rather than key blocks: each block sees all its keys at once, so its max is
exact and no online rescaling is needed, and its matmul is one [C, L] x [L, F] product.

Numerics: E[k k^T] - k_bar k_bar^T cancels catastrophically when the weighted mean key lies far from the
origin relative to the keys' spread. Centring on q_t would not help (sum p (k - q)(k - q)^T expands into the same
cancelling terms) and centring on k_bar makes the moments query-dependent, so the chunk form subtracts one
query-independent origin, the mean key (and value) of the first 16 pairs of each sequence and head (the first
16 unmasked ones with `key_mask`), detached: the output is exactly invariant to it, so its gradient is zero and
detaching it is exact. Centring on the data bounds the cancellation by the keys' spread, and a mean over a fixed
prefix, unlike the mean over all L pairs, is the same for every longer prefix and any padding: a prefill
followed by decoding, or a padded batch, rounds as one call does (the first key alone would do that too, at 2-3x
the float32 error). Measured float32 error against float64 (relative RMS, T = 256, K = V = 16, N(0, 1) data):
chunk 6e-5 / 7e-6 / 1e-6 at ridge 1e-3 / 1e-2 / 1e-1, the reference (an uncentred (1 + K)-dim system) 3e-4 /
3e-5 / 6e-6. With q, k, v offset by 10 the chunk form stays at 1e-4 (ridge 1e-3) where uncentred moments give
1e-2. The error of every form grows like
eps * cond(C_kk + ridge I): small ridge with t <= K, or weights peaked on a few keys, cost float32 digits.


Local polynomial regression (eqs. 48-49): the reference's per-query fit (reference.py) for blocks of `chunk_size`
queries at a time, which bounds the design tensor to [B, H, C, S + T, P] instead of [B, H, T, S + T, P].

Kernel regression (eqs. 42-43): one exact factorisation, not chunks. One Cholesky L L^T = k(K, K) + ridge I of the
whole (S + T) x (S + T) Gram: its leading p x p block is the Cholesky factor of prefix p, and forward substitution
is prefix-separable (row i of L^{-1} b uses b_{<=i} only), so with W = L^{-1} V and U = L^{-1} k(K, Q),
    o_t = (L_p^{-1} k(K_p, q_t))^T (L_p^{-1} V_p) = sum_{i <= S + t} U[i, t] W[i],   p = S + t + 1.
Exact, O((S + T)^3) time and O((S + T)^2) memory per head; `chunk_size` is unused. Nothing cheaper exists for an
exact kernel regressor with a growing Gram: each new pair changes the inverse Gram everywhere.

Every core: q: [B, T, H, K]; k: [B, T, H, K]; v: [B, T, H, V]; initial_state: KVState of S cached pairs or None.
Query t uses pairs j <= S + t (state.py). Returns o: [B, T, H, V] and the KVState of the S + T pairs.

Legend: B batch, T new tokens, S cached pairs, L = S + T all pairs, H heads, K key dim (K' = K, or K + 1 for a
Gaussian kernel), V value dim, C chunk size (queries per block), F pair-feature width, P design columns.
"""

from __future__ import annotations

import functools

import torch
import torch.nn.functional as F
from einops import rearrange
from torch.autograd.function import once_differentiable
from torch.utils.checkpoint import checkpoint

from regmem.ops.common import checks_values, cholesky_or_nan
from regmem.ops.nonparametric.reference import local_polynomial_fit
from regmem.ops.nonparametric.similarity import (
    allowed_pairs,
    causal_logits,
    heads_first,
    make_gram,
    ridged_gram,
    similarity_features,
    softmax_features,
)
from regmem.ops.nonparametric.state import KVState, with_cache

ORIGIN_PAIRS = 16  # the regression origin is the mean of the first 16 pairs (module docstring, Numerics)
FIT_BYTES = 2**31  # pair features and moments held at once before local_linear_fit goes a group of heads at a time


def softmax_chunk_core(q, k, v, *, initial_state, scale, bandwidth, qk_norm, key_mask, chunk_size):
    """Fused SDPA on q', k'. Without a cache or key mask the mask is SDPA's own causal one; otherwise an explicit
    boolean mask (True = attend, `allowed_pairs`): [T, S + T], or [B, 1, T, S + T] with `key_mask`."""
    del chunk_size  # SDPA picks its own key blocks
    k, v, offset = with_cache(k, v, initial_state)
    T = q.shape[1]
    qh, kh, vh, scale = softmax_features(q, k, v, scale=scale, bandwidth=bandwidth, qk_norm=qk_norm)
    if T == 0:
        return v.new_zeros(v.shape[0], 0, v.shape[2], v.shape[-1]), KVState(k, v)
    # the fused kernels need one head dim for q, k and v (else SDPA falls back to its slow math path):
    # zero columns change no logit and add output columns that are dropped
    V, D = vh.shape[-1], max(qh.shape[-1], vh.shape[-1])
    if qh.shape[-1] != D or V != D:  # F.pad copies even when it adds nothing
        qh = F.pad(qh, (0, D - qh.shape[-1]))  # [B, H, T, D]
        kh = F.pad(kh, (0, D - kh.shape[-1]))  # [B, H, S + T, D]
        vh = F.pad(vh, (0, D - V))  # [B, H, S + T, D]
    allowed = None
    if offset == 0 and key_mask is None:
        o = F.scaled_dot_product_attention(qh, kh, vh, is_causal=True, scale=scale)  # [B, H, T, D]
    else:
        allowed = allowed_pairs(T, offset + T, offset, key_mask, device=q.device)  # [B, 1, T, S + T] or [T, S + T]
        o = F.scaled_dot_product_attention(qh, kh, vh, attn_mask=allowed, scale=scale)  # [B, H, T, D]
    o = o.masked_fill(_nan_logit_rows(qh, kh, offset, allowed), float("nan"))
    return rearrange(o[..., :V], "b h t v -> b t h v"), KVState(k, v)


def _nan_logit_rows(qh, kh, offset, allowed):
    """qh: [B, H, T, D], kh: [B, H, L, D] -> [B, H, T, 1] bool: the queries with a NaN logit (a NaN in the query or
    in a key it may read: `allowed` [T, L] or [B, 1, T, L], None for causal from `offset`). Softmax makes such a row
    NaN, as the other forms do, but SDPA's fused CPU kernels return 0 for a row whose logits are all NaN (a NaN
    query, or a first query whose one key is NaN), as for a fully masked row: the NaN is put back. O((T + L) D),
    next to SDPA's O(T L D)."""
    # A row's sum is NaN exactly when the row holds a NaN (or both infinities): one reduction, no [B, H, T, D] mask
    rows = qh.detach().sum(-1, keepdim=True).isnan()  # [B, H, T, 1]
    keys = kh.detach().sum(-1).isnan()  # [B, H, L]
    if allowed is None:  # query t reads keys j <= offset + t: a running "any"
        return rows | (keys.cumsum(-1)[..., offset:, None] > 0)
    return rows | ((allowed.to(qh.dtype) @ keys.to(qh.dtype).unsqueeze(-1)) > 0)  # [B, H, T, 1]


def local_linear_chunk_core(q, k, v, *, initial_state, scale, bandwidth, qk_norm, ridge, key_mask, chunk_size):
    """The streamed-moments form (bounded memory, module docstring); blocks of `chunk_size` queries."""
    k, v, offset = with_cache(k, v, initial_state)
    o = local_linear_fit(q, k, v, offset=offset, scale=scale, bandwidth=bandwidth, qk_norm=qk_norm, ridge=ridge,
                         chunk_size=chunk_size, key_mask=key_mask)
    return o, KVState(k, v)


def local_linear_fit(q, k, v, *, offset, scale, bandwidth, qk_norm, ridge, chunk_size, key_mask, moments_fn=None):
    """q: [B, T, H, K]; k: [B, L, H, K]; v: [B, L, H, V]; query t uses pairs j <= offset + t (those of
    key_mask: [B, L] bool, and its own; None means all); `moments_fn` computes
    step 2: `CausalMoments.apply` (None) or a function with its call (triton_backend.py).
    Returns o: [B, T, H, V].

    Heads are independent, so where the pair features and moments of all heads would pass FIT_BYTES (F grows like
    K V: 24,897 floats a token at K = V = 128), the heads are fitted a group at a time, each group under activation
    checkpointing: the forward keeps one group's [L, F] and [T, F] tensors, and the backward recomputes them, group
    by group, for about one more forward. Below FIT_BYTES all heads are fitted at once, as before."""
    B, T, H, K = q.shape
    V = v.shape[-1]
    if T == 0:
        return v.new_zeros(B, 0, H, V)
    fit = functools.partial(_fit_heads, offset=offset, scale=scale, bandwidth=bandwidth, qk_norm=qk_norm, ridge=ridge,
                            chunk_size=chunk_size, key_mask=key_mask, moments_fn=moments_fn)
    per_head = B * (T + k.shape[1]) * sum(pair_widths(K, V)) * q.element_size()
    group = max(1, FIT_BYTES // per_head)
    if group >= H:
        return fit(q, k, v)
    return torch.cat([checkpoint(fit, *(x[:, :, h:h + group] for x in (q, k, v)), use_reentrant=False)
                      for h in range(0, H, group)], dim=2)


def _fit_heads(q, k, v, *, offset, scale, bandwidth, qk_norm, ridge, chunk_size, key_mask, moments_fn):
    """`local_linear_fit` on all the heads it is given at once."""
    B, T, H, K = q.shape
    V = v.shape[-1]
    if qk_norm:
        q, k = F.normalize(q, dim=-1), F.normalize(k, dim=-1)
    q_sim, k_sim, sim_scale = similarity_features(q, k, scale=scale, bandwidth=bandwidth, qk_norm=False)
    q_sim = rearrange(q_sim, "b t h k -> b h t k")
    k_sim = rearrange(k_sim, "b l h k -> b h l k")

    # Step 1: a query-independent origin for the regression (detached: the output does not depend on it).
    k_ref, v_ref = regression_origin(k, v, key_mask)  # [B, 1, H, K], [B, 1, H, V]
    q_c = rearrange(q - k_ref, "b t h k -> b h t k")
    k_c = rearrange(k - k_ref, "b l h k -> b h l k")
    v_c = rearrange(v - v_ref, "b l h v -> b h l v")
    X = pair_features(k_c, v_c)  # [B, H, L, F]

    # Step 2: every query's unnormalised moments over its causal pairs, streamed in blocks of C queries.
    moments = (moments_fn or CausalMoments.apply)(q_sim, k_sim, X, sim_scale, offset, chunk_size, key_mask)  # [B,H,T,F]

    # Step 3: centre and solve one K x K system per query, a block at a time (bounds the temporaries).
    o = torch.cat([
        centred_solve(m, q_blk, K, V, ridge)
        for m, q_blk in zip(moments.split(chunk_size, dim=2), q_c.split(chunk_size, dim=2), strict=True)
    ], dim=2)  # [B, H, T, V]
    return rearrange(o, "b h t v -> b t h v") + v_ref  # [B, T, H, V]


def regression_origin(k: torch.Tensor, v: torch.Tensor, key_mask):
    """The mean key and value of the first ORIGIN_PAIRS pairs that key_mask [B, L] keeps (None: all; zeros if it
    keeps none), detached: k: [B, L, H, K], v: [B, L, H, V] -> [B, 1, H, K], [B, 1, H, V] (module docstring)."""
    kept = torch.ones(k.shape[:2], dtype=torch.bool, device=k.device) if key_mask is None else key_mask  # [B, L]
    w = (kept & (kept.cumsum(dim=1) <= ORIGIN_PAIRS)).to(k.dtype)  # [B, L]
    w = w / w.sum(dim=1, keepdim=True).clamp(min=1)
    # A non-finite pair counts as 0: the output does not depend on the origin, and a NaN origin would make every
    # output NaN (0 * NaN in the weighted sum), not only those of the queries that read the pair.
    k, v = (x.detach().nan_to_num(nan=0.0, posinf=0.0, neginf=0.0) for x in (k, v))
    k_ref = torch.einsum("bl,blhk->bhk", w, k).unsqueeze(1)  # [B, 1, H, K]
    v_ref = torch.einsum("bl,blhv->bhv", w, v).unsqueeze(1)  # [B, 1, H, V]
    return k_ref, v_ref


def _query_blocks(T: int, offset: int, chunk_size: int):
    """(t0, t1, seen): queries t0..t1 - 1 and the pairs 0..seen - 1 the last of them may use."""
    for t0 in range(0, T, chunk_size):
        t1 = min(t0 + chunk_size, T)
        yield t0, t1, offset + t1


class CausalMoments(torch.autograd.Function):
    """moments[t] = sum_{j <= offset + t} exp(scale q_t.k_j - m_t) X_j for q: [B, H, T, K'], k: [B, H, L, K'],
    X: [B, H, L, F] -> [B, H, T, F] (pairs j of key_mask [B, L] bool, and the query's own, if given; None means
    all), with m_t the query's max logit (it cancels after normalisation, so it is a
    constant). One [C, L] block of weights p exists at a time; backward recomputes it (as FlashAttention does)
    instead of saving it, so training memory is O(L F), not O(T^2), and the gradients of the prefix X[:seen] of
    every block accumulate into one buffer. Not twice differentiable."""

    @staticmethod
    def forward(ctx, q, k, X, scale, offset, chunk_size, key_mask):
        moments, maxima = [], []
        for t0, t1, seen in _query_blocks(q.shape[2], offset, chunk_size):
            logits = causal_logits(q[:, :, t0:t1], k[:, :, :seen], scale, offset + t0, key_mask)  # [B, H, c, seen]
            maxima.append(logits.amax(dim=-1, keepdim=True))  # [B, H, c, 1]
            moments.append(torch.exp(logits - maxima[-1]) @ X[:, :, :seen])  # [B, H, c, F]
        ctx.save_for_backward(q, k, X, torch.cat(maxima, dim=2))
        ctx.scale, ctx.offset, ctx.chunk_size, ctx.key_mask = scale, offset, chunk_size, key_mask
        return torch.cat(moments, dim=2)  # [B, H, T, F]

    @staticmethod
    @once_differentiable
    def backward(ctx, grad):
        q, k, X, maxima = ctx.saved_tensors
        grad_q, grad_k, grad_X = torch.zeros_like(q), torch.zeros_like(k), torch.zeros_like(X)
        for t0, t1, seen in _query_blocks(q.shape[2], ctx.offset, ctx.chunk_size):
            logits = causal_logits(q[:, :, t0:t1], k[:, :, :seen], ctx.scale, ctx.offset + t0, ctx.key_mask)
            p = torch.exp(logits - maxima[:, :, t0:t1])  # [B, H, c, seen], recomputed
            g = grad[:, :, t0:t1]  # [B, H, c, F]
            grad_X[:, :, :seen] += p.transpose(-1, -2) @ g
            grad_logits = (g @ X[:, :, :seen].transpose(-1, -2)) * p  # [B, H, c, seen], 0 for future pairs
            grad_q[:, :, t0:t1] = ctx.scale * (grad_logits @ k[:, :, :seen])
            grad_k[:, :, :seen] += ctx.scale * (grad_logits.transpose(-1, -2) @ q[:, :, t0:t1])
        return grad_q, grad_k, grad_X, None, None, None, None


def pair_widths(K: int, V: int) -> tuple[int, int, int, int, int]:
    """The widths of `pair_features`' five parts: 1, K, K (K + 1)/2, V, V K (F is their sum)."""
    return 1, K, K * (K + 1) // 2, V, V * K


def pair_features(k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """k: [B, H, L, K], v: [B, H, L, V] -> [1, k, triu(k k^T), v, vec(v k^T)]: [B, H, L, F],
    F = 1 + K + K (K + 1)/2 + V + V K; one matmul with weights p gives every moment the fit needs."""
    K = k.shape[-1]
    a, b = torch.triu_indices(K, K, device=k.device)
    kk = k[..., a] * k[..., b]  # [B, H, L, K (K + 1)/2], k_a k_b for a <= b
    vk = rearrange(v.unsqueeze(-1) * k.unsqueeze(-2), "b h l v k -> b h l (v k)")  # [B, H, L, V K]
    return torch.cat([torch.ones_like(k[..., :1]), k, kk, v, vk], dim=-1)  # [B, H, L, F]


def _symmetric_index(K: int, device) -> torch.Tensor:
    """[K * K] positions in triu(k k^T) of each entry (a, b) of k k^T, read as (min(a, b), max(a, b))."""
    a, b = torch.triu_indices(K, K, device=device)
    packed = torch.full((K, K), -1, dtype=torch.long, device=device)
    packed[a, b] = torch.arange(a.numel(), device=device)
    return torch.maximum(packed, packed.T).flatten()  # [K * K]


def centred_solve(moments: torch.Tensor, q: torch.Tensor, K: int, V: int, ridge: float) -> torch.Tensor:
    """moments: [B, H, c, F] from `pair_features`; q: [B, H, c, K] in the same origin.
    Returns o = v_bar + C_vk (C_kk + ridge I)^{-1} (q - k_bar): [B, H, c, V] (eq. 54, closed form)."""
    mean = moments[..., 1:] / moments[..., :1]  # [B, H, c, F - 1], weighted means (weights sum to 1)
    k_bar, kk, v_bar, vk = mean.split(pair_widths(K, V)[1:], dim=-1)
    E_kk = kk[..., _symmetric_index(K, q.device)].unflatten(-1, (K, K))  # [B, H, c, K, K], E_w[k k^T]
    C_kk = E_kk - k_bar.unsqueeze(-1) * k_bar.unsqueeze(-2)  # [B, H, c, K, K]
    C_vk = vk.unflatten(-1, (V, K)) - v_bar.unsqueeze(-1) * k_bar.unsqueeze(-2)  # [B, H, c, V, K]
    eye = torch.eye(K, dtype=q.dtype, device=q.device)
    # solve_ex: torch.linalg.solve reads LAPACK's status on the host (a device sync on a GPU, the only one in a
    # local-linear layer's step); the system is SPD (ridge > 0), so the status is read only where values are checked.
    x, info = torch.linalg.solve_ex(C_kk + ridge * eye, (q - k_bar).unsqueeze(-1))  # [B, H, c, K, 1]
    if checks_values(info) and bool((info != 0).any()):
        raise ValueError("local_linear_attn: a query's weighted key covariance plus ridge is singular (non-finite "
                         "inputs?); raise ridge")
    return v_bar + (C_vk @ x).squeeze(-1)  # [B, H, c, V]


def local_polynomial_chunk_core(q, k, v, *, initial_state, degree, scale, bandwidth, qk_norm, ridge, key_mask,
                                chunk_size):
    """Blocks of `chunk_size` queries, each block's fits at once (eqs. 48-49)."""
    k, v, offset = with_cache(k, v, initial_state)
    outputs = []
    for t0, t1, seen in _query_blocks(q.shape[1], offset, chunk_size):
        mask = None if key_mask is None else key_mask[:, :seen]
        outputs.append(local_polynomial_fit(q[:, t0:t1], k[:, :seen], v[:, :seen], offset=offset + t0,
                                            degree=degree, scale=scale, bandwidth=bandwidth, qk_norm=qk_norm,
                                            ridge=ridge, key_mask=mask))  # [B, c, H, V]
    o = torch.cat(outputs, dim=1) if outputs else v.new_zeros(q.shape[0], 0, q.shape[2], v.shape[-1])
    return o, KVState(k, v)


def kernel_chunk_core(q, k, v, *, initial_state, kernel, scale, bandwidth, ridge, chunk_size):
    """One Cholesky of the whole Gram, two triangular solves, a causal contraction (module docstring)."""
    del chunk_size  # one factorisation of the whole Gram
    k, v, offset = with_cache(k, v, initial_state)
    gram = make_gram(kernel, scale, bandwidth, q.shape[-1])
    qh, kh, vh = heads_first(q, k, v)
    P, T = kh.shape[2], qh.shape[2]
    # 1. L L^T = k(K, K) + ridge I; its leading p x p block factorises prefix p
    L = cholesky_or_nan(ridged_gram(gram, kh, ridge))  # [B, H, P, P]; NaN rows from a NaN pair on
    # 2. W = L^{-1} V and U = L^{-1} k(K, Q); row i of each uses pairs <= i only
    W = torch.linalg.solve_triangular(L, vh, upper=False)  # [B, H, P, V]
    U = torch.linalg.solve_triangular(L, gram(kh, qh), upper=False)  # [B, H, P, T]
    # 3. o_t = sum_{i <= offset + t} U[i, t] W[i]
    visible = torch.arange(P, device=q.device)[:, None] <= offset + torch.arange(T, device=q.device)  # [P, T]
    U = torch.where(visible, U, torch.zeros_like(U))  # [B, H, P, T]
    return torch.einsum("bhpt,bhpv->bthv", U, W), KVState(k, v)
