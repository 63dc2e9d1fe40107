"""The state of the exact least-squares memory and the matrix its read-out solves with.

`LeastSquaresState(R, S)`, the decay-weighted sufficient statistics of the regression (*Test-time regression*,
arXiv:2501.12352, eqs. 10-11 and 14-15):
    R: [N, H, F, F], R_t = exp(g_t) R_{t-1} + phi(k_t) phi(k_t)^T     (the weighted key covariance K^T Gamma K)
    S: [N, H, F, V], S_t = exp(g_t) S_{t-1} + phi(k_t) v_t^T         (the paper's V^T Gamma K, transposed)
Both are weighted prefix sums, so state passing and varlen packing (zero tokens, g = 0) are exact. The ridge is not
part of the state: it is added at read time and does not decay (MesaNet, von Oswald et al. 2025,
arXiv:2506.05233). N = B, or the number of sequences with `cu_seqlens`.

Legend: B batch, T time, H heads, K key dim, F feature dim (= K for the identity map), V value dim, N states.
"""

from __future__ import annotations

from typing import NamedTuple

import torch


class LeastSquaresState(NamedTuple):
    """State of the least-squares memory: R: [N, H, F, F] = sum_i gamma_i phi(k_i) phi(k_i)^T (symmetric PSD) and
    S: [N, H, F, V] = sum_i gamma_i phi(k_i) v_i^T, both decay-weighted."""

    R: torch.Tensor
    S: torch.Tensor


def ridge_matrix(R: torch.Tensor, ridge: torch.Tensor) -> torch.Tensor:
    """sym(R) + diag(ridge): R [..., H, F, F] (any leading dims before H, e.g. T); ridge [H, F] -> [..., H, F, F].

    The read-out uses the symmetric part of R: a real state is symmetric, and this fixes the gradient w.r.t. R to
    the symmetric one that Cholesky's backward returns, so all forms agree on it."""
    return 0.5 * (R + R.transpose(-1, -2)) + torch.diag_embed(ridge)
