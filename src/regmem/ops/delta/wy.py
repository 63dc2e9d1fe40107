"""The two sequential pieces of the delta rule's chunk form, each an autograd.Function whose backward is written
out: the inverse of the chunk's unit-lower-triangular UT system and the pass of the state across chunks.

Why by hand: autograd through a loop over N chunks records ~10 small ops per chunk and replays each of them (plus
the engine's bookkeeping) backwards, and the backward of `solve_triangular` runs a second triangular solve. Written
out, the loop does two fused matmuls per chunk each way, everything else is batched over all chunks at once, and the
inverse's backward is two batched matmuls (DERIVATION.md beside this file, "Backward", has the timing).

Math (Yang et al. 2024, arXiv:2406.06484, Sec. 3; DERIVATION.md beside this file). For one chunk n, with S_n the
state entering it, W_n and U'_n its WY factors and d_n its whole-chunk decay:
    U_n = U'_n - W_n S_n,                 S_{n+1} = d_n ⊙ S_n + k_n^T U_n      (k_n the keys decayed to the chunk end).
Backward, from G_{n+1} = dL/dS_{n+1} (the gradient of the final state, then running backwards):
    dU_n <- dU_n + k_n G_{n+1},           G_n = d_n ⊙ G_{n+1} - W_n^T dU_n + dL/dS_n (S_n's own uses),
    dU'_n = dU_n,   dW_n = -dU_n S_n^T,   dk_n = U_n G_{n+1}^T,   dd_n = sum S_n ⊙ G_{n+1},
the last three batched over all chunks after the loop. For T = (I + A)^{-1}, dA = -T^T dT T^T on the strictly
lower triangle (A's only free entries).

Shapes: the scan works chunk-major, [N, R, C, D] with R = B * H rows, so each chunk is one contiguous slice; the
inverse on any [..., C, C].
"""

from __future__ import annotations

import torch


class _UnitLowerInverse(torch.autograd.Function):
    @staticmethod
    def forward(A):
        eye = torch.eye(A.shape[-1], dtype=A.dtype, device=A.device).expand_as(A)
        return torch.linalg.solve_triangular(A, eye, upper=False, unitriangular=True)

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.save_for_backward(output)

    @staticmethod
    def backward(ctx, grad):
        (inverse,) = ctx.saved_tensors
        inverse_t = inverse.transpose(-1, -2)
        return (inverse_t @ grad @ inverse_t).tril_(-1).neg_()


def unit_lower_inverse(A: torch.Tensor) -> torch.Tensor:
    """(I + A)^{-1} for A: [..., C, C] strictly lower triangular (its diagonal and upper triangle are ignored and get
    no gradient)."""
    return _UnitLowerInverse.apply(A)


class _ChunkStateScan(torch.autograd.Function):
    @staticmethod
    def forward(W, U_prime, k_out, decay, S0):
        N = W.shape[0]
        states = S0.new_empty(N + 1, *S0.shape)  # [N + 1, R, K, V], the state entering chunk n and the last one
        states[0] = S0
        pseudo = torch.empty_like(U_prime)  # [N, R, C, V]
        for n in range(N):
            torch.baddbmm(U_prime[n], W[n], states[n], alpha=-1, out=pseudo[n])
            torch.baddbmm(decay[n] * states[n], k_out[n].transpose(-1, -2), pseudo[n], out=states[n + 1])
        return states[:N], pseudo, states[N].clone()

    @staticmethod
    def setup_context(ctx, inputs, output):
        W, _, k_out, decay, _ = inputs
        entering, pseudo, _ = output
        ctx.save_for_backward(W, k_out, decay, entering, pseudo)

    @staticmethod
    def backward(ctx, d_entering, d_pseudo, d_final):
        W, k_out, decay, entering, pseudo = ctx.saved_tensors
        N = W.shape[0]
        grads = entering.new_empty(N + 1, *entering.shape[1:])  # [N + 1, R, K, V]
        grads[N] = 0.0 if d_final is None else d_final  # G_{n+1} leaves chunk n; G_0 is dL/dS0
        d_pseudo = torch.zeros_like(pseudo) if d_pseudo is None else d_pseudo
        dU = torch.empty_like(pseudo)  # [N, R, C, V]
        for n in reversed(range(N)):
            G = grads[n + 1]
            torch.baddbmm(d_pseudo[n], k_out[n], G, out=dU[n])
            carried = decay[n] * G if d_entering is None else torch.addcmul(d_entering[n], decay[n], G)
            torch.baddbmm(carried, W[n].transpose(-1, -2), dU[n], alpha=-1, out=grads[n])
        leaving = grads[1:]  # [N, R, K, V]
        dW = (dU @ entering.transpose(-1, -2)).neg_()  # [N, R, C, K]
        dk = pseudo @ leaving.transpose(-1, -2)  # [N, R, C, K]
        d_decay = (entering * leaving).sum(dim=-1, keepdim=True)  # [N, R, K, 1]
        if decay.shape[-2] == 1:
            d_decay = d_decay.sum(dim=-2, keepdim=True)
        return dW, dU, dk, d_decay, grads[0]


def chunk_state_scan(W, U_prime, k_out, decay, S0):
    """The state across chunks. W: [N, R, C, K]; U_prime: [N, R, C, V]; k_out: [N, R, C, K] (keys decayed to the
    chunk end); decay: [N, R, K | 1, 1] (whole-chunk decay, per key row or scalar); S0: [R, K, V].

    Returns the state entering each chunk [N, R, K, V], the pseudo-values U = U' - W S_in [N, R, C, V] and the state
    after the last chunk [R, K, V]."""
    return _ChunkStateScan.apply(W, U_prime, k_out, decay, S0)
