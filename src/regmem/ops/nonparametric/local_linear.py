"""Local linear attention: softmax attention plus a local regression correction toward the query.

Implements eqs. (52)-(54) of *Test-time regression* (Wang, Shi, Fox; arXiv:2501.12352, Sec. 4 Vignette 4;
ttr.md §2.2 L22, §5.1 T18-T19, §8 "Nonparametric layers"). Query q_t fits a linear function around itself,
m(k) = M^[0] + M^[1](k - q_t), to the pairs i <= t by weighted least squares with the softmax weights
w_i = s(k_i, q_t) / sum_j s(k_j, q_t), and answers with the intercept M^[0] (eq. 52). With
    k_bar = sum_i w_i k_i,  v_bar = sum_i w_i v_i,
    C_kk  = sum_i w_i (k_i - k_bar)(k_i - k_bar)^T   [K, K],
    C_vk  = sum_i w_i (v_i - v_bar)(k_i - k_bar)^T   [V, K],
the fit with a ridge on the slope block only is
    M^[1] = C_vk (C_kk + ridge I)^{-1},    o_t = M^[0] = v_bar - M^[1] d_bar = v_bar + M^[1] (q_t - k_bar)   (eq. 54)
with d_bar = k_bar - q_t. Why this is eq. (52) with `ridge` added to the slope block of X^T W X: the normal
equations read [1, d_bar^T; d_bar, sum w d d^T + ridge I] [M^[0]^T; M^[1]^T] = [v_bar^T; sum w d v^T]
(sum w = 1). The first row is eq. (54) exactly, because the intercept is not penalised; substituting it into the
second gives (C_kk + ridge I) M^[1]^T = C_kv, as C_kk and C_kv are invariant to shifting keys by q_t. So
eq. (52), eq. (54) and the closed form are one estimator for every ridge > 0 (tested, T18). It reproduces affine
maps v = A k + c exactly as ridge -> 0 (T19), which softmax attention (p = 0) does not.

Padding: `key_mask` [B, S + T] (bool, True = the pair takes part) removes pairs from every query's regression,
except that a query always sees its own pair, so no fit is empty (a padded query regresses on itself alone and
returns its own value); the outputs of the other queries equal a call on the sequence without those pairs.

With `qk_norm=True`, q and k are L2-normalised for the weights *and* for the regression: the fit lives in the
normalised key space, so an affine map is reproduced in that space (v = A k/||k|| + c gives A q/||q|| + c).

Forms:
  - reference: eq. (52) literally, one (1 + K)-dim weighted least squares per query (local_polynomial.py).
  - chunk: streams the moments sum p, sum p k, sum p k k^T, sum p v, sum p v k^T as one matmul per block of
    C queries against all their causal pairs, p = exp(logit - max) with the block's exact max (a constant: it
    cancels after normalisation); then centres and solves one K x K system per query. Memory, per (batch, head):
    the pair features [L, F] with F = 1 + K + K(K + 1)/2 + V + V K (k k^T is symmetric: its upper triangle only),
    the moments [T, F], and for the block in flight [C, L] weights and [C, K, K] systems; never a [T, T, K]
    tensor. Under no_grad that is O(L F + C L). Training keeps the same: the backward recomputes each block's
    weights instead of saving them (FlashAttention-style, `CausalMoments`), so autograd holds O(L F + T K^2),
    not O(T^2). Time O(T L F) for the moments (about 3x that for forward + backward) plus O(T K^3) for the solves.
    This streams over query blocks rather than key blocks: each block sees all its keys at once, so its max is
    exact and no online rescaling is needed, and its matmul is one [C, L] x [L, F] product.
  - recurrent: one query at a time against the growing cache, the chunk core with T = 1 (the decode step:
    O(S F) time per token, as every pair's weight depends on the query).

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

Legend: B batch, T new tokens, S cached pairs, L = S + T all pairs, H heads, K key dim, V value dim, C chunk
size (queries per block), F pair-feature width. State: `KVState(k [B, L, H, K], v [B, L, H, V])`.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from einops import rearrange
from torch.autograd.function import once_differentiable

from regmem.ops.common import check_chunk_size, dispatch
from regmem.ops.nonparametric.frame import run_nonparametric
from regmem.ops.nonparametric.local_polynomial import check_ridge, local_polynomial_core
from regmem.ops.nonparametric.similarity import causal_logits, check_similarity, similarity_features

ORIGIN_PAIRS = 16  # the regression origin is the mean of the first 16 pairs (module docstring, Numerics)


def local_linear_attn(
    q, k, v, *, scale=None, bandwidth=None, qk_norm=False, ridge=1e-3, initial_state=None,
    output_final_state=False, mode="chunk", chunk_size=64, cu_seqlens=None, key_mask=None,
):
    """Local linear attention, eqs. (52)-(54) of *Test-time regression* (arXiv:2501.12352, Sec. 4 Vignette 4):
    query-similarity weights, locally linear regressor, analytic weighted least squares, returning the intercept
        o_t = v_bar + C_vk (C_kk + ridge I)^{-1} (q_t - k_bar).

    Args:
        q, k: [B, T, H, K]; v: [B, T, H, V], one floating dtype (bf16/fp16/fp32 compute in float32, float64 in
            float64; the output has the input dtype).
        scale: exponential kernel s = exp(scale q.k); None means K ** -0.5. Exclusive with `bandwidth`.
        bandwidth: Gaussian kernel s = exp(-||k - q||^2 / bandwidth) (eq. 51), a positive float, or None.
        qk_norm: L2-normalise q and k, for the weights and for the regression (which then lives in the
            normalised key space).
        ridge: positive float added to C_kk, the slope block of X^T W X (with weights normalised to sum 1);
            the intercept stays unpenalised. At 0 the system is singular while t <= K.
        initial_state: KVState(k [N, S, H, K], v [N, S, H, V]), pairs seen before q, or None.
        output_final_state: return KVState(k [N, S + T, H, K], v [N, S + T, H, V]) in the compute dtype.
        mode: "reference" | "recurrent" | "chunk" (default). The chunk and recurrent forms are differentiable
            once (their backward recomputes the weights), the reference form any number of times.
        chunk_size: queries per block C of the chunk form (a power of two).
        cu_seqlens: [N + 1] integer offsets of packed sequences (B = 1); then no initial or final state.
        key_mask: [B, S + T] bool (S cached, T new pairs; True = the pair takes part) or None for all pairs.
            A masked pair is used by no query but its own, so no fit is empty (a padded query regresses on
            itself). Not with `cu_seqlens`.

    Returns:
        o: [B, T, H, V] in the input dtype, and the final KVState or None.
    """
    check_chunk_size(chunk_size)
    forms = {
        "reference": local_linear_attn_reference,
        "recurrent": local_linear_attn_recurrent,
        "chunk": local_linear_attn_chunk,
    }
    return dispatch(
        mode, forms, chunk_size, q=q, k=k, v=v, scale=scale, bandwidth=bandwidth, qk_norm=qk_norm, ridge=ridge,
        initial_state=initial_state, output_final_state=output_final_state, cu_seqlens=cu_seqlens, key_mask=key_mask,
    )


def _run(core, q, k, v, *, scale, bandwidth, qk_norm, ridge, initial_state, output_final_state, cu_seqlens,
         key_mask, **options):
    check_similarity(scale, bandwidth, qk_norm)
    check_ridge(ridge)
    return run_nonparametric(
        core, q, k, v, initial_state=initial_state, output_final_state=output_final_state, cu_seqlens=cu_seqlens,
        scale=scale, bandwidth=bandwidth, qk_norm=qk_norm, ridge=float(ridge), key_mask=key_mask, **options,
    )


def local_linear_attn_reference(q, k, v, *, scale=None, bandwidth=None, qk_norm=False, ridge=1e-3,
                                initial_state=None, output_final_state=False, cu_seqlens=None, key_mask=None):
    """Eq. (52) literally: per query the (1 + K)-dim weighted least squares with design rows [1, (k_i - q_t)^T]
    and W_t = diag(softmax weights), solved for all queries at once. Materialises [B, H, T, S + T, 1 + K]."""
    return _run(local_polynomial_core, q, k, v, scale=scale, bandwidth=bandwidth, qk_norm=qk_norm, ridge=ridge,
                initial_state=initial_state, output_final_state=output_final_state, cu_seqlens=cu_seqlens,
                key_mask=key_mask, degree=1)


def local_linear_attn_chunk(q, k, v, *, scale=None, bandwidth=None, qk_norm=False, ridge=1e-3,
                            initial_state=None, output_final_state=False, chunk_size=64, cu_seqlens=None,
                            key_mask=None):
    """The streamed-moments form (bounded memory, see the module docstring); blocks of `chunk_size` queries."""
    check_chunk_size(chunk_size)
    return _run(local_linear_chunk_core, q, k, v, scale=scale, bandwidth=bandwidth, qk_norm=qk_norm, ridge=ridge,
                initial_state=initial_state, output_final_state=output_final_state, cu_seqlens=cu_seqlens,
                key_mask=key_mask, chunk_size=chunk_size)


def local_linear_attn_recurrent(q, k, v, *, scale=None, bandwidth=None, qk_norm=False, ridge=1e-3,
                                initial_state=None, output_final_state=False, cu_seqlens=None, key_mask=None):
    """Token by token against the growing cache (the decode form): each query's closed form over all pairs."""
    return _run(local_linear_recurrent_core, q, k, v, scale=scale, bandwidth=bandwidth, qk_norm=qk_norm,
                ridge=ridge, initial_state=initial_state, output_final_state=output_final_state,
                cu_seqlens=cu_seqlens, key_mask=key_mask)


def local_linear_recurrent_core(q, k, v, *, offset, scale, bandwidth, qk_norm, ridge, key_mask):
    """q: [B, T, H, K]; k: [B, S + T, H, K]; v: [B, S + T, H, V]; key_mask: [B, S + T] bool or None.
    Returns o: [B, T, H, V]."""
    outputs = []
    for t in range(q.shape[1]):
        seen = offset + t + 1  # pairs 0..offset + t are in the cache when query t arrives
        outputs.append(local_linear_chunk_core(
            q[:, t:t + 1], k[:, :seen], v[:, :seen], offset=offset + t, scale=scale, bandwidth=bandwidth,
            qk_norm=qk_norm, ridge=ridge, chunk_size=1, key_mask=None if key_mask is None else key_mask[:, :seen],
        ))  # [B, 1, H, V]
    if not outputs:
        return v.new_zeros(q.shape[0], 0, q.shape[2], v.shape[-1])
    return torch.cat(outputs, dim=1)  # [B, T, H, V]


def local_linear_chunk_core(q, k, v, *, offset, scale, bandwidth, qk_norm, ridge, chunk_size, key_mask):
    """q: [B, T, H, K]; k: [B, S + T, H, K]; v: [B, S + T, H, V]; query t uses pairs j <= offset + t (those of
    key_mask: [B, S + T] bool, and its own; None means all). Returns o: [B, T, H, V]."""
    B, T, H, K = q.shape
    V = v.shape[-1]
    if T == 0:
        return v.new_zeros(B, 0, H, V)
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
    moments = CausalMoments.apply(q_sim, k_sim, X, sim_scale, offset, chunk_size, key_mask)  # [B, H, T, F]

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
    k_ref = torch.einsum("bl,blhk->bhk", w, k.detach()).unsqueeze(1)  # [B, 1, H, K]
    v_ref = torch.einsum("bl,blhv->bhv", w, v.detach()).unsqueeze(1)  # [B, 1, H, V]
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
    k_bar, kk, v_bar, vk = mean.split([K, K * (K + 1) // 2, V, V * K], dim=-1)
    E_kk = kk[..., _symmetric_index(K, q.device)].unflatten(-1, (K, K))  # [B, H, c, K, K], E_w[k k^T]
    C_kk = E_kk - k_bar.unsqueeze(-1) * k_bar.unsqueeze(-2)  # [B, H, c, K, K]
    C_vk = vk.unflatten(-1, (V, K)) - v_bar.unsqueeze(-1) * k_bar.unsqueeze(-2)  # [B, H, c, V, K]
    eye = torch.eye(K, dtype=q.dtype, device=q.device)
    x = torch.linalg.solve(C_kk + ridge * eye, (q - k_bar).unsqueeze(-1))  # [B, H, c, K, 1]
    return v_bar + (C_vk @ x).squeeze(-1)  # [B, H, c, V]
