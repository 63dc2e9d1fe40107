"""Reference form of the exact (decay-weighted, ridge) least-squares memory: the definition, one dense solve per
prefix.

Implements eqs. (10)-(11) and (14)-(15) of *Test-time regression* (Wang, Shi, Fox; arXiv:2501.12352, Sec. 4
Vignettes 1-2), with MesaNet's non-decaying ridge (von Oswald et al., arXiv:2506.05233). For every t, with
weights gamma_i^(t) = prod_{j=i+1}^t exp(g_j) (eq. 14) and the feature map phi (Vignette 1, "Nonlinear
associative memory"):
    R_t = sum_{i<=t} gamma_i^(t) phi(k_i) phi(k_i)^T + (prod_{j<=t} exp(g_j)) R_0          [F, F]
    S_t = sum_{i<=t} gamma_i^(t) phi(k_i) v_i^T      + (prod_{j<=t} exp(g_j)) S_0          [F, V]
    z_t = (R_t + diag(ridge))^{-1} phi(q_t) scale,     o_t = S_t^T z_t
i.e. o_t = M_t q_t with M_t = V^T Gamma K (K^T Gamma K + diag(ridge))^{-1} the ridge solution of eq. (15) (regmem
stores the transpose). The weights are exp(segsum(g)), the statistics explicit weighted sums over the prefix, and
each z_t one torch.linalg.solve (batched): O(T^2 F (F + V) + T F^3).

Legend: B batch, T time (t: output position, s: summed position), H heads, F feature dim, V value dim.
"""

from __future__ import annotations

import torch

from regmem.ops.common import segsum
from regmem.ops.regression.state import LeastSquaresState, ridge_matrix


def ls_reference_core(q, k, v, g, *, ridge, initial_state):
    """q, k: [B, T, H, F] (phi applied, q scaled); v: [B, T, H, V]; g: None or [B, T, H]; ridge: [H, F];
    initial_state: LeastSquaresState of R [B, H, F, F], S [B, H, F, V] or None.
    Returns o: [B, T, H, V] and the LeastSquaresState after the last token."""
    B, T, H, F = q.shape
    V = v.shape[-1]
    R0, S0 = initial_state if initial_state is not None else (q.new_zeros(B, H, F, F), q.new_zeros(B, H, F, V))
    if T == 0:
        return v.new_zeros(B, 0, H, V), LeastSquaresState(R0, S0)
    if g is None:
        g = q.new_zeros(B, T, H)
    weights = torch.exp(segsum(g.permute(0, 2, 1)))  # [B, H, T(t), T(s)], gamma_s^(t), zero for s > t
    decay_from_start = torch.exp(g.cumsum(dim=1)).permute(0, 2, 1)  # [B, H, T], prod_{j<=t} exp(g_j)

    # The weighted statistics of every prefix (eq. 15), plus the decayed initial state.
    R = torch.einsum("bhts,bshf,bshe->bhtfe", weights, k, k)  # [B, H, T, F, F]
    S = torch.einsum("bhts,bshf,bshv->bhtfv", weights, k, v)  # [B, H, T, F, V]
    R = R + decay_from_start[..., None, None] * R0.unsqueeze(2)
    S = S + decay_from_start[..., None, None] * S0.unsqueeze(2)

    # One solve per prefix: z_t = (R_t + diag(ridge))^{-1} q_t, then o_t = S_t^T z_t.
    A = ridge_matrix(R.transpose(1, 2), ridge)  # [B, T, H, F, F]
    z = torch.linalg.solve(A, q.unsqueeze(-1)).squeeze(-1)  # [B, T, H, F]
    o = torch.einsum("bhtfv,bthf->bthv", S, z)  # [B, T, H, V]
    return o, LeastSquaresState(R[:, :, -1], S[:, :, -1])
