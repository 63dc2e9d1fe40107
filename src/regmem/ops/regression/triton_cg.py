"""A Triton kernel for the least-squares chunk form's conjugate-gradient solve (`torch_solve` of cg.py): every CG
iteration of a block of tokens in one program, the operator applied from registers.

For a block of BLOCK_T tokens t of chunk n (rows of the chunk's [C, F] arrays), the operator of cg.py is

    A_t x = e^{b_t} (x R_n) + sum_{s <= t in chunk} L_ts (x . k_s) k_s + ridge * x,

with b the log decay from the chunk start and L the chunk's [C, C] decay matrix, both taken in torch exactly as the
torch loop takes them (`chunk_decays`), so the two read the same weights (a -inf gate, a hard reset, included). One
program loads R_n once and runs all `steps` iterations for its tokens, walking the chunk's earlier key blocks (at
most C / BLOCK_T) inside each iteration; nothing is written until the solution. The torch loop writes and reads
[T, F] arrays about fifteen times per iteration. The stopping rule is the torch loop's (a row stops once its
squared residual falls below eps^(3/2) of where it started), so both give the same iterates to rounding; the
backward (cg.py's ImplicitSolve) calls this kernel once more for the adjoint.

Everything runs and accumulates in the inputs' dtype (the frame hands float32 or float64), with IEEE products in
float32 (no TF32), so the kernel equals the torch loop to rounding. Runs on CUDA, or on the CPU under Triton's
interpreter (`TRITON_INTERPRET=1`), which is how `make test` checks it.

Legend: BH batch x heads, N chunks, C chunk size, F feature dim (<= MAX_F: R_n is held whole), BLOCK_* tile sizes.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from regmem.ops.regression.cg import chunk_decays, stop_fraction

BLOCK_T = 16  # tokens per program (tl.dot's smallest tile)
MAX_F = 128  # R_n [F, F] is held whole: 64 KB in float32, 128 KB in float64


@triton.jit
def _apply(x, R, decay, ridge, k_ptr, l_ptr, t, f, f_ok, j, F, C: tl.constexpr, PRECISION: tl.constexpr,
           BLOCK_T: tl.constexpr):
    """Rows A_t x_t for the block's tokens t (x: [BLOCK_T, BLOCK_F]): e^{b_t} x R + ridge x plus the chunk's key
    blocks 0..j (k_ptr at the chunk's keys [C, F], l_ptr at its decay matrix L [C, C], zero above the diagonal)."""
    out = decay[:, None] * tl.dot(x, R, input_precision=PRECISION) + ridge[None, :] * x
    for jj in range(0, j + 1):
        s = jj * BLOCK_T + tl.arange(0, BLOCK_T)
        kb = tl.load(k_ptr + s[:, None] * F + f[None, :], mask=f_ok[None, :], other=0.0)  # [BLOCK_T, BLOCK_F]
        weights = tl.load(l_ptr + t[:, None] * C + s[None, :])  # [BLOCK_T, BLOCK_T]
        scores = tl.dot(x, tl.trans(kb), input_precision=PRECISION) * weights
        out += tl.dot(scores, kb, input_precision=PRECISION)
    return out


@triton.jit
def _cg_solve(rhs_ptr, k_ptr, l_ptr, decay_ptr, r_ptr, ridge_ptr, floor_ptr, x_ptr, N, H, F, steps,
              PRECISION: tl.constexpr, C: tl.constexpr, BLOCK_T: tl.constexpr, BLOCK_F: tl.constexpr):
    """x ~= A^{-1} rhs for the BLOCK_T tokens of one program: `steps` of CG from the Jacobi start. One grid axis
    (axis 0 takes 2^31 - 1 programs; the others 65,535): program = (bh, chunk n, block j) in that order."""
    pid = tl.program_id(0).to(tl.int64)  # int64: BH N C F may pass 2^31
    blocks = C // BLOCK_T
    chunk, j = pid // blocks, pid % blocks  # chunk = bh N + n
    bh = chunk // N
    t = j * BLOCK_T + tl.arange(0, BLOCK_T)  # rows within the chunk
    f = tl.arange(0, BLOCK_F)
    f_ok = f < F
    rows = chunk * C * F + t[:, None] * F + f[None, :]
    k_chunk, l_chunk = k_ptr + chunk * C * F, l_ptr + chunk * C * C
    rhs = tl.load(rhs_ptr + rows, mask=f_ok[None, :], other=0.0)  # [BLOCK_T, BLOCK_F]
    R = tl.load(r_ptr + chunk * F * F + f[:, None] * F + f[None, :], mask=f_ok[:, None] & f_ok[None, :],
                other=0.0)  # [BLOCK_F, BLOCK_F], the statistic entering the chunk
    ridge = tl.load(ridge_ptr + (bh % H) * F + f, mask=f_ok, other=0.0)
    decay = tl.load(decay_ptr + chunk * C + t)  # e^{b_t}

    # The Jacobi start x_0 = rhs / diag(A_t); padded feature columns divide by 1.
    diagonal = decay[:, None] * tl.load(r_ptr + chunk * F * F + f * (F + 1), mask=f_ok, other=0.0)[None, :]
    diagonal += ridge[None, :]
    for jj in range(0, j + 1):
        s = jj * BLOCK_T + tl.arange(0, BLOCK_T)
        kb = tl.load(k_chunk + s[:, None] * F + f[None, :], mask=f_ok[None, :], other=0.0)
        weights = tl.load(l_chunk + t[:, None] * C + s[None, :])
        diagonal += tl.dot(weights, kb * kb, input_precision=PRECISION)
    x = rhs / tl.where(f_ok[None, :], diagonal, 1.0)

    r = rhs - _apply(x, R, decay, ridge, k_chunk, l_chunk, t, f, f_ok, j, F, C, PRECISION, BLOCK_T)
    p = r
    rr = tl.sum(r * r, axis=1)  # [BLOCK_T]
    floor = tl.load(floor_ptr) * rr
    for _ in range(steps):
        active = rr > floor
        Ap = _apply(p, R, decay, ridge, k_chunk, l_chunk, t, f, f_ok, j, F, C, PRECISION, BLOCK_T)
        pAp = tl.sum(p * Ap, axis=1)
        alpha = tl.where(active, rr / tl.where(active, pAp, 1.0), 0.0)
        x += alpha[:, None] * p
        r -= alpha[:, None] * Ap
        rr_next = tl.sum(r * r, axis=1)
        p = r + tl.where(active, rr_next / tl.where(active, rr, 1.0), 0.0)[:, None] * p
        rr = rr_next
    tl.store(x_ptr + rows, x.to(x_ptr.dtype.element_ty), mask=f_ok[None, :])


def solve(rhs, k, g, R_in, ridge, steps: int) -> torch.Tensor:
    """`torch_solve`'s contract (cg.py): rhs, k: [B, H, N, C, F]; g: [B, H, N, C] log gates; R_in: [B, H, N, F, F]
    symmetric; ridge: [H, F]; C a multiple of BLOCK_T, F <= MAX_F. Returns x: [B, H, N, C, F]."""
    B, H, N, C, F = rhs.shape
    if C % BLOCK_T or F > MAX_F:
        raise ValueError(f"the Triton CG kernel takes a chunk that is a multiple of {BLOCK_T} and F <= {MAX_F}, got "
                         f"chunk {C} and F {F}")
    rhs, k, R_in, ridge = (t.contiguous() for t in (rhs, k, R_in, ridge))
    L, decay = chunk_decays(g)  # the torch loop's own decays, so both read the same weights
    floor = torch.full((1,), stop_fraction(rhs.dtype), dtype=rhs.dtype, device=rhs.device)
    x = torch.empty_like(rhs)
    _cg_solve[(B * H * N * (C // BLOCK_T),)](rhs, k, L.contiguous(), decay.contiguous(), R_in, ridge, floor, x, N,
                                             H, F, steps, **_options(rhs, C, F))
    return x


def _options(rhs: torch.Tensor, C: int, F: int) -> dict:
    """The kernel's compile-time arguments for this call. Eight warps: with four, R_n [128, 128] and the iterates
    need more than 255 registers a thread and spill (ptxas for sm_90, float32: 255 registers and a 568-byte stack;
    with eight, 240 and none; float64 with eight still spills about 1 KB). One pipeline stage: the loops have
    little load latency to hide next to R_n's footprint."""
    return dict(PRECISION="ieee", C=C, BLOCK_T=BLOCK_T, BLOCK_F=max(16, triton.next_power_of_2(F)), num_warps=8,
                num_stages=1)
