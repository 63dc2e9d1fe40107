"""What every form of the exact least-squares memory shares: the state tuple, the ridge, validation, feature maps,
and the hand-off to the common frame. A form is only its core (reference.py, recurrent.py, chunk.py).

Source: *Test-time regression* (Wang, Shi, Fox; arXiv:2501.12352), Sec. 4 Vignettes 1-2, eqs. (10)-(11), (14)-(15),
(25); the non-decaying ridge of MesaNet (von Oswald et al. 2025; ttr.md Appendix A.1).

State layout (DESIGN.md): `LeastSquaresState(R, S)`, the decay-weighted sufficient statistics of the regression
    R: [N, H, F, F], R_t = exp(g_t) R_{t-1} + phi(k_t) phi(k_t)^T     (the weighted key covariance K^T Gamma K)
    S: [N, H, F, V], S_t = exp(g_t) S_{t-1} + phi(k_t) v_t^T         (the paper's V^T Gamma K, transposed)
Both are weighted prefix sums, so state passing and varlen packing (zero tokens, g = 0) are exact. The ridge is not
part of the state: it is added at read time and does not decay. N = B, or the number of sequences with `cu_seqlens`.

Legend: B batch, T time, H heads, K key dim, F feature dim (= K for the identity map), V value dim, N states.
"""

from __future__ import annotations

from typing import NamedTuple

import torch

from regmem.ops.common import (
    check_log_gate,
    check_qkv,
    check_same_device,
    check_scale,
    check_state_tuple,
    compute_dtype,
    num_states,
    run_core,
)
from regmem.ops.feature_maps import map_queries_and_keys


class LeastSquaresState(NamedTuple):
    """State of the least-squares memory: R: [N, H, F, F] = sum_i gamma_i phi(k_i) phi(k_i)^T (symmetric PSD) and
    S: [N, H, F, V] = sum_i gamma_i phi(k_i) v_i^T, both decay-weighted (ttr.md L5)."""

    R: torch.Tensor
    S: torch.Tensor


def ridge_matrix(R: torch.Tensor, ridge: torch.Tensor) -> torch.Tensor:
    """sym(R) + diag(ridge): R [..., H, F, F] (any leading dims before H, e.g. T); ridge [H, F] -> [..., H, F, F].

    The read-out uses the symmetric part of R: a real state is symmetric, and this fixes the gradient w.r.t. R to
    the symmetric one that Cholesky's backward returns, so all forms agree on it."""
    return 0.5 * (R + R.transpose(-1, -2)) + torch.diag_embed(ridge)


def ridge_diagonal(ridge, H: int, F: int, q: torch.Tensor) -> torch.Tensor:
    """Validates `ridge` (float >= 0, or a tensor [H] or [H, F] >= 0) and returns it as [H, F] in the compute dtype
    of q (differentiably: a gradient on the result reaches a tensor ridge)."""
    dtype = compute_dtype(q)
    if isinstance(ridge, bool) or not isinstance(ridge, int | float | torch.Tensor):
        raise ValueError(f"ridge must be a float >= 0 or a tensor of shape [H] or [H, F], got {type(ridge).__name__}")
    if not isinstance(ridge, torch.Tensor):
        if not ridge >= 0.0 or ridge == float("inf"):
            raise ValueError(f"ridge must be a finite float >= 0, got {ridge!r}")
        return torch.full((H, F), float(ridge), dtype=dtype, device=q.device)
    if not ridge.is_floating_point():
        raise ValueError(f"ridge must be a floating-point tensor of shape [H] or [H, F], got dtype {ridge.dtype}")
    if tuple(ridge.shape) not in ((H,), (H, F)):
        raise ValueError(f"ridge must have shape [H] = {[H]} or [H, F] = {[H, F]}, got shape {list(ridge.shape)}")
    check_same_device(q=q, ridge=ridge)
    with torch.no_grad():
        if ridge.numel() and not bool(torch.isfinite(ridge).all() and (ridge >= 0).all()):
            raise ValueError(f"ridge must be finite and >= 0 everywhere, got min {ridge.min().item():.3g}")
    ridge = ridge.to(dtype)
    return ridge.unsqueeze(-1).expand(H, F) if ridge.ndim == 1 else ridge  # [H, F]


def check_ls_state(initial_state, N: int, H: int, F: int, V: int, q: torch.Tensor) -> None:
    shapes = {"R": ((N, H, F, F), "[N, H, F, F]"), "S": ((N, H, F, V), "[N, H, F, V]")}
    check_state_tuple(initial_state, LeastSquaresState, shapes, q)


def run_least_squares(core, q, k, v, g, *, ridge, feature_map, scale, initial_state, output_final_state, cu_seqlens,
                      **options):
    """o_t = S_t^T (sym(R_t) + diag(ridge))^{-1} phi(q_t) * scale with the weighted statistics of the state
    (see api.least_squares). Validates, applies the feature map and the scale, and runs `core` in the common frame:
    core(q, k, v, g, *, ridge [H, F], initial_state, **options) -> (o, LeastSquaresState)."""
    B, T, H, K, V = check_qkv(q, k, v)
    if g is not None:
        if isinstance(g, torch.Tensor):
            check_same_device(q=q, g=g)  # before the sign check, which reads values
        check_log_gate("g", g, B, T, H, K, ("scalar",))
    check_scale(scale)
    N = num_states(B, T, cu_seqlens)
    fq, fk = map_queries_and_keys(feature_map, q, k, scale, compute_dtype(q))  # [B, T, H, F] each
    F = fq.shape[-1]
    check_ls_state(initial_state, N, H, F, V, q)
    ridge = ridge_diagonal(ridge, H, F, q)  # [H, F]
    if initial_state is None and not bool(ridge.detach().any()):
        raise ValueError(
            "ridge is 0 everywhere and there is no initial_state, so R_t + diag(ridge) is singular for t < F: "
            "pass ridge > 0 or an initial_state with positive-definite R"
        )
    return run_core(
        core, {"q": fq, "k": fk, "v": v, "g": g}, initial_state, output_final_state=output_final_state,
        cu_seqlens=cu_seqlens, out_dtype=q.dtype, ridge=ridge, **options,
    )
