"""Reference forms of the nonparametric memories: each query's regression solved as literally as possible.

*Test-time regression* (Wang, Shi, Fox; arXiv:2501.12352), Sec. 4 Vignette 4:
  - softmax attention, eq. (50): the materialised causal weight matrix, softmax, times V;
  - local polynomial regression of degree p, eqs. (48)-(49) and (52): per query, the weighted ridge least squares
    with design rows every monomial of d_i = k_i - q_t up to degree p ([1] for p = 0, [1, d^T] for p = 1,
    [1, d^T, vec_sym(d d^T)^T] for p = 2: C(K + p, p) columns), W_t = diag(softmax weights):
        (X_t^T W_t X_t + ridge * diag(0, 1, ..., 1)) M = X_t^T W_t V_t,    o_t = M[0]  (the intercept).
    The ridge leaves the intercept unpenalised, so eq. (54) (M^[0] = v_bar - M^[1] d_bar) still holds; p = 0 is
    softmax attention (Nadaraya-Watson, eq. 50), p = 1 local linear attention (eq. 52). It materialises the design
    of every query, [B, H, T, S + T, C(K + p, p)]: small T and small K only (K <= 16 for p = 2);
  - exact kernel ridge regression, eqs. (42)-(43): per prefix t, one t x t `torch.linalg.solve`, O(T^4) in all.

Every core: q: [B, T, H, K]; k: [B, T, H, K]; v: [B, T, H, V]; initial_state: KVState of S cached pairs or None.
Query t uses pairs j <= S + t (state.py). Returns o: [B, T, H, V] and the KVState of the S + T pairs.

Legend: B batch, T new tokens, S cached pairs, L = S + T all pairs, H heads, K key dim, V value dim,
P = C(K + p, p) design columns.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from einops import rearrange

from regmem.ops.common import cholesky_or_nan
from regmem.ops.nonparametric.similarity import (
    causal_logits,
    heads_first,
    make_gram,
    ridged_gram,
    similarity_features,
    softmax_features,
)
from regmem.ops.nonparametric.state import KVState, with_cache


def softmax_reference_core(q, k, v, *, initial_state, scale, bandwidth, qk_norm, key_mask):
    """Eq. (50) literally: w_ti = s(k_i, q_t) / sum_{j <= S + t} s(k_j, q_t), then o_t = sum_i w_ti v_i."""
    k, v, offset = with_cache(k, v, initial_state)
    qh, kh, vh, scale = softmax_features(q, k, v, scale=scale, bandwidth=bandwidth, qk_norm=qk_norm)
    weights = causal_logits(qh, kh, scale, offset, key_mask).softmax(dim=-1)  # [B, H, T, S + T]
    o = weights @ vh  # [B, H, T, V]
    return rearrange(o, "b h t v -> b t h v"), KVState(k, v)


def monomials(d: torch.Tensor, degree: int) -> torch.Tensor:
    """d: [..., K] -> every monomial of d up to `degree`: [..., C(K + degree, degree)], the constant 1 first."""
    columns = [torch.ones_like(d[..., :1])]  # [..., 1]
    if degree >= 1:
        columns.append(d)  # [..., K]
    if degree >= 2:
        a, b = torch.triu_indices(d.shape[-1], d.shape[-1], device=d.device)
        columns.append(d[..., a] * d[..., b])  # [..., K (K + 1) / 2], d_a d_b for a <= b
    return torch.cat(columns, dim=-1)  # [..., P]


def local_polynomial_fit(q, k, v, *, offset, degree, scale, bandwidth, qk_norm, ridge, key_mask):
    """The intercept of each query's weighted ridge least squares (eqs. 48, 52): q: [B, T, H, K];
    k: [B, L, H, K]; v: [B, L, H, V]; query t uses pairs j <= offset + t (those of key_mask [B, L] bool, and its
    own; None means all). Returns o: [B, T, H, V]."""
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
    # Symmetric positive definite (the intercept's row has sum w = 1, the rest the ridge), so Cholesky; an LU solve
    # of this batch with 2 MKL threads returned invalid pivots on some inputs (regmem showcase, float32 and float64).
    L = cholesky_or_nan(gram + torch.diag(ridge * penalty))  # NaN for a query whose fit reads a NaN
    M = torch.cholesky_solve(rhs, L)  # [B, H, T, P, V], [M^[0]; M^[1]; ...]
    return rearrange(M[..., 0, :], "b h t v -> b t h v")  # M^[0]


def local_polynomial_reference_core(q, k, v, *, initial_state, degree, scale, bandwidth, qk_norm, ridge, key_mask):
    """Eqs. (48)-(49): every query's fit at once (materialises [B, H, T, S + T, P])."""
    k, v, offset = with_cache(k, v, initial_state)
    o = local_polynomial_fit(q, k, v, offset=offset, degree=degree, scale=scale, bandwidth=bandwidth,
                             qk_norm=qk_norm, ridge=ridge, key_mask=key_mask)
    return o, KVState(k, v)


def local_linear_reference_core(q, k, v, *, initial_state, scale, bandwidth, qk_norm, ridge, key_mask):
    """Eq. (52) literally: the local polynomial fit of degree 1, a (1 + K)-dim weighted least squares per query
    with design rows [1, (k_i - q_t)^T], solved for all queries at once."""
    return local_polynomial_reference_core(q, k, v, initial_state=initial_state, degree=1, scale=scale,
                                           bandwidth=bandwidth, qk_norm=qk_norm, ridge=ridge, key_mask=key_mask)


def kernel_reference_core(q, k, v, *, initial_state, kernel, scale, bandwidth, ridge):
    """Eq. (43) per prefix: o_t = V_p^T (k(K_p, K_p) + ridge I)^{-1} k(K_p, q_t) with p = S + t + 1."""
    k, v, offset = with_cache(k, v, initial_state)
    gram = make_gram(kernel, scale, bandwidth, q.shape[-1])
    qh, kh, vh = heads_first(q, k, v)
    outputs = []
    for t in range(qh.shape[2]):
        p = offset + t + 1
        alpha = torch.linalg.solve(ridged_gram(gram, kh[:, :, :p], ridge), gram(kh[:, :, :p], qh[:, :, t:t + 1]))
        outputs.append(alpha.transpose(-1, -2) @ vh[:, :, :p])  # [B, H, 1, V]; alpha: [B, H, p, 1]
    o = torch.cat(outputs, dim=2) if outputs else vh.new_zeros(*vh.shape[:2], 0, vh.shape[-1])  # [B, H, T, V]
    return rearrange(o, "b h t v -> b t h v"), KVState(k, v)
