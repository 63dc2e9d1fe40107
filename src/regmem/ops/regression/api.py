"""The public op of the exact least-squares memory family, `least_squares`.

It validates its arguments here and runs one of the forms of reference.py, recurrent.py and chunk.py
(`least_squares(..., mode=...)` or `least_squares.reference / .recurrent / .chunk`). The math is in DERIVATION.md
beside this file; the state `LeastSquaresState` in state.py.

Shapes: q, k: [B, T, H, K]; v: [B, T, H, V]; g: None or [B, T, H] (log retention, <= 0); ridge: float, [H] or
[H, F]; state LeastSquaresState(R, S) with R: [N, H, F, F], S: [N, H, F, V]; F the feature dim (K for the identity
map); N = B, or the number of sequences with `cu_seqlens` (then B = 1). `scale=None` means K ** -0.5.
"""

from __future__ import annotations

import torch

from regmem.ops.common import (
    Call,
    check_log_gate,
    check_qkv,
    check_same_device,
    check_scale,
    check_state_tuple,
    checks_values,
    compute_dtype,
    num_states,
    op,
)
from regmem.ops.feature_maps import map_queries_and_keys
from regmem.ops.regression.chunk import ls_chunk_core
from regmem.ops.regression.recurrent import ls_recurrent_core
from regmem.ops.regression.reference import ls_reference_core
from regmem.ops.regression.state import LeastSquaresState
from regmem.ops.regression.triton_backend import TRITON


@op(reference=ls_reference_core, recurrent=ls_recurrent_core, chunk=ls_chunk_core, backends={"triton": TRITON})
def least_squares(q, k, v, g=None, *, ridge=1.0, feature_map=None, scale=None, initial_state=None, cu_seqlens=None):
    """The exact decay-weighted ridge-regression memory: eqs. (10)-(11), (14)-(15) and (25) of *Test-time
    regression* (arXiv:2501.12352, Sec. 4
    Vignettes 1-2): weights gamma_i^(t) =
    prod_{j=i+1}^t exp(g_j) (uniform for g=None), a (feature-mapped) linear regressor, solved analytically. The
    ridge is MesaNet's (arXiv:2506.05233): added at read time, it does not decay.

    In regmem's layout, with phi the feature map:
        R_t = exp(g_t) R_{t-1} + phi(k_t) phi(k_t)^T,     S_t = exp(g_t) S_{t-1} + phi(k_t) v_t^T,
        o_t = S_t^T (R_t + diag(ridge))^{-1} phi(q_t) * scale,
    i.e. o_t = M_t q_t with M_t the ridge solution (regmem stores its transpose). scale=1.0 evaluates the fitted
    regressor at the query itself, as in the paper; the default K ** -0.5 follows the op contract.

    Classic exponentially weighted RLS (P_0 = I / lam, whose implicit ridge decays as (prod_j exp(g_j)) lam, TTR
    eq. 14-15) is exactly `initial_state=LeastSquaresState(lam * I, 0), ridge=0`.

    Args:
        q, k: [B, T, H, K]; v: [B, T, H, V], all one floating dtype (bf16/fp16 compute in float32).
        g: None (uniform weights) or [B, T, H], log retention (<= 0) of the weights.
        ridge: float >= 0, or a tensor [H] (per head) or [H, F] (per head and feature channel) >= 0, which may
            require grad. It must not be 0 everywhere unless initial_state.R is positive definite.
        feature_map: None (identity, F = K), a name from regmem.ops.feature_maps, or a token-wise callable
            [..., K] -> [..., F]; applied to q and k.
        scale: multiplies phi(q); None means K ** -0.5.
        initial_state: LeastSquaresState(R [N, H, F, F] symmetric PSD, S [N, H, F, V]), or None for zeros.
        output_final_state: return the LeastSquaresState after the last token (float32, or float64 for float64).
        mode: "reference" | "recurrent" | "chunk".
        chunk_size: chunk length C of the chunk form (a power of two).
        cu_seqlens: [N + 1] integer offsets of packed sequences (B = 1).
        solver: chunk form only. "cholesky" (exact, memory O(B H T F^2)) or "cg": `cg_steps` iterations of
            conjugate gradient (MesaNet; start x_0 = q / (diag(R_t) + ridge)), applying R_t chunkwise without
            forming it: memory O(B H T F + B H (T / C) F^2), approximate (exact after F steps in exact arithmetic);
            differentiated implicitly, as MesaNet does: the adjoint is one more CG solve (regression/cg.py).
        cg_steps: chunk form with solver="cg" only: the number of iterations (an int >= 0), or None for 30.
        backend: "auto" (default: regmem's Triton kernel for both CG solves when solver="cg", the tensors are on
            CUDA in a dtype other than float64, triton is installed and F <= 128, else torch), "torch" (all forms,
            any device) or "triton" (the chunk form with solver="cg"; CUDA, or the CPU under TRITON_INTERPRET=1;
            triton_backend.py).

    Returns:
        o: [B, T, H, V] in the input dtype, and the final LeastSquaresState or None.
    """
    B, T, H, K, V = check_qkv(q, k, v)
    if g is not None:
        if isinstance(g, torch.Tensor):
            check_same_device(q=q, g=g)  # before the sign check, which reads values
        check_log_gate("g", g, B, T, H, K, ("scalar",))
    check_scale(scale)
    N = num_states(B, T, cu_seqlens)
    fq, fk = map_queries_and_keys(feature_map, q, k, scale, compute_dtype(q))  # [B, T, H, F] each
    F = fq.shape[-1]
    shapes = {"R": ((N, H, F, F), "[N, H, F, F]"), "S": ((N, H, F, V), "[N, H, F, V]")}
    check_state_tuple(initial_state, LeastSquaresState, shapes, q)
    ridge = ridge_diagonal(ridge, H, F, q)  # [H, F]
    if initial_state is None and checks_values(ridge) and not bool(ridge.detach().any()):
        raise ValueError(
            "ridge is 0 everywhere and there is no initial_state, so R_t + diag(ridge) is singular for t < F: "
            "pass ridge > 0 or an initial_state with positive-definite R"
        )
    return Call({"q": fq, "k": fk, "v": v, "g": g}, q.dtype, initial_state, options={"ridge": ridge},
                cu_seqlens=cu_seqlens)


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
    if checks_values(ridge) and ridge.numel():
        with torch.no_grad():
            if not bool(torch.isfinite(ridge).all() and (ridge >= 0).all()):
                raise ValueError(f"ridge must be finite and >= 0 everywhere, got min {ridge.min().item():.3g}")
    ridge = ridge.to(dtype)
    return ridge.unsqueeze(-1).expand(H, F) if ridge.ndim == 1 else ridge  # [H, F]
