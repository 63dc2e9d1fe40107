"""Triton kernels for DeltaFormer's erase pass (steps 1-3 of chunk.py) with the softmax erase kernel, forward and
backward. The read (step 4) stays torch: causal softmax attention with the u as values, one SDPA call.

Per (batch, head), rows t at absolute positions S + t erase against the pairs i < S + t they may see (key mask):

    P^g[t, i] = softmax_i(scale w_t^g . k_i),   A = sum_g a_g P^g,   u_t = alpha_t v_t - beta_t sum_i A[t, i] u_i

Forward (`_erase_fwd`, one program per (batch, head, tile of value columns: each column's system is solved
apart), chunks of C rows in order): for each erase vector an online
softmax over the earlier pairs' blocks gives the chunk's erased mass sum_i P^g[t, i] u_i with no [C, L] block held;
the chunk's own C x C block joins the same row normaliser; then (I + beta A_cc) U_c = alpha V_c - beta (erased) by
forward substitution, and U_c is written where the next chunks read it. Saved for the backward: each row's
log-normaliser lse^g_t and E^g_t = sum_i P^g[t, i] u_i.

Backward, with ubar the incoming gradient of every u (the read's and the final state's), the adjoint d of u solves
the transposed system (I + (beta A)^T) d = ubar, in reverse chunk order (`_erase_adjoint`; the cached pairs' rows by
`_cache_adjoint`, in parallel once every new row's d is known). Then, on allowed pairs,

    ds^g[t, i] = -a_g beta_t P^g[t, i] (d_t . u_i - d_t . E^g_t),   dw^g_t = scale sum_i ds^g[t, i] k_i,
    dk_i = scale sum_{t, g} ds^g[t, i] w^g_t                                     (`_erase_dw`, `_erase_dk`)

and in torch: dv = alpha d, dalpha = v . d, dbeta = -d . sum_g a_g E^g, da_g = -sum_t beta_t d_t . E^g_t,
du_cache = d of the cached rows. Every P is recomputed from w, k and lse (FlashAttention-2's recomputation).

Runs and accumulates in the inputs' dtype (float32 or float64 from the op's frame; IEEE float32 products, no TF32).
On CUDA, or on the CPU under Triton's interpreter (TRITON_INTERPRET=1, set before triton is first imported).

Legend: BH = B H programs' (batch, head); T new rows, S cached pairs, L = S + T pairs, G erase vectors, K key dim,
V value dim, C = BLOCK rows or pairs per tile.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl
from torch.autograd.function import once_differentiable

from regmem.ops.common.backends import triton_key_mask

BLOCK = 32  # rows per chunk and pairs per tile
VALUE_TILE = 32  # value columns per program of the sequential kernels (each column's system is solved apart)


@triton.jit
def _probabilities(w, k_ptr, i, kd, pos, row_valid, L, K, mask_ptr, lse, scale, HAS_MASK: tl.constexpr,
                   PRECISION: tl.constexpr):
    """P[t, i] = exp(scale w_t . k_i - lse_t) on the allowed pairs (i < pos_t, the pair kept), 0 elsewhere: w
    [BLOCK, BK] rows, keys i [BLOCK] at k_ptr ([L, K]); lse -inf (a row with no pair) gives a zero row. Returns P
    and the keys it loaded [BLOCK, BK]."""
    kb = tl.load(k_ptr + i[:, None] * K + kd[None, :], mask=(i < L)[:, None] & (kd < K)[None, :], other=0.0)
    s = tl.dot(w, tl.trans(kb), input_precision=PRECISION) * scale
    allowed = (i[None, :] < pos[:, None]) & (i < L)[None, :] & row_valid[:, None]
    if HAS_MASK:
        allowed = allowed & (tl.load(mask_ptr + i, mask=i < L, other=0) != 0)[None, :]
    lse = tl.where(lse == float("-inf"), 0.0, lse)
    return tl.where(allowed, tl.exp(s - lse[:, None]), 0.0), kb


@triton.jit
def _scores(w, k_ptr, i, kd, pos, row_valid, L, K, mask_ptr, scale, HAS_MASK: tl.constexpr,
            PRECISION: tl.constexpr):
    """scale w_t . k_i with -inf on the pairs row t may not erase against."""
    kb = tl.load(k_ptr + i[:, None] * K + kd[None, :], mask=(i < L)[:, None] & (kd < K)[None, :], other=0.0)
    s = tl.dot(w, tl.trans(kb), input_precision=PRECISION) * scale
    allowed = (i[None, :] < pos[:, None]) & (i < L)[None, :] & row_valid[:, None]
    if HAS_MASK:
        allowed = allowed & (tl.load(mask_ptr + i, mask=i < L, other=0) != 0)[None, :]
    return tl.where(allowed, s, float("-inf"))


@triton.jit
def _erase_fwd(k_ptr, w_ptr, v_ptr, alpha_ptr, beta_ptr, a_ptr, mask_ptr, u_ptr, lse_ptr, e_ptr,
               T, S, L, K, V, G, H, scale_ptr, HAS_MASK: tl.constexpr, PRECISION: tl.constexpr, ACC: tl.constexpr,
               BLOCK: tl.constexpr, BK: tl.constexpr, BVT: tl.constexpr):
    scale = tl.load(scale_ptr)  # a tensor in the inputs' dtype: a Python float reaches a kernel as float32
    bh, pid_v = tl.program_id(0).to(tl.int64), tl.program_id(1)  # int64 offsets
    h = bh % H
    kd = tl.arange(0, BK)
    vd = pid_v * BVT + tl.arange(0, BVT)  # this program's tile of the value columns (each solves apart)
    cols = tl.arange(0, BLOCK)
    k_bh = k_ptr + bh * L * K
    u_bh = u_ptr + bh * L * V
    mask_row = mask_ptr + (bh // H) * L
    for c0 in range(0, T, BLOCK):
        r = c0 + tl.arange(0, BLOCK)
        r_valid = r < T
        pos = S + r  # the rows' absolute positions, also the indices of the chunk's own pairs
        erased = tl.zeros([BLOCK, BVT], ACC)
        block = tl.zeros([BLOCK, BLOCK], ACC)
        for g in range(G):
            a_g = tl.load(a_ptr + h * G + g)
            w = tl.load(w_ptr + ((bh * G + g) * T + r[:, None]) * K + kd[None, :],
                        mask=r_valid[:, None] & (kd < K)[None, :], other=0.0)
            m = tl.full([BLOCK], float("-inf"), ACC)
            z = tl.zeros([BLOCK], ACC)
            acc = tl.zeros([BLOCK, BVT], ACC)
            for j0 in range(0, S + c0, BLOCK):  # the earlier pairs, with an online max
                j = j0 + cols
                s = _scores(w, k_bh, j, kd, pos, r_valid, S + c0, K, mask_row, scale, HAS_MASK, PRECISION)
                m_new = tl.maximum(m, tl.max(s, axis=1))
                m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)
                p = tl.exp(s - m_safe[:, None])
                rescale = tl.exp(m - m_safe)
                ub = tl.load(u_bh + j[:, None] * V + vd[None, :], mask=(j < S + c0)[:, None] & (vd < V)[None, :],
                             other=0.0)
                z = z * rescale + tl.sum(p, axis=1)
                acc = acc * rescale[:, None] + tl.dot(p.to(ub.dtype), ub, input_precision=PRECISION)
                m = m_new
            s = _scores(w, k_bh, pos, kd, pos, r_valid, L, K, mask_row, scale, HAS_MASK, PRECISION)  # own block
            m_new = tl.maximum(m, tl.max(s, axis=1))
            m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)
            p = tl.exp(s - m_safe[:, None])
            rescale = tl.exp(m - m_safe)
            z = z * rescale + tl.sum(p, axis=1)
            acc = acc * rescale[:, None]
            z_inv = tl.where(z > 0, 1.0 / tl.where(z > 0, z, 1.0), 0.0)  # a row with no pair erases nothing
            erased += a_g * acc * z_inv[:, None]
            block += a_g * p * z_inv[:, None]
            lse = tl.where(z > 0, m_safe + tl.log(tl.where(z > 0, z, 1.0)), float("-inf"))
            # every value tile computes the same normalisers, bit for bit, and stores them: each program then reads
            # back its own write (below), never one a sibling program has not made yet
            tl.store(lse_ptr + (bh * G + g) * T + r, lse, mask=r_valid)
            tl.store(e_ptr + ((bh * G + g) * T + r[:, None]) * V + vd[None, :], acc * z_inv[:, None],
                     mask=r_valid[:, None] & (vd < V)[None, :])  # the earlier pairs' part of E^g; own block below
        beta = tl.load(beta_ptr + bh * T + r, mask=r_valid, other=0.0)
        alpha = tl.load(alpha_ptr + bh * T + r, mask=r_valid, other=0.0)
        v = tl.load(v_ptr + (bh * T + r[:, None]) * V + vd[None, :], mask=r_valid[:, None] & (vd < V)[None, :],
                    other=0.0)
        rhs = alpha[:, None] * v - beta[:, None] * erased
        block = beta[:, None] * block  # strictly lower: (I + block) U = rhs by forward substitution
        u = rhs
        for n in range(BLOCK):
            row = tl.sum(tl.where(cols[:, None] == n, block, 0.0), axis=0)  # [BLOCK], block[n, :]
            u_n = tl.sum(tl.where(cols[:, None] == n, rhs, 0.0), axis=0) - tl.sum(row[:, None] * u, axis=0)
            u = tl.where(cols[:, None] == n, u_n[None, :], u)
        tl.store(u_bh + pos[:, None] * V + vd[None, :], u.to(u_ptr.dtype.element_ty),
                 mask=r_valid[:, None] & (vd < V)[None, :])
        tl.debug_barrier()  # the next chunks read these rows
        for g in range(G):  # E^g += the own block's part, now that its u are known
            w = tl.load(w_ptr + ((bh * G + g) * T + r[:, None]) * K + kd[None, :],
                        mask=r_valid[:, None] & (kd < K)[None, :], other=0.0)
            lse = tl.load(lse_ptr + (bh * G + g) * T + r, mask=r_valid, other=float("-inf"))
            p, _ = _probabilities(w, k_bh, pos, kd, pos, r_valid, L, K, mask_row, lse, scale, HAS_MASK, PRECISION)
            e_ptrs = e_ptr + ((bh * G + g) * T + r[:, None]) * V + vd[None, :]
            e_mask = r_valid[:, None] & (vd < V)[None, :]
            e = tl.load(e_ptrs, mask=e_mask, other=0.0) + tl.dot(p.to(u.dtype), u, input_precision=PRECISION)
            tl.store(e_ptrs, e, mask=e_mask)


@triton.jit
def _pushed_back(k_bh, w_ptr, lse_ptr, beta_ptr, d_ptr, a_ptr, mask_row, i, vd, first_row, bh, h, T, S, L, K, V, G,
                 scale, HAS_MASK: tl.constexpr, PRECISION: tl.constexpr, ACC: tl.constexpr, BLOCK: tl.constexpr,
                 BK: tl.constexpr, BVT: tl.constexpr):
    """sum over rows t >= first_row of beta_t A[t, i] d_t for the [BLOCK] pairs i, value columns vd: [BLOCK, BVT]."""
    kd = tl.arange(0, BK)
    acc = tl.zeros([BLOCK, BVT], ACC)
    for t0 in range(first_row, T, BLOCK):
        t = t0 + tl.arange(0, BLOCK)
        t_valid = t < T
        beta = tl.load(beta_ptr + bh * T + t, mask=t_valid, other=0.0)
        d = tl.load(d_ptr + (bh * L + S + t[:, None]) * V + vd[None, :], mask=t_valid[:, None] & (vd < V)[None, :],
                    other=0.0)
        bd = beta[:, None] * d
        for g in range(G):
            a_g = tl.load(a_ptr + h * G + g)
            w = tl.load(w_ptr + ((bh * G + g) * T + t[:, None]) * K + kd[None, :],
                        mask=t_valid[:, None] & (kd < K)[None, :], other=0.0)
            lse = tl.load(lse_ptr + (bh * G + g) * T + t, mask=t_valid, other=float("-inf"))
            p, _ = _probabilities(w, k_bh, i, kd, S + t, t_valid, L, K, mask_row, lse, scale, HAS_MASK, PRECISION)
            acc += a_g * tl.dot(tl.trans(p).to(bd.dtype), bd, input_precision=PRECISION)
    return acc


@triton.jit
def _erase_adjoint(k_ptr, w_ptr, beta_ptr, a_ptr, mask_ptr, lse_ptr, ubar_ptr, d_ptr, T, S, L, K, V, G, H, scale_ptr,
                   HAS_MASK: tl.constexpr, PRECISION: tl.constexpr, ACC: tl.constexpr, BLOCK: tl.constexpr,
                   BK: tl.constexpr, BVT: tl.constexpr):
    """d of the new rows: (I + (beta A)^T) d = ubar, chunk by chunk from the last, back substitution within one."""
    scale = tl.load(scale_ptr)  # a tensor in the inputs' dtype: a Python float reaches a kernel as float32
    bh, pid_v = tl.program_id(0).to(tl.int64), tl.program_id(1)  # int64 offsets
    h = bh % H
    kd = tl.arange(0, BK)
    vd = pid_v * BVT + tl.arange(0, BVT)  # the value columns' systems are independent
    cols = tl.arange(0, BLOCK)
    k_bh = k_ptr + bh * L * K
    mask_row = mask_ptr + (bh // H) * L
    chunks = tl.cdiv(T, BLOCK)
    for n in range(chunks):
        c0 = (chunks - 1 - n) * BLOCK
        r = c0 + cols
        r_valid = r < T
        pos = S + r
        later = _pushed_back(k_bh, w_ptr, lse_ptr, beta_ptr, d_ptr, a_ptr, mask_row, pos, vd, c0 + BLOCK, bh, h, T,
                             S, L, K, V, G, scale, HAS_MASK, PRECISION, ACC, BLOCK, BK, BVT)
        block = tl.zeros([BLOCK, BLOCK], ACC)  # beta A on the chunk's own block, rows r, pairs pos
        for g in range(G):
            a_g = tl.load(a_ptr + h * G + g)
            w = tl.load(w_ptr + ((bh * G + g) * T + r[:, None]) * K + kd[None, :],
                        mask=r_valid[:, None] & (kd < K)[None, :], other=0.0)
            lse = tl.load(lse_ptr + (bh * G + g) * T + r, mask=r_valid, other=float("-inf"))
            p, _ = _probabilities(w, k_bh, pos, kd, pos, r_valid, L, K, mask_row, lse, scale, HAS_MASK, PRECISION)
            block += a_g * p
        beta = tl.load(beta_ptr + bh * T + r, mask=r_valid, other=0.0)
        block = beta[:, None] * block
        rhs = tl.load(ubar_ptr + (bh * L + pos[:, None]) * V + vd[None, :], mask=r_valid[:, None] & (vd < V)[None, :],
                      other=0.0) - later
        d = rhs
        for m in range(BLOCK):  # (I + block^T) d = rhs, block strictly lower: from the last row up
            n_ = BLOCK - 1 - m
            col = tl.sum(tl.where(cols[None, :] == n_, block, 0.0), axis=1)  # [BLOCK], block[:, n_]
            d_n = tl.sum(tl.where(cols[:, None] == n_, rhs, 0.0), axis=0) - tl.sum(col[:, None] * d, axis=0)
            d = tl.where(cols[:, None] == n_, d_n[None, :], d)
        tl.store(d_ptr + (bh * L + pos[:, None]) * V + vd[None, :], d.to(d_ptr.dtype.element_ty),
                 mask=r_valid[:, None] & (vd < V)[None, :])
        tl.debug_barrier()  # the earlier chunks read these rows


@triton.jit
def _cache_adjoint(k_ptr, w_ptr, beta_ptr, a_ptr, mask_ptr, lse_ptr, ubar_ptr, d_ptr, T, S, L, K, V, G, H, scale_ptr,
                   HAS_MASK: tl.constexpr, PRECISION: tl.constexpr, ACC: tl.constexpr, BLOCK: tl.constexpr,
                   BK: tl.constexpr, BVT: tl.constexpr):
    """d of the cached pairs: ubar minus what every new row pushes back onto them (no system: no cached row
    erases)."""
    scale = tl.load(scale_ptr)  # a tensor in the inputs' dtype: a Python float reaches a kernel as float32
    pid, bh, pid_v = tl.program_id(0), tl.program_id(1).to(tl.int64), tl.program_id(2)
    vd = pid_v * BVT + tl.arange(0, BVT)
    i = pid * BLOCK + tl.arange(0, BLOCK)
    later = _pushed_back(k_ptr + bh * L * K, w_ptr, lse_ptr, beta_ptr, d_ptr, a_ptr, mask_ptr + (bh // H) * L, i, vd,
                         0, bh, bh % H, T, S, L, K, V, G, scale, HAS_MASK, PRECISION, ACC, BLOCK, BK, BVT)
    ptrs = (bh * L + i[:, None]) * V + vd[None, :]
    io_mask = (i < S)[:, None] & (vd < V)[None, :]
    d = tl.load(ubar_ptr + ptrs, mask=io_mask, other=0.0) - later
    tl.store(d_ptr + ptrs, d.to(d_ptr.dtype.element_ty), mask=io_mask)


@triton.jit
def _logit_grads(w, k_bh, u_bh, i, kd, vd, pos, t_valid, d, e, a_g, beta, L, K, V, mask_row, lse, scale,
                 HAS_MASK: tl.constexpr, PRECISION: tl.constexpr):
    """ds[t, i] = -a_g beta_t P[t, i] (d_t . u_i - d_t . E_t) for rows t (at pos) and pairs i: [BLOCK, BLOCK],
    and the keys k_i it loaded."""
    p, kb = _probabilities(w, k_bh, i, kd, pos, t_valid, L, K, mask_row, lse, scale, HAS_MASK, PRECISION)
    ub = tl.load(u_bh + i[:, None] * V + vd[None, :], mask=(i < L)[:, None] & (vd < V)[None, :], other=0.0)
    du = tl.dot(d, tl.trans(ub), input_precision=PRECISION)  # d_t . u_i
    de = tl.sum(d * e, axis=1)  # d_t . E_t
    return -a_g * beta[:, None] * p * (du - de[:, None]), kb


@triton.jit
def _row_inputs(d_ptr, beta_ptr, bh, t, t_valid, T, S, L, V, vd):
    """d_t [BLOCK, BV] and beta_t [BLOCK] of the rows t."""
    d = tl.load(d_ptr + (bh * L + S + t[:, None]) * V + vd[None, :], mask=t_valid[:, None] & (vd < V)[None, :],
                other=0.0)
    return d, tl.load(beta_ptr + bh * T + t, mask=t_valid, other=0.0)


@triton.jit
def _rows_of(w_ptr, lse_ptr, e_ptr, a_ptr, bh, h, g, t, t_valid, T, K, V, G, kd, vd):
    """Erase vector g's inputs for the rows t: a_g, w^g_t [BLOCK, BK], lse^g_t [BLOCK], E^g_t [BLOCK, BV]."""
    w = tl.load(w_ptr + ((bh * G + g) * T + t[:, None]) * K + kd[None, :], mask=t_valid[:, None] & (kd < K)[None, :],
                other=0.0)
    lse = tl.load(lse_ptr + (bh * G + g) * T + t, mask=t_valid, other=float("-inf"))
    e = tl.load(e_ptr + ((bh * G + g) * T + t[:, None]) * V + vd[None, :], mask=t_valid[:, None] & (vd < V)[None, :],
                other=0.0)
    return tl.load(a_ptr + h * G + g), w, lse, e


@triton.jit
def _erase_dw(k_ptr, w_ptr, u_ptr, beta_ptr, a_ptr, mask_ptr, lse_ptr, e_ptr, d_ptr, dw_ptr, T, S, L, K, V, G, H,
              scale_ptr, HAS_MASK: tl.constexpr, PRECISION: tl.constexpr, ACC: tl.constexpr, BLOCK: tl.constexpr,
              BK: tl.constexpr, BV: tl.constexpr):
    """dw^g for one block of rows: scale sum over the pairs they see of ds k."""
    scale = tl.load(scale_ptr)  # a tensor in the inputs' dtype: a Python float reaches a kernel as float32
    pid, bh = tl.program_id(0), tl.program_id(1).to(tl.int64)
    h = bh % H
    kd = tl.arange(0, BK)
    vd = tl.arange(0, BV)
    t = pid * BLOCK + tl.arange(0, BLOCK)
    t_valid = t < T
    k_bh = k_ptr + bh * L * K
    mask_row = mask_ptr + (bh // H) * L
    d, beta = _row_inputs(d_ptr, beta_ptr, bh, t, t_valid, T, S, L, V, vd)
    row_mask = t_valid[:, None] & (kd < K)[None, :]
    stop = tl.minimum(S + (pid + 1) * BLOCK, L)  # the last row sees the pairs before it
    for g in range(G):
        a_g, w, lse, e = _rows_of(w_ptr, lse_ptr, e_ptr, a_ptr, bh, h, g, t, t_valid, T, K, V, G, kd, vd)
        acc = tl.zeros([BLOCK, BK], ACC)
        for j0 in range(0, stop, BLOCK):
            j = j0 + tl.arange(0, BLOCK)
            ds, kb = _logit_grads(w, k_bh, u_ptr + bh * L * V, j, kd, vd, S + t, t_valid, d, e, a_g, beta, L, K, V,
                                  mask_row, lse, scale, HAS_MASK, PRECISION)  # kb: the keys it loaded, reused
            acc += tl.dot(ds.to(kb.dtype), kb, input_precision=PRECISION)
        tl.store(dw_ptr + ((bh * G + g) * T + t[:, None]) * K + kd[None, :], (acc * scale).to(dw_ptr.dtype.element_ty),
                 mask=row_mask)


@triton.jit
def _erase_dk(k_ptr, w_ptr, u_ptr, beta_ptr, a_ptr, mask_ptr, lse_ptr, e_ptr, d_ptr, dk_ptr, T, S, L, K, V, G, H,
              scale_ptr, HAS_MASK: tl.constexpr, PRECISION: tl.constexpr, ACC: tl.constexpr, BLOCK: tl.constexpr,
              BK: tl.constexpr, BV: tl.constexpr):
    """dk (erase part) for one block of pairs: scale sum over the rows that see them and every g of ds^T w."""
    scale = tl.load(scale_ptr)  # a tensor in the inputs' dtype: a Python float reaches a kernel as float32
    pid, bh = tl.program_id(0), tl.program_id(1).to(tl.int64)
    h = bh % H
    kd = tl.arange(0, BK)
    vd = tl.arange(0, BV)
    i = pid * BLOCK + tl.arange(0, BLOCK)
    k_bh = k_ptr + bh * L * K
    mask_row = mask_ptr + (bh // H) * L
    acc = tl.zeros([BLOCK, BK], ACC)
    first = tl.maximum(pid * BLOCK - S, 0) // BLOCK * BLOCK  # the first block of rows that sees a pair of i
    for t0 in range(first, T, BLOCK):
        t = t0 + tl.arange(0, BLOCK)
        t_valid = t < T
        d, beta = _row_inputs(d_ptr, beta_ptr, bh, t, t_valid, T, S, L, V, vd)
        for g in range(G):
            a_g, w, lse, e = _rows_of(w_ptr, lse_ptr, e_ptr, a_ptr, bh, h, g, t, t_valid, T, K, V, G, kd, vd)
            ds, _ = _logit_grads(w, k_bh, u_ptr + bh * L * V, i, kd, vd, S + t, t_valid, d, e, a_g, beta, L, K, V,
                                 mask_row, lse, scale, HAS_MASK, PRECISION)
            acc += tl.dot(tl.trans(ds).to(w.dtype), w, input_precision=PRECISION)
    tl.store(dk_ptr + (bh * L + i[:, None]) * K + kd[None, :], (acc * scale).to(dk_ptr.dtype.element_ty),
             mask=(i < L)[:, None] & (kd < K)[None, :])


class TritonErase(torch.autograd.Function):
    """u_all = the cached u followed by the new rows' u (steps 1-3 of chunk.py, softmax erase kernel).

    k_all: [B, H, L, K]; w: [B, H, G, T, K]; v: [B, H, T, V]; alpha, beta: [B, H, T]; erase_weights: [H, G];
    u_cache: [B, H, S, V] (S = L - T, may be 0); key_mask: [B, L] bool or None -> u_all [B, H, L, V].
    Not twice differentiable."""

    @staticmethod
    def forward(ctx, k_all, w, v, alpha, beta, erase_weights, u_cache, scale, key_mask):
        B, H, L, K = k_all.shape
        G, T, V = w.shape[2], w.shape[3], v.shape[-1]
        S = L - T
        k_all, w, v, alpha, beta, a = (x.contiguous() for x in (k_all, w, v, alpha, beta, erase_weights))
        u_all = v.new_empty(B, H, L, V)
        u_all[:, :, :S] = u_cache
        lse = v.new_empty(B, H, G, T)
        E = v.new_empty(B, H, G, T, V)
        mask = triton_key_mask(key_mask, v)
        scale = torch.full((1,), float(scale), dtype=v.dtype, device=v.device)  # a kernel would round a float to fp32
        options = _options(v, key_mask is not None, K, V)
        if T and B * H:  # no zero-sized grids (no new rows: u_all is the cache)
            _erase_fwd[(B * H, triton.cdiv(V, options["BVT"]))](k_all, w, v, alpha, beta, a, mask, u_all, lse, E, T,
                                                               S, L, K, V, G, H, scale, **_sequential(options))
        ctx.save_for_backward(k_all, w, v, alpha, beta, a, mask, u_all, lse, E, scale)
        ctx.options = options
        return u_all

    @staticmethod
    @once_differentiable
    def backward(ctx, ubar):
        k_all, w, v, alpha, beta, a, mask, u_all, lse, E, scale = ctx.saved_tensors
        B, H, L, K = k_all.shape
        G, T, V = w.shape[2], w.shape[3], v.shape[-1]
        S = L - T
        ubar = ubar.contiguous()
        if not (T and B * H):  # no new rows: the cache's u passes its gradient through, nothing else has one
            zero = torch.zeros_like
            return (zero(k_all), zero(w), zero(v), zero(alpha), zero(beta), zero(a), ubar[:, :, :S], None, None)
        d = torch.empty_like(u_all)  # the adjoint of every u
        sizes = (T, S, L, K, V, G, H, scale)
        tiles = triton.cdiv(V, ctx.options["BVT"])
        _erase_adjoint[(B * H, tiles)](k_all, w, beta, a, mask, lse, ubar, d, *sizes, **_sequential(ctx.options))
        if S:
            _cache_adjoint[(triton.cdiv(S, ctx.options["BLOCK"]), B * H, tiles)](
                k_all, w, beta, a, mask, lse, ubar, d, *sizes, **_sequential(ctx.options))
        dw, dk = torch.empty_like(w), torch.empty_like(k_all)
        full = {k: v for k, v in ctx.options.items() if k != "BVT"}  # dw, dk: d . u over all value columns at once
        block = ctx.options["BLOCK"]
        _erase_dw[(triton.cdiv(T, block), B * H)](k_all, w, u_all, beta, a, mask, lse, E, d, dw, *sizes, **full)
        _erase_dk[(triton.cdiv(L, block), B * H)](k_all, w, u_all, beta, a, mask, lse, E, d, dk, *sizes, **full)
        d_new = d[:, :, S:]  # [B, H, T, V]
        de = torch.einsum("bhtv,bhgtv->bhgt", d_new, E)  # d_t . E^g_t
        grad_beta = -torch.einsum("hg,bhgt->bht", a, de)
        grad_a = -torch.einsum("bht,bhgt->hg", beta, de)
        return (dk, dw, alpha.unsqueeze(-1) * d_new, (v * d_new).sum(-1), grad_beta, grad_a, d[:, :, :S], None, None)


def _options(x: torch.Tensor, has_mask: bool, K: int, V: int) -> dict:
    """The kernels' compile-time arguments for this call (BVT: the sequential kernels' value tile, BV: all V). Two
    pipeline stages, not Triton's default three: with three, `_erase_dk` at K = V = 256 in float32 needs more shared
    memory than an H100 block has (234 KB against 227 KB; 168 KB with two, measured by compiling for sm_90)."""
    BV = max(16, triton.next_power_of_2(V))
    return dict(HAS_MASK=has_mask, PRECISION="ieee", ACC=tl.float64 if x.dtype == torch.float64 else tl.float32,
                BLOCK=BLOCK, BK=max(16, triton.next_power_of_2(K)), BV=BV, BVT=min(BV, VALUE_TILE), num_stages=2)


def _sequential(options: dict) -> dict:
    """The options of the sequential kernels (forward, adjoints): the value tile, not the whole width."""
    return {k: v for k, v in options.items() if k != "BV"}
