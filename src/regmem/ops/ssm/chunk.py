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

import torch

from regmem.ops.ssm.discretize import Discretization, discretize


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


def _scan(decay: torch.Tensor, inputs: torch.Tensor, h: torch.Tensor) -> torch.Tensor:
    """Step 2: decay, inputs: [C, B, D, N]; h: [B, D, N] -> every state of the chunk H: [C, B, D, N]."""
    H = inputs.clone()
    H[0].addcmul_(decay[0], h)
    for t in range(1, H.shape[0]):
        H[t].addcmul_(decay[t], H[t - 1])
    return H


def _adjoint(decay: torch.Tensor, lam: torch.Tensor, carried: torch.Tensor) -> torch.Tensor:
    """lam: [C, B, D, N] holding C_t gy_t^T on entry, dL/dH_t on return (in place); carried: dL/dH_{C-1} from the
    next chunk [B, D, N]."""
    lam[-1] += carried
    for t in range(lam.shape[0] - 2, -1, -1):
        lam[t].addcmul_(decay[t + 1], lam[t + 1])
    return lam


class _ChunkedScan(torch.autograd.Function):
    """Steps 1-4 over time-major inputs x, delta: [T, B, D]; A: [D, N]; B, C: [T, B, N]; h0: [B, D, N]."""

    @staticmethod
    def forward(ctx, x, delta, A, B, C, h0, discretization, chunk_size):
        y = x.new_empty(x.shape)  # [T, B, D]
        h, starts = h0, []
        for t0 in range(0, x.shape[0], chunk_size):
            w = slice(t0, t0 + chunk_size)
            log_decay, inputs = discretize(x[w], delta[w], A, B[w], discretization)  # [C, B, D, N]
            H = _scan(torch.exp(log_decay), inputs, h)  # [C, B, D, N]
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
        grads = {name: torch.zeros_like(t) for name, t in (("x", x), ("delta", delta), ("A", A), ("B", B), ("C", C))}
        wanted = [n for n, need in zip(("x", "delta", "A", "B"), ctx.needs_input_grad[:4], strict=True) if need]
        for i, t0 in reversed(list(enumerate(range(0, x.shape[0], ctx.chunk_size)))):
            w = slice(t0, t0 + ctx.chunk_size)
            leaves = {"x": x[w], "delta": delta[w], "A": A, "B": B[w]}
            leaves = {n: (t.detach().requires_grad_() if n in wanted else t) for n, t in leaves.items()}
            with torch.enable_grad():  # step 1 again, recorded
                log_decay, inputs = discretize(leaves["x"], leaves["delta"], leaves["A"], leaves["B"],
                                               ctx.discretization)  # [C, B, D, N]
                decay = torch.exp(log_decay)
            H = _scan(decay.detach(), inputs.detach(), starts[i])  # [C, B, D, N], step 2 again
            grads["C"][w] = torch.einsum("cbdn,cbd->cbn", H, gy[w])
            lam = _adjoint(decay.detach(), gy[w].unsqueeze(-1) * C[w].unsqueeze(-2), gh)  # [C, B, D, N]
            g_decay = lam * torch.cat([starts[i].unsqueeze(0), H[:-1]])  # [C, B, D, N], lambda_t ⊙ H_{t-1}
            gh = decay[0].detach() * lam[0]  # [B, D, N], dL/d(starting state)
            if wanted:
                found = torch.autograd.grad((decay, inputs), [leaves[n] for n in wanted], (g_decay, lam))
                for name, grad in zip(wanted, found, strict=True):
                    if name == "A":
                        grads["A"] += grad
                    else:
                        grads[name][w] = grad
        return grads["x"], grads["delta"], grads["A"], grads["B"], grads["C"], gh, None, None
