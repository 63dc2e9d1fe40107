"""Exact kernel (ridge) regression memory of *Test-time regression* (Wang, Shi, Fox; arXiv:2501.12352), Sec. 4
Vignette 4, eqs. (42)-(43) (ttr.md §2.2 L17; L18 is its k(K, K) ~ I approximation, eqs. 44-47).

The memory regresses values on keys in the RKHS of a kernel k(a, b) = phi(a).phi(b), uniform weights, solved
analytically (eq. 42); the prediction at query q_t uses every pair i <= t (cache + new tokens), eq. (43) with the
ridge of ttr.md §2.2 L17 [D] (the exact Gram is often ill-conditioned):
    o_t = m_t(q_t) = V_t^T (k(K_t, K_t) + ridge I)^{-1} k(K_t, q_t),   K_t: [t, K], V_t: [t, V].
Kernels: "exp" exp(scale a.b) (scale None -> K ** -0.5), "gaussian" exp(-||a - b||^2 / bandwidth) (the exact
kernel value: the regression is not normalised, so no per-query constant may be dropped), "linear" a.b (dual ridge
regression), or a callable (a [..., n, K], b [..., m, K]) -> Gram [..., n, m] that is positive semi-definite.

Forms (one signature; `kernel_regression(..., mode=...)` dispatches):
  - reference: per prefix t, one batched t x t `torch.linalg.solve`, O(T^4) in all (the definition);
  - chunk (the contract's name for the parallel training form; here one exact factorisation, not chunks):
    one Cholesky L L^T = k(K, K) + ridge I of the whole (S + T) x (S + T) Gram. The leading p x p block of L is
    the Cholesky factor of prefix p, and forward substitution is prefix-separable (row i of L^{-1} b uses b_{<=i}
    only), so with W = L^{-1} V and U = L^{-1} k(K, Q) (one triangular solve each),
        o_t = (L_p^{-1} k(K_p, q_t))^T (L_p^{-1} V_p) = sum_{i <= S + t} U[i, t] W[i],   p = S + t + 1;
  - recurrent: the decode form. It factorises the cache once, then grows the Cholesky factor by one row per token
    (l = L^{-1} k(K, k_new), d = sqrt(k(k_new, k_new) + ridge - l.l)), extends W by (v_new - W^T l) / d, and
    answers the query with one triangular solve against the grown factor. The state is only the cache, so every
    call refactorises its cache (O(S^3)); a decoder carrying L could step in O(S^2).

Cost: exact, O((S + T)^3) time and O((S + T)^2) memory per head. Nothing cheaper exists for an exact kernel
regressor with a growing Gram: its state is the whole cache (it grows with t) and each new pair changes the
inverse Gram everywhere. A kernel that is not positive semi-definite can make the Cholesky factorisation fail.

State: `KVState(k [N, S, H, K], v [N, S, H, V])`, the cache; the final state is the cache plus the new pairs.
Legend: B batch, T new tokens, S cached tokens, H heads, K key dim, V value dim, N sequences; in the cores the
pair axis P = S + T.
"""

from __future__ import annotations

from functools import partial

import torch
from einops import rearrange

from regmem.ops.common import check_chunk_size, check_scale, dispatch
from regmem.ops.nonparametric.frame import run_nonparametric

KERNELS = ("exp", "gaussian", "linear")


def check_kernel(kernel, scale, bandwidth, ridge) -> None:
    """`scale` belongs to "exp" and `bandwidth` (required) to "gaussian"; `ridge` is a positive float."""
    if not callable(kernel) and kernel not in KERNELS:
        raise ValueError(f"kernel must be one of {KERNELS} or a callable (a, b) -> Gram, got {kernel!r}")
    check_scale(scale)
    if scale is not None and kernel != "exp":
        raise ValueError(f"scale applies to kernel='exp' only, got scale={scale!r} with kernel={kernel!r}")
    if kernel == "gaussian":
        if not isinstance(bandwidth, int | float) or not bandwidth > 0:
            raise ValueError(f"bandwidth must be a positive float for kernel='gaussian', got {bandwidth!r}")
    elif bandwidth is not None:
        raise ValueError(f"bandwidth applies to kernel='gaussian' only, got bandwidth={bandwidth!r}")
    if not isinstance(ridge, int | float) or not ridge > 0:
        raise ValueError(f"ridge must be a positive float, got {ridge!r}")


def exp_gram(a: torch.Tensor, b: torch.Tensor, *, scale: float) -> torch.Tensor:
    """a: [..., n, K], b: [..., m, K] -> exp(scale a.b): [..., n, m]."""
    return torch.exp(scale * (a @ b.transpose(-1, -2)))


def gaussian_gram(a: torch.Tensor, b: torch.Tensor, *, bandwidth: float) -> torch.Tensor:
    """a: [..., n, K], b: [..., m, K] -> exp(-||a - b||^2 / bandwidth): [..., n, m], the exact kernel value."""
    sq_dist = a.pow(2).sum(-1)[..., :, None] + b.pow(2).sum(-1)[..., None, :] - 2 * (a @ b.transpose(-1, -2))
    return torch.exp(-sq_dist.clamp_min(0) / bandwidth)  # clamp: rounding can make ||a - a||^2 slightly negative


def linear_gram(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """a: [..., n, K], b: [..., m, K] -> a.b: [..., n, m]."""
    return a @ b.transpose(-1, -2)


def make_gram(kernel, scale, bandwidth, K: int):
    """The Gram function (a [..., n, K], b [..., m, K]) -> [..., n, m] of a validated kernel choice."""
    if kernel == "exp":
        return partial(exp_gram, scale=K ** -0.5 if scale is None else float(scale))
    if kernel == "gaussian":
        return partial(gaussian_gram, bandwidth=float(bandwidth))
    if kernel == "linear":
        return linear_gram
    return _checked(kernel)


def _checked(kernel):
    def gram(a, b):
        G = kernel(a, b)
        expected = (*a.shape[:-1], b.shape[-2])
        if not isinstance(G, torch.Tensor) or tuple(G.shape) != expected:
            got = list(G.shape) if isinstance(G, torch.Tensor) else type(G).__name__
            raise ValueError(f"kernel must return a Gram [..., n, m] = {list(expected)}, got {got}")
        return G

    return gram


def _heads_first(q, k, v):
    q = rearrange(q, "b t h d -> b h t d")  # [B, H, T, K]
    k = rearrange(k, "b p h d -> b h p d")  # [B, H, P, K]
    v = rearrange(v, "b p h d -> b h p d")  # [B, H, P, V]
    return q, k, v


def _ridged_gram(gram, k: torch.Tensor, ridge: float) -> torch.Tensor:
    """k: [B, H, P, K] -> k(K, K) + ridge I: [B, H, P, P]."""
    eye = torch.eye(k.shape[-2], dtype=k.dtype, device=k.device)
    return gram(k, k) + ridge * eye


def kernel_reference_core(q, k, v, *, offset, kernel, scale, bandwidth, ridge):
    """Eq. (43) per prefix: o_t = V_p^T (k(K_p, K_p) + ridge I)^{-1} k(K_p, q_t) with p = offset + t + 1.

    q: [B, T, H, K]; k: [B, S + T, H, K]; v: [B, S + T, H, V]; offset = S. Returns o: [B, T, H, V]."""
    gram = make_gram(kernel, scale, bandwidth, q.shape[-1])
    q, k, v = _heads_first(q, k, v)
    outputs = []
    for t in range(q.shape[2]):
        p = offset + t + 1
        alpha = torch.linalg.solve(_ridged_gram(gram, k[:, :, :p], ridge), gram(k[:, :, :p], q[:, :, t:t + 1]))
        outputs.append(alpha.transpose(-1, -2) @ v[:, :, :p])  # [B, H, 1, V]; alpha: [B, H, p, 1]
    o = torch.cat(outputs, dim=2) if outputs else v.new_zeros(*v.shape[:2], 0, v.shape[-1])  # [B, H, T, V]
    return rearrange(o, "b h t v -> b t h v")


def kernel_chunk_core(q, k, v, *, offset, kernel, scale, bandwidth, ridge):
    """One Cholesky of the whole Gram, two triangular solves, a causal contraction (module docstring).

    Shapes as `kernel_reference_core`."""
    gram = make_gram(kernel, scale, bandwidth, q.shape[-1])
    q, k, v = _heads_first(q, k, v)
    P, T = k.shape[2], q.shape[2]
    # 1. L L^T = k(K, K) + ridge I; its leading p x p block factorises prefix p
    L = torch.linalg.cholesky(_ridged_gram(gram, k, ridge))  # [B, H, P, P]
    # 2. W = L^{-1} V and U = L^{-1} k(K, Q); row i of each uses pairs <= i only
    W = torch.linalg.solve_triangular(L, v, upper=False)  # [B, H, P, V]
    U = torch.linalg.solve_triangular(L, gram(k, q), upper=False)  # [B, H, P, T]
    # 3. o_t = sum_{i <= offset + t} U[i, t] W[i]
    visible = torch.arange(P, device=q.device)[:, None] <= offset + torch.arange(T, device=q.device)  # [P, T]
    U = torch.where(visible, U, torch.zeros_like(U))  # [B, H, P, T]
    o = torch.einsum("bhpt,bhpv->bthv", U, W)  # [B, T, H, V]
    return o


def kernel_recurrent_core(q, k, v, *, offset, kernel, scale, bandwidth, ridge):
    """Token by token: grow L (and W = L^{-1} V) by one row per pair, then answer the query.

    Shapes as `kernel_reference_core`."""
    gram = make_gram(kernel, scale, bandwidth, q.shape[-1])
    q, k, v = _heads_first(q, k, v)
    B, H, T, _ = q.shape
    L = k.new_zeros(B, H, 0, 0)  # [B, H, p, p], the factor of the pairs so far
    W = v.new_zeros(B, H, 0, v.shape[-1])  # [B, H, p, V]
    if offset:
        L = torch.linalg.cholesky(_ridged_gram(gram, k[:, :, :offset], ridge))  # [B, H, S, S]
        W = torch.linalg.solve_triangular(L, v[:, :, :offset], upper=False)  # [B, H, S, V]
    outputs = []
    for t in range(T):
        p = offset + t
        L, W = _append_pair(L, W, k[:, :, :p], k[:, :, p:p + 1], v[:, :, p:p + 1], gram, ridge)
        u = torch.linalg.solve_triangular(L, gram(k[:, :, :p + 1], q[:, :, t:t + 1]), upper=False)  # [B, H, p+1, 1]
        outputs.append(u.transpose(-1, -2) @ W)  # [B, H, 1, V]
    o = torch.cat(outputs, dim=2) if outputs else v.new_zeros(B, H, 0, v.shape[-1])  # [B, H, T, V]
    return rearrange(o, "b h t v -> b t h v")


def _append_pair(L, W, k_old, k_new, v_new, gram, ridge):
    """One Cholesky row: L': [B, H, p+1, p+1] = [[L, 0], [l^T, d]] and W' = [W; (v_new - l^T W) / d].

    L: [B, H, p, p]; W: [B, H, p, V]; k_old: [B, H, p, K]; k_new: [B, H, 1, K]; v_new: [B, H, 1, V]."""
    diag = gram(k_new, k_new) + ridge  # [B, H, 1, 1]
    if L.shape[-1] == 0:
        d = diag.sqrt()  # [B, H, 1, 1]
        return d, v_new / d
    l_col = torch.linalg.solve_triangular(L, gram(k_old, k_new), upper=False)  # [B, H, p, 1]
    l_row = l_col.transpose(-1, -2)  # [B, H, 1, p]
    d = (diag - l_row @ l_col).sqrt()  # [B, H, 1, 1]
    top = torch.cat([L, torch.zeros_like(l_col)], dim=-1)  # [B, H, p, p+1]
    L = torch.cat([top, torch.cat([l_row, d], dim=-1)], dim=-2)  # [B, H, p+1, p+1]
    W = torch.cat([W, (v_new - l_row @ W) / d], dim=-2)  # [B, H, p+1, V]
    return L, W


def kernel_regression(
    q, k, v, *, kernel="exp", scale=None, bandwidth=None, ridge=1e-3, initial_state=None, output_final_state=False,
    mode="chunk", chunk_size=64, cu_seqlens=None,
):
    """Exact kernel ridge regression memory, eqs. (42)-(43) of *Test-time regression* (arXiv:2501.12352).

    o_t = V_t^T (k(K_t, K_t) + ridge I)^{-1} k(K_t, q_t) over every pair i <= t (cache + new tokens).

    Args:
        q, k: [B, T, H, K]; v: [B, T, H, V], all one floating dtype (bf16/fp16 compute in float32).
        kernel: "exp" (exp(scale q.k)), "gaussian" (exp(-||k - q||^2 / bandwidth)), "linear" (q.k), or a
            positive semi-definite callable (a [..., n, K], b [..., m, K]) -> Gram [..., n, m].
        scale: for kernel="exp" only; None means K ** -0.5.
        bandwidth: for kernel="gaussian" only, where it is required (a positive float).
        ridge: the positive ridge lambda added to the Gram's diagonal (default 1e-3).
        initial_state: `KVState(k [N, S, H, K], v [N, S, H, V])`, the cache, or None for an empty one.
        output_final_state: return `KVState` of the cache followed by the T new pairs (compute dtype).
        mode: "reference" (per-prefix solves) | "recurrent" (growing Cholesky) | "chunk" (one Cholesky).
        chunk_size: a power of two; unused, the chunk form factorises the whole Gram (uniform op signature).
        cu_seqlens: [N + 1] integer offsets of packed sequences (B = 1); no initial or final state then.

    Returns:
        o: [B, T, H, V] in the input dtype, and the final `KVState` or None.
    """
    check_chunk_size(chunk_size)
    forms = {
        "reference": kernel_regression_reference,
        "recurrent": kernel_regression_recurrent,
        "chunk": kernel_regression_chunk,
    }
    return dispatch(
        mode, forms, chunk_size, q=q, k=k, v=v, kernel=kernel, scale=scale, bandwidth=bandwidth, ridge=ridge,
        initial_state=initial_state, output_final_state=output_final_state, cu_seqlens=cu_seqlens,
    )


def _run(core, q, k, v, *, kernel, scale, bandwidth, ridge, initial_state, output_final_state, cu_seqlens):
    check_kernel(kernel, scale, bandwidth, ridge)
    return run_nonparametric(
        core, q, k, v, initial_state=initial_state, output_final_state=output_final_state, cu_seqlens=cu_seqlens,
        kernel=kernel, scale=scale, bandwidth=bandwidth, ridge=float(ridge),
    )


def kernel_regression_reference(
    q, k, v, *, kernel="exp", scale=None, bandwidth=None, ridge=1e-3, initial_state=None, output_final_state=False,
    cu_seqlens=None,
):
    """`kernel_regression` by its definition: one t x t solve per prefix (O(T^4))."""
    return _run(kernel_reference_core, q, k, v, kernel=kernel, scale=scale, bandwidth=bandwidth, ridge=ridge,
                initial_state=initial_state, output_final_state=output_final_state, cu_seqlens=cu_seqlens)


def kernel_regression_recurrent(
    q, k, v, *, kernel="exp", scale=None, bandwidth=None, ridge=1e-3, initial_state=None, output_final_state=False,
    cu_seqlens=None,
):
    """`kernel_regression` token by token, growing the Cholesky factor one row per pair (the decode form)."""
    return _run(kernel_recurrent_core, q, k, v, kernel=kernel, scale=scale, bandwidth=bandwidth, ridge=ridge,
                initial_state=initial_state, output_final_state=output_final_state, cu_seqlens=cu_seqlens)


def kernel_regression_chunk(
    q, k, v, *, kernel="exp", scale=None, bandwidth=None, ridge=1e-3, initial_state=None, output_final_state=False,
    chunk_size=64, cu_seqlens=None,
):
    """`kernel_regression` by one Cholesky of the whole Gram (exact, O((S + T)^3)); `chunk_size` is unused."""
    check_chunk_size(chunk_size)
    return _run(kernel_chunk_core, q, k, v, kernel=kernel, scale=scale, bandwidth=bandwidth, ridge=ridge,
                initial_state=initial_state, output_final_state=output_final_state, cu_seqlens=cu_seqlens)
