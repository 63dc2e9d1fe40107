"""Public op of the exact least-squares memory family and its named forms.

`least_squares` dispatches on `mode`; each form is also callable by name (`least_squares_reference`,
`least_squares_recurrent`, `least_squares_chunk`). See DERIVATION.md beside this file for the math.

Shapes: q, k: [B, T, H, K]; v: [B, T, H, V]; g: None or [B, T, H] (log retention, <= 0); ridge: float, [H] or
[H, F]; state LeastSquaresState(R, S) with R: [N, H, F, F], S: [N, H, F, V]; F the feature dim (K for the identity
map); N = B, or the number of sequences with `cu_seqlens` (then B = 1). `scale=None` means K ** -0.5.
"""

from __future__ import annotations

from regmem.ops.common import check_chunk_size, dispatch
from regmem.ops.regression.chunk import ls_chunk_core
from regmem.ops.regression.interface import run_least_squares
from regmem.ops.regression.recurrent import ls_recurrent_core
from regmem.ops.regression.reference import ls_reference_core


def least_squares(
    q, k, v, g=None, *, ridge=1.0, feature_map=None, scale=None, initial_state=None, output_final_state=False,
    mode="chunk", chunk_size=64, cu_seqlens=None,
):
    """The exact decay-weighted ridge-regression memory: eqs. (10)-(11), (14)-(15) and (25) of *Test-time
    regression* (arXiv:2501.12352, Sec. 4 Vignettes 1-2; ttr.md §2.2 L1, L4, L5): weights gamma_i^(t) =
    prod_{j=i+1}^t exp(g_j) (uniform for g=None), a (feature-mapped) linear regressor, solved analytically. The
    ridge is MesaNet's (ttr.md Appendix A.1): added at read time, it does not decay.

    In regmem's layout, with phi the feature map:
        R_t = exp(g_t) R_{t-1} + phi(k_t) phi(k_t)^T,     S_t = exp(g_t) S_{t-1} + phi(k_t) v_t^T,
        o_t = S_t^T (R_t + diag(ridge))^{-1} phi(q_t) * scale,
    i.e. o_t = M_t q_t with M_t the ridge solution (regmem stores its transpose). scale=1.0 evaluates the fitted
    regressor at the query itself, as in the paper; the default K ** -0.5 follows the op contract.

    Classic exponentially weighted RLS (P_0 = I / lam, whose implicit ridge decays as (prod_j exp(g_j)) lam, ttr.md
    L5) is exactly `initial_state=LeastSquaresState(lam * I, 0), ridge=0`.

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

    Returns:
        o: [B, T, H, V] in the input dtype, and the final LeastSquaresState or None.
    """
    check_chunk_size(chunk_size)
    forms = {"reference": least_squares_reference, "recurrent": least_squares_recurrent, "chunk": least_squares_chunk}
    return dispatch(
        mode, forms, chunk_size, q=q, k=k, v=v, g=g, ridge=ridge, feature_map=feature_map, scale=scale,
        initial_state=initial_state, output_final_state=output_final_state, cu_seqlens=cu_seqlens,
    )


def least_squares_reference(q, k, v, g=None, *, ridge=1.0, feature_map=None, scale=None, initial_state=None,
                            output_final_state=False, cu_seqlens=None):
    """`least_squares` by its definition: explicit weighted statistics and one dense solve per prefix (O(T^2))."""
    return run_least_squares(
        ls_reference_core, q, k, v, g, ridge=ridge, feature_map=feature_map, scale=scale,
        initial_state=initial_state, output_final_state=output_final_state, cu_seqlens=cu_seqlens,
    )


def least_squares_recurrent(q, k, v, g=None, *, ridge=1.0, feature_map=None, scale=None, initial_state=None,
                            output_final_state=False, cu_seqlens=None):
    """`least_squares` one token at a time (the decoding form): Sherman-Morrison (RLS) where exact, else one
    Cholesky per token; the read-out is differentiated implicitly, never through the RLS steps."""
    return run_least_squares(
        ls_recurrent_core, q, k, v, g, ridge=ridge, feature_map=feature_map, scale=scale,
        initial_state=initial_state, output_final_state=output_final_state, cu_seqlens=cu_seqlens,
    )


def least_squares_chunk(q, k, v, g=None, *, ridge=1.0, feature_map=None, scale=None, initial_state=None,
                        output_final_state=False, chunk_size=64, cu_seqlens=None, solver="cholesky", cg_steps=30):
    """`least_squares` chunk-parallel (the training form): R_t chunkwise, a batched Cholesky solve per token, and
    the read-out as gated linear attention. Memory O(B H T F^2).

    solver="cg" replaces the Cholesky solve by `cg_steps` iterations of conjugate gradient (MesaNet, ttr.md
    Appendix A.1; start x_0 = q / (diag(R_t) + ridge)), applying R_t chunkwise without forming it: memory
    O(B H T F + B H (T / C) F^2), and the result is approximate (exact after F steps in exact arithmetic); gradients
    run through the iterations. Only this named form takes `solver`; `least_squares(mode=...)` is always exact."""
    check_chunk_size(chunk_size)
    if solver not in ("cholesky", "cg"):
        raise ValueError(f"solver must be 'cholesky' or 'cg', got {solver!r}")
    if isinstance(cg_steps, bool) or not isinstance(cg_steps, int) or cg_steps < 0:
        raise ValueError(f"cg_steps must be an int >= 0, got {cg_steps!r}")
    return run_least_squares(
        ls_chunk_core, q, k, v, g, ridge=ridge, feature_map=feature_map, scale=scale,
        initial_state=initial_state, output_final_state=output_final_state, cu_seqlens=cu_seqlens,
        chunk_size=chunk_size, solver=solver, cg_steps=cg_steps,
    )
