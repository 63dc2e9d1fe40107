"""Triton kernels for local linear attention's streamed moments (`CausalMoments` of chunk.py), forward and backward.

    moments[t] = sum_{j allowed for t} exp(scale q_t.k_j - m_t) X_j,     m_t = max_j allowed scale q_t.k_j

for q: [BH, T, D], k: [BH, L, D], X: [BH, L, F] (the pair features of chunk.py, F = 1 + K + K(K + 1)/2 + V + VK),
pair j allowed for query t (absolute position offset + t) when j <= offset + t and, with a key mask, the pair takes
part or is the query's own (`allowed_pairs`). This is FlashAttention's loop without the final division: one program
per (block of queries, tile of F) walks the key blocks with an online max, so neither the [T, L] weights nor the
[T, F] moments of more than one tile are ever held. The max m_t is stored for the backward; it cancels after the
fit's normalisation, so, as in `CausalMoments`, the backward treats it as a constant:

    dX_j = sum_t p[t, j] g_t,     ds[t, j] = p[t, j] (g_t . X_j),     dq_t = scale sum_j ds[t, j] k_j,
    dk_j = scale sum_t ds[t, j] q_t,     p[t, j] = exp(scale q_t.k_j - m_t) on allowed pairs, 0 elsewhere.

Three backward kernels, each recomputing p from q, k and m (FlashAttention-2's recomputation): dX per (key block,
F tile), dk per key block and dq per query block, the last two summing g_t . X_j over F tiles. Cost: the forward's
T L F multiply-adds once each for dX, dk and dq (the torch backward needs two, but holds a [C, L] block per step).

Everything runs and accumulates in the inputs' dtype (the op's frame hands float32 or float64), with IEEE products
in float32 (no TF32), so the kernels equal the torch form to rounding. Runs on CUDA, or on the CPU under Triton's
interpreter (`TRITON_INTERPRET=1`, set before triton is first imported), which is how `make test` checks them.

Legend: B batch, H heads, BH = B H, T queries, L pairs (cached + new), D key width (K, or K + 1 for a Gaussian
kernel's features), F pair-feature width; BLOCK_* the tile sizes.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl
from torch.autograd.function import once_differentiable

from regmem.ops.common.backends import triton_key_mask

BLOCK_T = 32  # queries per program
BLOCK_L = 32  # pairs per step of a program's loop
BLOCK_F = 64  # pair-feature columns per tile


@triton.jit
def _weights(q, k_ptr, j, d, pos, t_valid, L, D, mask_ptr, scale, HAS_MASK: tl.constexpr, PRECISION: tl.constexpr):
    """Logits of a [BLOCK_T] query block against the [BLOCK_L] pairs j (keys at k_ptr: [L, D]), and those keys:
    scale q k^T with disallowed logits -inf. `pos`: the queries' absolute positions; `t_valid`: real queries."""
    kb = tl.load(k_ptr + j[:, None] * D + d[None, :], mask=(j < L)[:, None] & (d < D)[None, :],
                 other=0.0)  # [BLOCK_L, BLOCK_D]
    s = tl.dot(q, tl.trans(kb), input_precision=PRECISION) * scale  # [BLOCK_T, BLOCK_L]
    allowed = (j[None, :] <= pos[:, None]) & (j < L)[None, :] & t_valid[:, None]
    if HAS_MASK:
        kept = tl.load(mask_ptr + j, mask=j < L, other=0) != 0  # [BLOCK_L]
        allowed = allowed & (kept[None, :] | (j[None, :] == pos[:, None]))
    return tl.where(allowed, s, float("-inf")), kb


@triton.jit
def _moments_fwd(q_ptr, k_ptr, x_ptr, mask_ptr, out_ptr, max_ptr, T, L, D, F, H, offset, scale_ptr,
                 HAS_MASK: tl.constexpr, PRECISION: tl.constexpr, ACC: tl.constexpr, BLOCK_T: tl.constexpr,
                 BLOCK_L: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK_F: tl.constexpr):
    scale = tl.load(scale_ptr)  # a tensor in the inputs' dtype: a Python float reaches a kernel as float32
    pid_t, pid_f, bh = tl.program_id(0), tl.program_id(1), tl.program_id(2).to(tl.int64)  # int64: BH L F > 2^31
    t = pid_t * BLOCK_T + tl.arange(0, BLOCK_T)
    d = tl.arange(0, BLOCK_D)
    f = pid_f * BLOCK_F + tl.arange(0, BLOCK_F)
    pos = offset + t
    t_valid = t < T
    q = tl.load(q_ptr + bh * T * D + t[:, None] * D + d[None, :], mask=t_valid[:, None] & (d < D)[None, :],
                other=0.0)  # [BLOCK_T, BLOCK_D]
    mask_row = mask_ptr + (bh // H) * L
    m = tl.full([BLOCK_T], float("-inf"), ACC)
    acc = tl.zeros([BLOCK_T, BLOCK_F], ACC)
    stop = tl.minimum(offset + (pid_t + 1) * BLOCK_T, L)  # the last query of the block sees pairs < stop
    for j0 in range(0, stop, BLOCK_L):
        j = j0 + tl.arange(0, BLOCK_L)
        s, _ = _weights(q, k_ptr + bh * L * D, j, d, pos, t_valid, L, D, mask_row, scale, HAS_MASK, PRECISION)
        m_new = tl.maximum(m, tl.max(s, axis=1))
        m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)  # a row with nothing allowed yet keeps zeros
        p = tl.exp(s - m_safe[:, None])  # [BLOCK_T, BLOCK_L]
        xb = tl.load(x_ptr + bh * L * F + j[:, None] * F + f[None, :], mask=(j < L)[:, None] & (f < F)[None, :],
                     other=0.0)  # [BLOCK_L, BLOCK_F]
        acc = acc * tl.exp(m - m_safe)[:, None] + tl.dot(p.to(xb.dtype), xb, input_precision=PRECISION)
        m = m_new
    out_mask = t_valid[:, None] & (f < F)[None, :]
    tl.store(out_ptr + bh * T * F + t[:, None] * F + f[None, :], acc.to(out_ptr.dtype.element_ty), mask=out_mask)
    if pid_f == 0:
        tl.store(max_ptr + bh * T + t, m, mask=t_valid)


@triton.jit
def _query_block(q_ptr, max_ptr, bh, t, d, T, D):
    """The queries t [BLOCK_T, BLOCK_D] (zeros past T and D), which of them are real, and their maxima m_t."""
    t_valid = t < T
    q = tl.load(q_ptr + bh * T * D + t[:, None] * D + d[None, :], mask=t_valid[:, None] & (d < D)[None, :],
                other=0.0)
    return q, t_valid, tl.load(max_ptr + bh * T + t, mask=t_valid, other=0.0)


@triton.jit
def _moments_bwd_x(q_ptr, k_ptr, g_ptr, mask_ptr, max_ptr, dx_ptr, T, L, D, F, H, offset, scale_ptr,
                   HAS_MASK: tl.constexpr, PRECISION: tl.constexpr, ACC: tl.constexpr, BLOCK_T: tl.constexpr,
                   BLOCK_L: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK_F: tl.constexpr):
    """dX for one (key block, F tile): sum over the queries that see the block of p^T g."""
    scale = tl.load(scale_ptr)  # a tensor in the inputs' dtype: a Python float reaches a kernel as float32
    pid_j, pid_f, bh = tl.program_id(0), tl.program_id(1), tl.program_id(2).to(tl.int64)
    j = pid_j * BLOCK_L + tl.arange(0, BLOCK_L)
    d = tl.arange(0, BLOCK_D)
    f = pid_f * BLOCK_F + tl.arange(0, BLOCK_F)
    mask_row = mask_ptr + (bh // H) * L
    acc = tl.zeros([BLOCK_L, BLOCK_F], ACC)
    first = tl.maximum(pid_j * BLOCK_L - offset, 0) // BLOCK_T * BLOCK_T  # the first query block that sees j
    for t0 in range(first, T, BLOCK_T):
        t = t0 + tl.arange(0, BLOCK_T)
        q, t_valid, m = _query_block(q_ptr, max_ptr, bh, t, d, T, D)
        s, _ = _weights(q, k_ptr + bh * L * D, j, d, offset + t, t_valid, L, D, mask_row, scale, HAS_MASK, PRECISION)
        p = tl.exp(s - m[:, None])  # 0 where not allowed
        g = tl.load(g_ptr + bh * T * F + t[:, None] * F + f[None, :], mask=t_valid[:, None] & (f < F)[None, :],
                    other=0.0)  # [BLOCK_T, BLOCK_F]
        acc += tl.dot(tl.trans(p.to(g.dtype)), g, input_precision=PRECISION)
    tl.store(dx_ptr + bh * L * F + j[:, None] * F + f[None, :], acc.to(dx_ptr.dtype.element_ty),
             mask=(j < L)[:, None] & (f < F)[None, :])


@triton.jit
def _logit_grads(g_ptr, x_ptr, t, j, t_valid, L, F, p, PRECISION: tl.constexpr, ACC: tl.constexpr,
                 BLOCK_T: tl.constexpr, BLOCK_L: tl.constexpr, BLOCK_F: tl.constexpr):
    """ds = p * (g X^T) for a [BLOCK_T] query block and [BLOCK_L] pair block, g X^T summed over F tiles."""
    gx = tl.zeros([BLOCK_T, BLOCK_L], ACC)
    for f0 in range(0, F, BLOCK_F):
        f = f0 + tl.arange(0, BLOCK_F)
        g = tl.load(g_ptr + t[:, None] * F + f[None, :], mask=t_valid[:, None] & (f < F)[None, :],
                    other=0.0)  # [BLOCK_T, BLOCK_F]
        xb = tl.load(x_ptr + j[:, None] * F + f[None, :], mask=(j < L)[:, None] & (f < F)[None, :], other=0.0)
        gx += tl.dot(g, tl.trans(xb), input_precision=PRECISION)
    return p * gx


@triton.jit
def _moments_bwd_k(q_ptr, k_ptr, x_ptr, g_ptr, mask_ptr, max_ptr, dk_ptr, T, L, D, F, H, offset, scale_ptr,
                   HAS_MASK: tl.constexpr, PRECISION: tl.constexpr, ACC: tl.constexpr, BLOCK_T: tl.constexpr,
                   BLOCK_L: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK_F: tl.constexpr):
    """dk for one key block: scale sum over the queries that see it of ds^T q."""
    scale = tl.load(scale_ptr)  # a tensor in the inputs' dtype: a Python float reaches a kernel as float32
    pid_j, bh = tl.program_id(0), tl.program_id(1).to(tl.int64)
    j = pid_j * BLOCK_L + tl.arange(0, BLOCK_L)
    d = tl.arange(0, BLOCK_D)
    mask_row = mask_ptr + (bh // H) * L
    acc = tl.zeros([BLOCK_L, BLOCK_D], ACC)
    first = tl.maximum(pid_j * BLOCK_L - offset, 0) // BLOCK_T * BLOCK_T
    for t0 in range(first, T, BLOCK_T):
        t = t0 + tl.arange(0, BLOCK_T)
        q, t_valid, m = _query_block(q_ptr, max_ptr, bh, t, d, T, D)
        s, _ = _weights(q, k_ptr + bh * L * D, j, d, offset + t, t_valid, L, D, mask_row, scale, HAS_MASK, PRECISION)
        ds = _logit_grads(g_ptr + bh * T * F, x_ptr + bh * L * F, t, j, t_valid, L, F, tl.exp(s - m[:, None]),
                          PRECISION, ACC, BLOCK_T, BLOCK_L, BLOCK_F)
        acc += tl.dot(tl.trans(ds.to(q.dtype)), q, input_precision=PRECISION)
    tl.store(dk_ptr + bh * L * D + j[:, None] * D + d[None, :], (acc * scale).to(dk_ptr.dtype.element_ty),
             mask=(j < L)[:, None] & (d < D)[None, :])


@triton.jit
def _moments_bwd_q(q_ptr, k_ptr, x_ptr, g_ptr, mask_ptr, max_ptr, dq_ptr, T, L, D, F, H, offset, scale_ptr,
                   HAS_MASK: tl.constexpr, PRECISION: tl.constexpr, ACC: tl.constexpr, BLOCK_T: tl.constexpr,
                   BLOCK_L: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK_F: tl.constexpr):
    """dq for one query block: scale sum over the pairs it sees of ds k."""
    scale = tl.load(scale_ptr)  # a tensor in the inputs' dtype: a Python float reaches a kernel as float32
    pid_t, bh = tl.program_id(0), tl.program_id(1).to(tl.int64)
    t = pid_t * BLOCK_T + tl.arange(0, BLOCK_T)
    d = tl.arange(0, BLOCK_D)
    q, t_valid, m = _query_block(q_ptr, max_ptr, bh, t, d, T, D)
    mask_row = mask_ptr + (bh // H) * L
    acc = tl.zeros([BLOCK_T, BLOCK_D], ACC)
    stop = tl.minimum(offset + (pid_t + 1) * BLOCK_T, L)
    for j0 in range(0, stop, BLOCK_L):
        j = j0 + tl.arange(0, BLOCK_L)
        s, kb = _weights(q, k_ptr + bh * L * D, j, d, offset + t, t_valid, L, D, mask_row, scale, HAS_MASK, PRECISION)
        ds = _logit_grads(g_ptr + bh * T * F, x_ptr + bh * L * F, t, j, t_valid, L, F, tl.exp(s - m[:, None]),
                          PRECISION, ACC, BLOCK_T, BLOCK_L, BLOCK_F)
        acc += tl.dot(ds.to(kb.dtype), kb, input_precision=PRECISION)
    tl.store(dq_ptr + bh * T * D + t[:, None] * D + d[None, :], (acc * scale).to(dq_ptr.dtype.element_ty),
             mask=t_valid[:, None] & (d < D)[None, :])


class TritonMoments(torch.autograd.Function):
    """`CausalMoments` (chunk.py) by the kernels above: the same call, q: [B, H, T, D], k: [B, H, L, D],
    X: [B, H, L, F], key_mask: [B, L] bool or None -> moments [B, H, T, F]; `chunk_size` is unused (the kernels
    tile by BLOCK_*). Not twice differentiable."""

    @staticmethod
    def forward(ctx, q, k, X, scale, offset, chunk_size, key_mask):
        del chunk_size
        B, H, T, D = q.shape
        L, F = X.shape[2], X.shape[3]
        q, k, X = (x.reshape(B * H, x.shape[2], x.shape[3]).contiguous() for x in (q, k, X))
        mask = triton_key_mask(key_mask, q)
        scale = torch.full((1,), float(scale), dtype=X.dtype, device=X.device)  # a kernel would round a float to fp32
        out = X.new_empty(B * H, T, F)
        maxima = X.new_empty(B * H, T)
        grid = (triton.cdiv(T, BLOCK_T), triton.cdiv(F, BLOCK_F), B * H)
        _moments_fwd[grid](q, k, X, mask, out, maxima, T, L, D, F, H, offset, scale, **_options(q, key_mask, D))
        ctx.save_for_backward(q, k, X, maxima, mask, scale)
        ctx.shape, ctx.offset, ctx.has_mask = (B, H, T, L, D, F), offset, key_mask is not None
        return out.reshape(B, H, T, F)

    @staticmethod
    @once_differentiable
    def backward(ctx, grad):
        q, k, X, maxima, mask, scale = ctx.saved_tensors
        B, H, T, L, D, F = ctx.shape
        g = grad.reshape(B * H, T, F).contiguous()
        dq, dk, dX = torch.empty_like(q), torch.empty_like(k), torch.empty_like(X)
        options = _options(q, mask if ctx.has_mask else None, D)
        args = (T, L, D, F, H, ctx.offset, scale)
        _moments_bwd_x[(triton.cdiv(L, BLOCK_L), triton.cdiv(F, BLOCK_F), B * H)](
            q, k, g, mask, maxima, dX, *args, **options)
        _moments_bwd_k[(triton.cdiv(L, BLOCK_L), B * H)](q, k, X, g, mask, maxima, dk, *args, **options)
        _moments_bwd_q[(triton.cdiv(T, BLOCK_T), B * H)](q, k, X, g, mask, maxima, dq, *args, **options)
        return (dq.reshape(B, H, T, D), dk.reshape(B, H, L, D), dX.reshape(B, H, L, F), None, None, None, None)


def _options(q: torch.Tensor, key_mask: torch.Tensor | None, D: int) -> dict:
    """The kernels' compile-time arguments for this call. Two pipeline stages, not Triton's default three: with three,
    float64 tiles at a key width of 129-256 (a Gaussian kernel's K + 1) need more shared memory than an H100 block has
    (238 KB against 227 KB, measured by compiling for sm_90)."""
    return dict(HAS_MASK=key_mask is not None, PRECISION="ieee",
                ACC=tl.float64 if q.dtype == torch.float64 else tl.float32, BLOCK_T=BLOCK_T, BLOCK_L=BLOCK_L,
                BLOCK_D=max(16, triton.next_power_of_2(D)), BLOCK_F=BLOCK_F, num_stages=2)
