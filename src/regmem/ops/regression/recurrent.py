"""Recurrent form of the exact least-squares memory: per token, update the weighted statistics (R, S) and the
inverse P_t = (R_t + diag(ridge))^{-1}, then read out; constant memory in T. This is the form decoding uses.

Implements the sequential ("RLS") computation of *Test-time regression* (Wang, Shi, Fox; arXiv:2501.12352, Sec. 4
Vignettes 1-2, eqs. (11), (15)), with MesaNet's non-decaying ridge (von Oswald et al., arXiv:2506.05233):
    R_t = exp(g_t) R_{t-1} + k_t k_t^T,   S_t = exp(g_t) S_{t-1} + k_t v_t^T,   o_t = S_t^T P_t q_t.
P_t is updated by Sherman-Morrison (RLS) where that is exact:
  - g is None: R_t + diag(ridge) = (R_{t-1} + diag(ridge)) + k k^T, a rank-one update (Vignette 1):
        P_t = P_{t-1} - P_{t-1} k k^T P_{t-1} / (1 + k^T P_{t-1} k);
  - ridge = 0: R_t = gamma R_{t-1} + k k^T, weighted RLS (Vignette 2):
        P_t = (P_{t-1} - P_{t-1} k k^T P_{t-1} / (gamma + k^T P_{t-1} k)) / gamma.
With decay and a nonzero ridge (MesaNet) the ridge does not decay with R, the update is not rank-one, and
P_t q_t = (R_t + diag(ridge))^{-1} q_t is a Cholesky solve of R_t + diag(ridge) at every step (O(F^3) per token).
P is symmetrised after each update (float32 RLS can lose symmetry and definiteness; DERIVATION.md, "Numerics").

Accuracy: RLS is as accurate as its inverse. P_0 = (R_0 + diag(ridge))^{-1} is ~1 / ridge when R_0 = 0, and the
rank-one downdates cancel it to O(1) once the keys span R^F, losing ~log10(||R_t|| / ridge) digits: with ridge >~ 1e-4
(MesaNet's is >= 0.25) float64 is accurate to ~1e-12, but a ridge of 1e-12 leaves ~1e-4. The chunk form (a Cholesky
solve per token) has no such loss.

Gradients do not run through the Sherman-Morrison steps: P is computed without autograd, and the read-out is
`SolveRead`, whose backward is the implicit-differentiation gradient of o = S^T (sym(R) + diag(ridge))^{-1} q. R and
S are plain linear recurrences and stay differentiable, so gradients reach k, v, g and the initial state through them.

Legend: B batch, T time, H heads, F feature dim, V value dim.
"""

from __future__ import annotations

import torch

from regmem.ops.common import cholesky_or_nan
from regmem.ops.regression.state import LeastSquaresState, ridge_matrix


class SolveRead(torch.autograd.Function):
    """o = S^T z with z = A^{-1} q, A = sym(R) + diag(ridge), where `solve(x) = A^{-1} x` is given and not
    differentiated (a Sherman-Morrison inverse P, or a Cholesky factor of A).

    S: [B, H, F, V]; R: [B, H, F, F]; ridge: [B, H, F]; q: [B, H, F]; solve: [B, H, F] -> [B, H, F].
    Backward (implicit differentiation of A z = q), with a = A^{-1} (S do):
        dq = a,   dS = z do^T,   dA = -a z^T -> dR = -sym(a z^T),   d ridge = -(a ⊙ z)."""

    @staticmethod
    def forward(ctx, S, R, ridge, q, solve):
        z = solve(q)  # [B, H, F]
        ctx.solve = solve
        ctx.save_for_backward(S, z)
        return torch.einsum("bhfv,bhf->bhv", S, z)  # [B, H, V]

    @staticmethod
    def backward(ctx, do):
        S, z = ctx.saved_tensors
        a = ctx.solve(torch.einsum("bhfv,bhv->bhf", S, do))  # [B, H, F], A^{-1} S do
        dS = z.unsqueeze(-1) * do.unsqueeze(-2) if ctx.needs_input_grad[0] else None  # [B, H, F, V]
        dR = None
        if ctx.needs_input_grad[1]:
            az = a.unsqueeze(-1) * z.unsqueeze(-2)  # [B, H, F, F]
            dR = -0.5 * (az + az.transpose(-1, -2))
        d_ridge = -(a * z) if ctx.needs_input_grad[2] else None  # [B, H, F]
        dq = a if ctx.needs_input_grad[3] else None
        return dS, dR, d_ridge, dq, None


def _symmetric(P: torch.Tensor) -> torch.Tensor:
    return 0.5 * (P + P.transpose(-1, -2))


def _rank_one_downdate(P, k, gamma):
    """(P - P k k^T P / (gamma + k^T P k)) / gamma: P [B, H, F, F], k [B, H, F], gamma [B, H, 1, 1] or 1."""
    Pk = torch.einsum("bhfe,bhe->bhf", P, k)  # [B, H, F]
    denom = gamma + torch.einsum("bhf,bhf->bh", k, Pk)[..., None, None]  # [B, H, 1, 1]
    return _symmetric((P - Pk.unsqueeze(-1) * Pk.unsqueeze(-2) / denom) / gamma)


def _inverse(R, ridge):
    """(sym(R) + diag(ridge))^{-1} by Cholesky: R [B, H, F, F]; ridge [H, F]."""
    return _symmetric(torch.cholesky_inverse(cholesky_or_nan(ridge_matrix(R, ridge))))


def _apply(P):
    """x [B, H, F] -> P x for a symmetric P [B, H, F, F]."""
    return lambda x: torch.einsum("bhfe,bhe->bhf", P, x)


def _cholesky_solver(R, ridge):
    """x [B, H, F] -> (sym(R) + diag(ridge))^{-1} x by a Cholesky factorisation (backward stable: more accurate
    than multiplying by the explicit inverse when R + ridge is ill-conditioned)."""
    L = cholesky_or_nan(ridge_matrix(R, ridge))  # [B, H, F, F]; NaN where R holds one, as in the other forms
    return lambda x: torch.cholesky_solve(x.unsqueeze(-1), L).squeeze(-1)


def ls_recurrent_core(q, k, v, g, *, ridge, initial_state):
    """q, k: [B, T, H, F] (phi applied, q scaled); v: [B, T, H, V]; g: None or [B, T, H]; ridge: [H, F];
    initial_state: LeastSquaresState of R [B, H, F, F], S [B, H, F, V] or None.
    Returns o: [B, T, H, V] and the LeastSquaresState after the last token."""
    B, T, H, F = q.shape
    V = v.shape[-1]
    R, S = initial_state if initial_state is not None else (q.new_zeros(B, H, F, F), q.new_zeros(B, H, F, V))
    if T == 0:
        return v.new_zeros(B, 0, H, V), LeastSquaresState(R, S)
    # Sherman-Morrison is exact without decay, or with a zero ridge (module docstring); the second test reads the
    # ridge on the host once per call (a decoding step), never in training, which runs the chunk form.
    rank_one = g is None or not bool(ridge.detach().any())
    ridge_read = ridge.expand(B, H, F)  # [B, H, F], broadcast for SolveRead; autograd sums it back
    with torch.no_grad():
        P = _inverse(R.detach(), ridge.detach()) if rank_one else None  # [B, H, F, F], P_0
    gates = g.unbind(dim=1) if g is not None else [None] * T
    outputs = []
    # unbind, not q[:, t]: the backward of indexing would zero-fill all of q once per token (O(T^2)).
    for q_t, k_t, v_t, g_t in zip(q.unbind(1), k.unbind(1), v.unbind(1), gates, strict=True):
        gamma = torch.exp(g_t)[..., None, None] if g_t is not None else None  # [B, H, 1, 1]
        if gamma is not None:
            R, S = gamma * R, gamma * S
        R = R + k_t.unsqueeze(-1) * k_t.unsqueeze(-2)  # [B, H, F, F]
        S = S + k_t.unsqueeze(-1) * v_t.unsqueeze(-2)  # [B, H, F, V]
        with torch.no_grad():
            if rank_one:
                P = _rank_one_downdate(P, k_t.detach(), gamma.detach() if gamma is not None else 1.0)
                solve = _apply(P)
            else:
                solve = _cholesky_solver(R.detach(), ridge.detach())
        outputs.append(SolveRead.apply(S, R, ridge_read, q_t, solve))
    o = torch.stack(outputs, dim=1)  # [B, T, H, V]
    return o, LeastSquaresState(R, S)
