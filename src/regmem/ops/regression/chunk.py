"""Chunk-parallel form of the exact least-squares memory: the weighted key covariance R_t of every token chunkwise,
one batched Cholesky solve per token for z_t = (R_t + diag(ridge))^{-1} q_t, and the read-out o_t = S_t^T z_t as
gated linear attention with queries z.

Implements the parallel computation of *Test-time regression* (Wang, Shi, Fox; arXiv:2501.12352, Sec. 4 Vignettes
1-2, eqs. (11), (15), (25): "a batch of T independent linear systems"), with MesaNet's non-decaying ridge (von
Oswald et al., arXiv:2506.05233). For token t of chunk n, R_n the statistic entering the chunk and b_t the log decay
from the chunk start to t:
    R_t = e^{b_t} R_n + sum_{s<=t in chunk} L_ts k_s k_s^T,    L_ts = prod_{j=s+1}^t exp(g_j)   (one matmul of the
                                                                 [C, C] decay matrix with the [C, F*F] outer products)
    z_t = cholesky_solve(q_t, cholesky(R_t + diag(ridge)))     (backward by implicit differentiation, CholeskySolve)
    o_t = S_t^T z_t = gated linear attention of (z, k, v, g)    (S_t is never formed)
Every exponent is a direct sum of the gates it spans (ops/common/decay.py), never a difference of long cumsums.
Memory is O(B H T F^2): R_t and its Cholesky factor are materialised for every token. solver="cg" solves by
MesaNet's conjugate gradient instead (cg.py), applying R_t chunkwise without forming it.

Legend: B batch, T time, H heads, F feature dim, V value dim, N chunks, C chunk size.
"""

from __future__ import annotations

from typing import Literal, get_args

import torch
from einops import rearrange

from regmem.ops.common import cholesky_or_nan, fit_chunk, merge_chunks, segsum, split_chunks
from regmem.ops.linear_attn.chunk import gla_chunk_core
from regmem.ops.regression.cg import conjugate_gradient
from regmem.ops.regression.state import LeastSquaresState, ridge_matrix

Solver = Literal["cholesky", "cg"]  # exact | MesaNet's conjugate gradient (ls_chunk_core)
SOLVERS = get_args(Solver)
CG_STEPS = 30  # conjugate-gradient iterations of solver="cg" when cg_steps is None


def check_solver(solver: Solver, cg_steps: int | None) -> None:
    """The chunk form's solver options (also checked by the Mesa layer at construction): `solver` one of SOLVERS,
    and `cg_steps` None or, with solver="cg" only, an int >= 0."""
    if solver not in SOLVERS:
        raise ValueError(f"solver must be one of {SOLVERS} (exact, or MesaNet's conjugate gradient), got {solver!r}")
    if cg_steps is not None and solver != "cg":
        raise ValueError(f"cg_steps applies to solver='cg', got cg_steps={cg_steps!r} with solver={solver!r}")
    if cg_steps is not None and (isinstance(cg_steps, bool) or not isinstance(cg_steps, int) or cg_steps < 0):
        raise ValueError(f"cg_steps must be an int >= 0 or None, got {cg_steps!r}")


def ls_chunk_core(q, k, v, g, *, ridge, initial_state, chunk_size, solver: Solver = "cholesky", cg_steps=None):
    """q, k: [B, T, H, F] (phi applied, q scaled); v: [B, T, H, V]; g: None or [B, T, H]; ridge: [H, F];
    initial_state: LeastSquaresState of R [B, H, F, F], S [B, H, F, V] or None; solver: "cholesky" (exact) or
    "cg" (cg_steps of conjugate gradient, MesaNet's approximate solver, R_t never formed, differentiated
    implicitly: cg.py; None: CG_STEPS).
    Returns o: [B, T, H, V] and the LeastSquaresState after the last token."""
    check_solver(solver, cg_steps)
    if solver == "cg":
        return cg_chunk(q, k, v, g, ridge=ridge, initial_state=initial_state, chunk_size=chunk_size, steps=cg_steps)
    B, T, H, F = q.shape
    chunk_size = fit_chunk(chunk_size, T)  # a sequence shorter than a chunk: padded to its own length only
    V = v.shape[-1]
    R0, S0 = initial_state if initial_state is not None else (q.new_zeros(B, H, F, F), q.new_zeros(B, H, F, V))
    if T == 0:
        return v.new_zeros(B, 0, H, V), LeastSquaresState(R0, S0)
    # Step 1: the weighted key covariance R_t of every token.
    R, R_T = covariances(k, g, R0, chunk_size)  # [B, T, H, F, F], [B, H, F, F]

    # Step 2: z_t = (R_t + diag(ridge))^{-1} q_t for all tokens at once, differentiated implicitly.
    z = CholeskySolve.apply(ridge_matrix(R, ridge), q)  # [B, T, H, F]

    # Step 3: o_t = S_t^T z_t, gated linear attention with queries z (the scale is already in q).
    o, S_T = gla_chunk_core(z, k, v, g, initial_state=S0, chunk_size=chunk_size)
    return o, LeastSquaresState(R_T, S_T)


def cg_chunk(q, k, v, g, *, ridge, initial_state, chunk_size, steps, solve=None, solve_chunk=None):
    """The chunk form with solver="cg": `steps` (None: CG_STEPS) of conjugate gradient by `solve` (cg.py; None: the
    torch loop) over chunks of `solve_chunk` (None: chunk_size), then the read-out over chunks of chunk_size."""
    B, T, H, F = q.shape
    chunk_size = fit_chunk(chunk_size, T)  # a sequence shorter than a chunk: padded to its own length only
    V = v.shape[-1]
    R0, S0 = initial_state if initial_state is not None else (q.new_zeros(B, H, F, F), q.new_zeros(B, H, F, V))
    if T == 0:
        return v.new_zeros(B, 0, H, V), LeastSquaresState(R0, S0)
    steps = CG_STEPS if steps is None else steps
    z, R_T = conjugate_gradient(q, k, g, R0, ridge, solve_chunk or chunk_size, steps, solve)  # [B, T, H, F]
    o, S_T = gla_chunk_core(z, k, v, g, initial_state=S0, chunk_size=chunk_size)
    return o, LeastSquaresState(R_T, S_T)


class CholeskySolve(torch.autograd.Function):
    """z = A^{-1} q for symmetric positive-definite A: [..., F, F], q: [..., F], by one Cholesky factorisation.

    Backward by implicit differentiation of A z = q, reusing the factor: a = A^{-1} dz, dq = a, dA = -sym(a z^T),
    the symmetric gradient autograd through torch.linalg.cholesky would return, at the cost of one more triangular
    solve instead of Cholesky's backward (~10x the forward on CPU for 64 x 64 blocks). No double backward."""

    @staticmethod
    def forward(ctx, A, q):
        # no error check, so no device-to-host sync (cholesky reads its info flag on the host); the ridge keeps A
        # positive definite, and a NaN in A gives a NaN factor rather than a partial one (cholesky_or_nan)
        L = cholesky_or_nan(A)  # [..., F, F]
        z = torch.cholesky_solve(q.unsqueeze(-1), L).squeeze(-1)  # [..., F]
        ctx.save_for_backward(L, z)
        return z

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, dz):
        L, z = ctx.saved_tensors
        a = torch.cholesky_solve(dz.unsqueeze(-1), L).squeeze(-1)  # [..., F]
        dA = None
        if ctx.needs_input_grad[0]:
            az = a.unsqueeze(-1) * z.unsqueeze(-2)  # [..., F, F]
            dA = -0.5 * (az + az.transpose(-1, -2))
        return dA, a


def covariances(k, g, R0, chunk_size):
    """R_t = exp(g_t) R_{t-1} + k_t k_t^T for every t from R0. k: [B, T, H, F]; g: None or [B, T, H];
    R0: [B, H, F, F]. Returns R: [B, T, H, F, F] and R_T: [B, H, F, F]."""
    T, F = k.shape[1], k.shape[-1]
    outer = rearrange(k.unsqueeze(-1) * k.unsqueeze(-2), "b t h f e -> b t h (f e)")  # [B, T, H, F*F]
    if g is None:
        # Uniform weights: L is the causal mask of ones (exact). A [C, C] matmul per chunk beats a cumsum over T of
        # the strided [T, F*F] outer products (~1.6x on CPU at T = 4096, F = 64, forward + backward).
        g = k.new_zeros(k.shape[:3])  # [B, T, H]
    outer = split_chunks(outer, chunk_size)  # [B, H, N, C, F*F], padded with zero tokens
    g = split_chunks(g, chunk_size)  # [B, H, N, C], padded with g = 0

    # Intra-chunk: sum_{s<=t} L_ts k_s k_s^T, one [C, C] x [C, F*F] matmul per chunk. Its last row is what the chunk
    # adds to the state, decayed to the chunk end.
    intra = torch.exp(segsum(g)) @ outer  # [B, H, N, C, F*F]
    b_in = torch.exp(g.cumsum(dim=-1)).unsqueeze(-1)  # [B, H, N, C, 1], decay from the chunk start to t
    b_total = b_in[:, :, :, -1]  # [B, H, N, 1], decay across the whole chunk

    # Inter-chunk pass, one step per chunk: R_{n+1} = e^{b_total} R_n + intra_n[last].
    # unbind, not intra[:, :, n]: the backward of indexing would zero-fill all of it once per chunk (O(N^2)).
    entering = []
    R_n = R0.flatten(-2)  # [B, H, F*F]
    for decay_n, last_n in zip(b_total.unbind(dim=2), intra[:, :, :, -1].unbind(dim=2), strict=True):
        entering.append(R_n)
        R_n = decay_n * R_n + last_n
    R_in = torch.stack(entering, dim=2)  # [B, H, N, F*F], statistic entering each chunk

    R = intra + b_in * R_in.unsqueeze(3)  # [B, H, N, C, F*F]
    R = rearrange(merge_chunks(R, T), "b t h (f e) -> b t h f e", f=F)  # [B, T, H, F, F]
    return R, rearrange(R_n, "b h (f e) -> b h f e", f=F)
