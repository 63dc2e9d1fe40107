"""Local polynomial regression of degree p as attention: the literal weighted least-squares fit per query.

Implements eqs. (48)-(50) and (52) of *Test-time regression* (Wang, Shi, Fox; arXiv:2501.12352, Sec. 4
Vignette 4; ttr.md §2.2 L19-L22). Each query q_t fits its own regression to the pairs i <= t, weighted by the
softmax weights w_i = s(k_i, q_t) / sum_j s(k_j, q_t) (similarity.py):
    m_{p,t}(q_t) = argmin_m  1/2 sum_i w_i ||v_i - m(k_i)||^2 + ridge/2 ||non-intercept coefficients||^2  (eq. 48)
    m(k) = M^[0] + M^[1](k - q_t) + M^[2](k - q_t, k - q_t) + ...                                     (eq. 49)
and answers with the intercept M^[0] = m(q_t). With d_i = k_i - q_t the design matrix X_t has row i equal to
every monomial of d_i up to degree p ([1] for p = 0, [1, d^T] for p = 1 (eq. 52), [1, d^T, vec_sym(d d^T)^T]
for p = 2: C(K + p, p) columns), W_t = diag(w), and the weighted ridge least squares is solved directly:
    (X_t^T W_t X_t + ridge * diag(0, 1, ..., 1)) M = X_t^T W_t V_t,    o_t = M[0].
The ridge leaves the intercept unpenalised, so eq. (54) (M^[0] = v_bar - M^[1] d_bar) still holds; p = 0 is
softmax attention (Nadaraya-Watson, eq. 50) and p = 1 is local linear attention (eq. 52).

This is the spec, not a fast op: it materialises the design of every query, [B, H, T, S + T, C(K + p, p)],
so it is for small T and small K (K <= 16 for p = 2). The fast local linear form is local_linear.py.

Legend: B batch, T new tokens, S cached pairs, H heads, K key dim, V value dim, P = C(K + p, p) design columns.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from einops import rearrange

from regmem.ops.nonparametric.frame import run_nonparametric
from regmem.ops.nonparametric.similarity import causal_logits, check_similarity, similarity_features

DEGREES = (0, 1, 2)
MAX_KEY_DIM_DEGREE_2 = 16  # the p = 2 design has C(K + 2, 2) columns per pair and query: 153 at K = 16


def check_ridge(ridge) -> None:
    """The ridge on the slope block must be a positive float: at 0 the fit is singular while t <= K."""
    if isinstance(ridge, bool) or not isinstance(ridge, int | float) or not math.isfinite(ridge) or ridge <= 0:
        raise ValueError(f"ridge must be a positive finite float, got {ridge!r}")


def monomials(d: torch.Tensor, degree: int) -> torch.Tensor:
    """d: [..., K] -> every monomial of d up to `degree`: [..., C(K + degree, degree)], the constant 1 first."""
    columns = [torch.ones_like(d[..., :1])]  # [..., 1]
    if degree >= 1:
        columns.append(d)  # [..., K]
    if degree >= 2:
        a, b = torch.triu_indices(d.shape[-1], d.shape[-1], device=d.device)
        columns.append(d[..., a] * d[..., b])  # [..., K (K + 1) / 2], d_a d_b for a <= b
    return torch.cat(columns, dim=-1)  # [..., P]


def local_polynomial_core(q, k, v, *, offset, degree, scale, bandwidth, qk_norm, ridge, key_mask):
    """q: [B, T, H, K]; k: [B, S + T, H, K]; v: [B, S + T, H, V]; query t uses pairs j <= offset + t (those of
    key_mask: [B, S + T] bool, and its own; None means all).
    Returns o: [B, T, H, V], the intercept of each query's weighted ridge least squares (eqs. 48, 52)."""
    if qk_norm:
        # the regression lives in the normalised key space, like the weights
        q, k = F.normalize(q, dim=-1), F.normalize(k, dim=-1)
    q_sim, k_sim, sim_scale = similarity_features(q, k, scale=scale, bandwidth=bandwidth, qk_norm=False)
    q_sim = rearrange(q_sim, "b t h k -> b h t k")
    k_sim = rearrange(k_sim, "b l h k -> b h l k")
    logits = causal_logits(q_sim, k_sim, sim_scale, offset, key_mask)  # [B, H, T, L]
    w = torch.softmax(logits, dim=-1)  # [B, H, T, L], W_t = diag(w_t)

    d = rearrange(k, "b l h k -> b h 1 l k") - rearrange(q, "b t h k -> b h t 1 k")  # [B, H, T, L, K], k_i - q_t
    X = monomials(d, degree)  # [B, H, T, L, P], the design X_t of every query
    XtW = X.transpose(-1, -2) * w.unsqueeze(-2)  # [B, H, T, P, L], X_t^T W_t
    gram = XtW @ X  # [B, H, T, P, P], X_t^T W_t X_t
    rhs = XtW @ rearrange(v, "b l h v -> b h 1 l v")  # [B, H, T, P, V], X_t^T W_t V_t
    penalty = torch.ones(X.shape[-1], dtype=q.dtype, device=q.device)
    penalty[0] = 0.0  # the intercept M^[0] is not penalised
    M = torch.linalg.solve(gram + torch.diag(ridge * penalty), rhs)  # [B, H, T, P, V], [M^[0]; M^[1]; ...]
    return rearrange(M[..., 0, :], "b h t v -> b t h v")  # M^[0]


def local_polynomial_reference(q, k, v, *, degree=2, scale=None, bandwidth=None, qk_norm=False, ridge=1e-3):
    """Local polynomial attention of degree p, eqs. (48)-(49) of *Test-time regression* (arXiv:2501.12352),
    by the literal per-query weighted least squares (reference only: materialises [B, H, T, T, C(K + p, p)]).

    Args:
        q, k: [B, T, H, K]; v: [B, T, H, V], one floating dtype (float64 stays float64, others compute in
            float32; the output has the input dtype). Causal: query t regresses on pairs 1..t.
        degree: p in {0, 1, 2}. 0 is softmax attention (Nadaraya-Watson, eq. 50), 1 is local linear attention
            (eq. 52, `local_linear_attn_reference`), 2 adds the design columns vec_sym(d d^T) (needs K <= 16).
        scale, bandwidth, qk_norm: the similarity s(k, q) (similarity.py): exp(scale q.k) with scale=None
            meaning K ** -0.5, or exp(-||k - q||^2 / bandwidth); qk_norm L2-normalises q and k for the weights
            and for the regression.
        ridge: penalty (> 0) on every non-intercept coefficient, relative to the normalised weights (sum 1).

    Returns:
        o: [B, T, H, V], the fitted intercept M^[0] for each query.
    """
    check_similarity(scale, bandwidth, qk_norm)
    check_ridge(ridge)
    if degree not in DEGREES or isinstance(degree, bool):
        raise ValueError(f"degree must be one of {DEGREES}, got {degree!r}")
    if degree == 2 and isinstance(q, torch.Tensor) and q.ndim == 4 and q.shape[-1] > MAX_KEY_DIM_DEGREE_2:
        raise ValueError(f"degree=2 is a reference for small keys: K must be <= {MAX_KEY_DIM_DEGREE_2}, "
                         f"got q with K = {q.shape[-1]}")
    o, _ = run_nonparametric(
        local_polynomial_core, q, k, v, initial_state=None, output_final_state=False, cu_seqlens=None,
        degree=degree, scale=scale, bandwidth=bandwidth, qk_norm=qk_norm, ridge=float(ridge), key_mask=None,
    )
    return o
