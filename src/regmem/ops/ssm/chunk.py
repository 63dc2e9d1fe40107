"""Chunk form of the selective scan: Mamba-1's scan over chunks of time, every [D, N] intermediate kept for one
chunk only, the state h: [B, D, N] carried between chunks (Gu & Dao, arXiv:2312.00752, Sec. 3.3.2: the scan is
fused so that the expanded [T, D, N] tensors never exist at once, and recomputed in the backward pass).

Per chunk of C tokens, time-major ([C, B, D, N]: one token's slice is contiguous):
  1. discretise the chunk: Abar_t = exp(delta_t A) and Bbar_t x_t (discretize.py);
  2. scan within the chunk from the carried state, in place: H_t = Abar_t ⊙ H_{t-1} + Bbar_t x_t;
  3. read out y_t = C_t^T H_t;
  4. carry H_{C-1} into the next chunk, and keep the chunk's starting state for the backward pass.
The backward pass runs the chunks in reverse: it recomputes steps 1-2 from the kept starting state, runs the adjoint
recurrence lambda_t = C_t gy_t^T + Abar_{t+1} ⊙ lambda_{t+1} (lambda = dL/dH_t, seeded by the gradient of the
carried state), and hands dL/dAbar_t = lambda_t ⊙ H_{t-1} and dL/d(Bbar_t x_t) = lambda_t to autograd through step 1.
Memory: the inputs, one starting state per chunk ([T/C, B, D, N]) and one chunk's intermediates.

Why a scan and not GLA's matrix form (DERIVATION.md): with one value per channel, the chunk-parallel matrix form
costs C times the recurrence's O(T D N) work, and the factored form exp(G_t) sum_s exp(-G_s) Bbar_s x_s of the
cumulative log-decay G overflows once a chunk decays past exp(-88) in float32.

Legend: B batch, T time, D channels, N state size, C chunk size.
"""

from __future__ import annotations

from typing import NamedTuple

import torch

from regmem.ops.ssm.discretize import Discretization


def selective_scan_chunk_core(x, delta, B, C, *, initial_state, A, discretization: Discretization,
                              chunk_size: int = 64):
    """x, delta: [B, T, D]; B, C: [B, T, N]; A: [D, N]; initial_state: [B, D, N] or None. Returns y: [B, T, D] and
    h_T: [B, D, N]."""
    Bsz, T, D = x.shape
    h0 = initial_state if initial_state is not None else x.new_zeros(Bsz, D, A.shape[1])  # [B, D, N]
    if T == 0:
        return x.new_zeros(Bsz, 0, D), h0
    x, delta, B, C = (t.transpose(0, 1).contiguous() for t in (x, delta, B, C))  # [T, B, D] and [T, B, N]
    y, h = _ChunkedScan.apply(x, delta, A, B, C, h0, discretization, chunk_size)
    return y.transpose(0, 1), h  # [B, T, D], [B, D, N]


class _APieces(NamedTuple):
    """A's pieces for one call, [D, N] each: A, 1/A with 0 where A = 0, and the indicator of A = 0 (ZOH's limit)."""

    A: torch.Tensor
    inv_A: torch.Tensor
    is_zero: torch.Tensor


def _a_pieces(A: torch.Tensor) -> _APieces:
    is_zero = A == 0
    return _APieces(A, torch.where(is_zero, torch.zeros_like(A), 1 / A), is_zero.to(A.dtype))


def _discretize(x, delta, B, a: _APieces, discretization: Discretization):
    """Step 1 for x, delta: [C, B, D]; B: [C, B, N] -> (Abar, Bbar / B, Bbar x): [C, B, D, N] ([C, B, D, 1] for
    the "simple" weight delta). The same values as discretize.py with fewer passes: ZOH's weight is
    expm1(delta A) / A, and delta where A = 0."""
    step = delta.unsqueeze(-1)  # [C, B, D, 1]
    z = step * a.A  # [C, B, D, N], log Abar
    if discretization == "simple":
        return z.exp_(), step, (step * x.unsqueeze(-1)) * B.unsqueeze(-2)
    em = z.expm1_()
    weight = torch.addcmul(step * a.is_zero, em, a.inv_A)  # [C, B, D, N]
    return em.add_(1), weight, (weight * x.unsqueeze(-1)).mul_(B.unsqueeze(-2))


def _discretization_grads(x, delta, B, a: _APieces, decay, weight, lam, g_decay, discretization: Discretization):
    """Step 1 backwards: dL/dx, dL/ddelta, dL/dB of the chunk and its term of dL/dA [D, N], from lam = dL/d(Bbar x)
    and g_decay = dL/dAbar (both [C, B, D, N], overwritten). With z = delta A: dAbar/dz = Abar; ZOH's weight w has
    dw/ddelta = Abar and dw/dA = (delta Abar - w) / A, whose limit at A = 0 is delta^2 / 2."""
    step = delta.unsqueeze(-1)  # [C, B, D, 1]
    g_z = g_decay.mul_(decay)  # [C, B, D, N], dL/dz through Abar
    g_xB = lam * weight  # [C, B, D, N], dL/d(x_d B_n)
    gx = torch.einsum("cbdn,cbn->cbd", g_xB, B)
    gB = torch.einsum("cbdn,cbd->cbn", g_xB, x)
    g_w = lam.mul_(x.unsqueeze(-1)).mul_(B.unsqueeze(-2))  # [C, B, D, N], dL/dw
    if discretization == "simple":
        return gx, torch.addcmul(g_w, g_z, a.A).sum(-1), gB, (g_z * step).sum((0, 1))
    g_delta = torch.addcmul(g_w * decay, g_z, a.A).sum(-1)  # [C, B, D]
    dw_dA = torch.addcmul(weight, step, decay, value=-1).mul_(-a.inv_A)  # [C, B, D, N], (delta Abar - w) / A
    dw_dA.addcmul_(step.square(), a.is_zero, value=0.5)
    gA = torch.addcmul(g_w.mul_(dw_dA), g_z, step).sum((0, 1))  # [D, N]
    return gx, g_delta, gB, gA


def _scan(decay: torch.Tensor, inputs: torch.Tensor, h: torch.Tensor) -> torch.Tensor:
    """Step 2 in place on inputs: decay, inputs: [C, B, D, N]; h: [B, D, N] -> every state of the chunk H."""
    states, decays = inputs.unbind(0), decay.unbind(0)  # one token's [B, D, N] views, taken once
    states[0].addcmul_(decays[0], h)
    for t in range(1, len(states)):
        states[t].addcmul_(decays[t], states[t - 1])
    return inputs


def _adjoint(decay: torch.Tensor, lam: torch.Tensor, carried: torch.Tensor) -> torch.Tensor:
    """lam: [C, B, D, N] holding C_t gy_t^T on entry, dL/dH_t on return (in place); carried: dL/dH_{C-1} from the
    next chunk [B, D, N]."""
    grads, decays = lam.unbind(0), decay.unbind(0)
    grads[-1].add_(carried)
    for t in range(len(grads) - 2, -1, -1):
        grads[t].addcmul_(decays[t + 1], grads[t + 1])
    return lam


class _ChunkedScan(torch.autograd.Function):
    """Steps 1-4 over time-major inputs x, delta: [T, B, D]; A: [D, N]; B, C: [T, B, N]; h0: [B, D, N]."""

    @staticmethod
    def forward(ctx, x, delta, A, B, C, h0, discretization, chunk_size):
        a = _a_pieces(A)
        y = x.new_empty(x.shape)  # [T, B, D]
        h, starts = h0, []
        for t0 in range(0, x.shape[0], chunk_size):
            w = slice(t0, t0 + chunk_size)
            decay, _, inputs = _discretize(x[w], delta[w], B[w], a, discretization)  # [C, B, D, N]
            H = _scan(decay, inputs, h)  # [C, B, D, N]
            y[w] = torch.einsum("cbdn,cbn->cbd", H, C[w])
            starts.append(h)
            h = H[-1].clone()  # a copy: a view would keep the whole chunk alive
        ctx.save_for_backward(x, delta, A, B, C, torch.stack(starts))  # starts: [T/C, B, D, N]
        ctx.discretization, ctx.chunk_size = discretization, chunk_size
        return y, h

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, gy, gh):
        x, delta, A, B, C, starts = ctx.saved_tensors
        a = _a_pieces(A)
        gx, g_delta, gB, gC = (torch.empty_like(t) for t in (x, delta, B, C))
        gA = torch.zeros_like(A)
        for i, t0 in reversed(list(enumerate(range(0, x.shape[0], ctx.chunk_size)))):
            w = slice(t0, t0 + ctx.chunk_size)
            decay, weight, inputs = _discretize(x[w], delta[w], B[w], a, ctx.discretization)  # step 1 again
            H = _scan(decay, inputs, starts[i])  # [C, B, D, N], step 2 again
            gC[w] = torch.einsum("cbdn,cbd->cbn", H, gy[w])
            lam = _adjoint(decay, gy[w].unsqueeze(-1) * C[w].unsqueeze(-2), gh)  # [C, B, D, N], dL/dH_t
            g_decay = torch.empty_like(lam)  # lambda_t ⊙ H_{t-1}
            torch.mul(lam[1:], H[:-1], out=g_decay[1:])
            torch.mul(lam[0], starts[i], out=g_decay[0])
            gh = decay[0] * lam[0]  # [B, D, N], dL/d(starting state)
            gx[w], g_delta[w], gB[w], gA_chunk = _discretization_grads(
                x[w], delta[w], B[w], a, decay, weight, lam, g_decay, ctx.discretization)
            gA += gA_chunk
        return gx, g_delta, gA, gB, gC, gh, None, None
