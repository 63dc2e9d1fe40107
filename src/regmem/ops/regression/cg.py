"""MesaNet's conjugate-gradient solver for the least-squares chunk form (`solver="cg"`), differentiated implicitly.

For every token t, z_t ~= A_t^{-1} q_t with A_t = R_t + diag(ridge), by `steps` iterations of conjugate gradient
from the Jacobi start x_0 = q_t / diag(A_t) (von Oswald et al., *MesaNet*, arXiv:2506.05233, Sec. 3). A_t is never
formed: for token t of chunk n, with R_n the statistic entering the chunk and b_t the log decay from the chunk start,

    A_t x = e^{b_t} R_n x + sum_{s <= t in chunk} L_ts (k_s . x) k_s + ridge * x,     L_ts = prod_{j=s+1}^t e^{g_j},

which for a chunk's rows X is e^{b} (X R_n) + ((X K^T) * L) K + ridge * X: three matmuls per iteration.

The backward is implicit (MesaNet's too): for z = A^{-1} q, the adjoint a = A^{-1} dz is one more solve with the same
operator (A is symmetric) and the same number of steps, dq = a, and the gradient reaching k, g, R_n and the ridge is
that of the surrogate -sum_t a_t . (A_t z_t) with a and z held fixed (d(A^{-1} q) = -A^{-1} dA z). It is the
gradient of the exact solution at the computed z: equal to the gradient through the iterations once CG has converged,
and it stores no iterate (memory O(T F) rather than O(steps T F)). The solve itself is a function argument, so the
torch loop here and the Triton kernel of triton_cg.py share everything else.

Legend: B batch, T time, H heads, F feature dim, V value dim, N chunks, C chunk size.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from regmem.ops.common import merge_chunks, segsum, split_chunks, suffix_exclusive

# solve(rhs, k, g, R_in, ridge, steps) -> x, every argument chunked as in `operator_pieces`, without autograd
Solve = Callable[[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, int], torch.Tensor]


def conjugate_gradient(q, k, g, R0, ridge, chunk_size: int, steps: int, solve: Solve | None = None):
    """z_t ~= (R_t + diag(ridge))^{-1} q_t for every t. q, k: [B, T, H, F]; g: None or [B, T, H]; R0: [B, H, F, F];
    ridge: [H, F]; `solve`: the iterations (None: `torch_solve`). Returns z: [B, T, H, F] and R_T: [B, H, F, F]."""
    T = q.shape[1]
    k_c, g_c, R_in, R_T = operator_pieces(k, g, R0, chunk_size)
    z = ImplicitSolve.apply(split_chunks(q, chunk_size), k_c, g_c, R_in, ridge, steps, solve or torch_solve)
    return merge_chunks(z, T), R_T


def operator_pieces(k, g, R0, chunk_size: int):
    """The chunked operator, differentiably: k: [B, H, N, C, F] (zero tokens past T), g: [B, H, N, C] the log
    gates (0 past T), R_in: [B, H, N, F, F] the symmetric part of the statistic entering each
    chunk (the read-out solves with sym(R), state.ridge_matrix), and R_T: [B, H, F, F] after the last token."""
    if g is None:
        g = k.new_zeros(k.shape[:3])  # [B, T, H], uniform weights
    k = split_chunks(k, chunk_size)  # [B, H, N, C, F]
    g = split_chunks(g, chunk_size)  # [B, H, N, C], padded with g = 0
    decay_out = torch.exp(suffix_exclusive(g, dim=-1)).unsqueeze(-1)  # [B, H, N, C, 1], s -> chunk end
    decay_total = torch.exp(g.sum(dim=-1))[..., None, None]  # [B, H, N, 1, 1]
    # R_{n+1} = e^{b_C} R_n + K^T diag(e^{b_out}) K, one step per chunk
    U = (k * decay_out).transpose(-1, -2) @ k  # [B, H, N, F, F]
    entering, R_n = [], R0
    for decay_n, U_n in zip(decay_total.unbind(dim=2), U.unbind(dim=2), strict=True):
        entering.append(0.5 * (R_n + R_n.transpose(-1, -2)))
        R_n = decay_n * R_n + U_n
    return k, g, torch.stack(entering, dim=2), R_n


def rows_operator(k, g, R_in, ridge):
    """x -> rows (R_t + diag(ridge)) x_t on chunked rows x: [B, H, N, C, F], and the diagonal of every A_t
    [B, H, N, C, F] (the Jacobi start's denominator). Arguments as `operator_pieces` returns them; ridge: [H, F]."""
    L, decay_in = chunk_decays(g)
    decay_in = decay_in.unsqueeze(-1)  # [B, H, N, C, 1]
    ridge = ridge[:, None, None, :]  # [H, 1, 1, F]

    def apply(x):
        return decay_in * (x @ R_in) + ((x @ k.transpose(-1, -2)) * L) @ k + ridge * x

    diagonal = decay_in * torch.diagonal(R_in, dim1=-2, dim2=-1).unsqueeze(3) + L @ (k * k) + ridge
    return apply, diagonal


def chunk_decays(g):
    """g: [B, H, N, C] log gates -> L: [B, H, N, C, C] with L_ts = prod_{j=s+1}^t e^{g_j} (0 above the diagonal;
    each exponent a direct sum of its gates) and e^{b_t}: [B, H, N, C], the decay from the chunk start to t."""
    return torch.exp(segsum(g)), torch.exp(g.cumsum(dim=-1))


def torch_solve(rhs, k, g, R_in, ridge, steps: int):
    """`steps` of conjugate gradient for every row of rhs: [B, H, N, C, F], from x_0 = rhs / diag(A_t).

    A row stops (alpha = beta = 0) once its squared residual is below eps^(3/2) of where it started: every division
    then has a denominator bounded away from 0 (p.Ap >= ridge |p|^2 >= ridge |r|^2), so rows that converge early
    (t < F) neither divide 0 by 0 nor lose their gradient to it."""
    apply, diagonal = rows_operator(k, g, R_in, ridge)
    x = rhs / diagonal
    r = rhs - apply(x)
    p, rr = r, (r * r).sum(-1, keepdim=True)  # rr: [B, H, N, C, 1]
    floor = stop_fraction(rhs.dtype) * rr
    for _ in range(steps):
        active = rr > floor
        Ap = apply(p)
        pAp = (p * Ap).sum(-1, keepdim=True)
        alpha = torch.where(active, rr / torch.where(active, pAp, 1.0), 0.0)
        x = x + alpha * p
        r = r - alpha * Ap
        rr_next = (r * r).sum(-1, keepdim=True)
        p = r + torch.where(active, rr_next / torch.where(active, rr, 1.0), 0.0) * p
        rr = rr_next
    return x


def stop_fraction(dtype: torch.dtype) -> float:
    """The squared-residual fraction below which a row's iterations stop: (eps^(3/4))^2."""
    return (torch.finfo(dtype).eps ** 0.75) ** 2


class ImplicitSolve(torch.autograd.Function):
    """x = solve(rhs) ~= A^{-1} rhs with the implicit backward of the module docstring. No double backward."""

    @staticmethod
    def forward(ctx, rhs, k, g, R_in, ridge, steps, solve):
        x = solve(rhs, k, g, R_in, ridge, steps)
        ctx.save_for_backward(k, g, R_in, ridge, x)
        ctx.steps, ctx.solve = steps, solve
        return x

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, dx):
        k, g, R_in, ridge, x = ctx.saved_tensors
        a = ctx.solve(dx.contiguous(), k, g, R_in, ridge, ctx.steps)  # A^{-1} dx: the adjoint, and dq
        wanted = ctx.needs_input_grad[1:5]
        grads = [None] * 4
        if any(wanted):
            with torch.enable_grad():
                leaves = [t.detach().requires_grad_(w) for t, w in zip((k, g, R_in, ridge), wanted, strict=True)]
                apply, _ = rows_operator(*leaves)
                surrogate = -(a * apply(x)).sum()
                found = torch.autograd.grad(surrogate, [t for t in leaves if t.requires_grad])
            it = iter(found)
            grads = [next(it) if w else None for w in wanted]
        return (a, *grads, None, None)
