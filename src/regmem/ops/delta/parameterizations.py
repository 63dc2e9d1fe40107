"""Parameterisations of the gated delta rule: ops that compute (g, beta, v) from their own arguments and run the
forms of the delta-rule kernel (api.py); none has a kernel of its own.

All are M_t = a_t M_{t-1}(I - b_t k_t k_t^T) + c_t v_t k_t^T (*Test-time regression*, Wang, Shi, Fox;
arXiv:2501.12352, Sec. 4 Vignette 3), in regmem's layout S = M^T, o_t = scale * S_t^T q_t:
  - `longhorn`:  Longhorn (Liu et al. 2024, arXiv:2407.14207), the closed form of the implicit online step
    M_t = argmin_M 1/2 ||M - M_{t-1}||_F^2 + delta_t/2 ||v_t - M k_t||^2 (TTR eq. 30-31):
    beta_t = delta_t / (1 + delta_t ||k_t||^2). Scalar delta per head, as in TTR (the original is per channel).
  - `nlms`:      normalised LMS / Kaczmarz / projection (TTR eq. 32-33), the delta -> inf limit:
    beta_t = 1 / (||k_t||^2 + eps), so M_t k_t = v_t up to eps.
  - `leaky_lms`: SGD on 1/2 ||v_t - M k_t||^2 + lam_t/2 ||M||_F^2 (TTR eq. 34-37),
    M_t = (1 - beta_t lam_t) M_{t-1} + beta_t (v_t - M_{t-1} k_t) k_t^T, which is Gated DeltaNet under
    TTR eq. (38)-(41): alpha = 1 - beta lam, eta = beta / alpha, v' = alpha v.
  - `decoupled_gated_delta_rule`: the decoupled weight decay TTR proposes after eq. (41) (as AdamW decouples
    it from the step size), M_t = (1 - lam_t) M_{t-1} + beta_t (v_t - M_{t-1} k_t) k_t^T, the same map with
    beta lam replaced by lam.
||k_t||^2 is the squared norm of the key as passed (before any scale; scale only multiplies q).

Legend: B batch, T time, H heads, K key dim, V value dim, N sequences.
"""

from __future__ import annotations

import torch

from regmem.ops.common import check_qkv, check_token_scalar, checks_values, compute_dtype, op
from regmem.ops.delta.api import FORMS, delta_call


@op(**FORMS)
def longhorn(q, k, v, delta, *, scale=None, initial_state=None, cu_seqlens=None):
    """Longhorn: the delta rule with beta_t = delta_t / (1 + delta_t ||k_t||^2), TTR eq. (30)-(31).

    Args:
        q, k: [B, T, H, K]; v: [B, T, H, V].
        delta: [B, T, H] weight of the new pair in the proximal objective, >= 0 (0 leaves M unchanged).
        scale, initial_state ([N, H, K, V]), output_final_state, mode, chunk_size, cu_seqlens: as
            `gated_delta_rule`.

    Returns:
        o: [B, T, H, V] in the input dtype, and the final state [N, H, K, V] or None.
    """
    B, T, H, _, _ = check_qkv(q, k, v)
    check_token_scalar("delta", delta, B, T, H, low=0.0)
    delta = delta.to(compute_dtype(q))
    beta = delta / (1 + delta * _squared_norm(k))  # [B, T, H]
    return delta_call(q, k, v, None, beta, scale=scale, initial_state=initial_state, cu_seqlens=cu_seqlens)


@op(**FORMS)
def nlms(q, k, v, *, eps=1e-6, scale=None, initial_state=None, cu_seqlens=None):
    """Normalised LMS (Kaczmarz): the delta rule with beta_t = 1 / (||k_t||^2 + eps), TTR eq. (33).

    Args:
        q, k: [B, T, H, K]; v: [B, T, H, V].
        eps: >= 0, added to ||k_t||^2; with eps = 0 every key must be non-zero.
        scale, initial_state ([N, H, K, V]), output_final_state, mode, chunk_size, cu_seqlens: as
            `gated_delta_rule`.

    Returns:
        o: [B, T, H, V] in the input dtype, and the final state [N, H, K, V] or None.
    """
    check_qkv(q, k, v)
    if not isinstance(eps, int | float) or eps < 0:
        raise ValueError(f"eps must be a float >= 0, got {eps!r}")
    beta = 1 / (_squared_norm(k) + eps)  # [B, T, H]
    return delta_call(q, k, v, None, beta, scale=scale, initial_state=initial_state, cu_seqlens=cu_seqlens)


@op(**FORMS)
def leaky_lms(q, k, v, beta, lam, *, scale=None, initial_state=None, cu_seqlens=None):
    """Leaky LMS: M_t = (1 - beta_t lam_t) M_{t-1} + beta_t (v_t - M_{t-1} k_t) k_t^T, TTR eq. (37), run as Gated
    DeltaNet by TTR eq. (38)-(41).

    Args:
        q, k: [B, T, H, K]; v: [B, T, H, V].
        beta: [B, T, H] SGD step size, >= 0.
        lam: [B, T, H] L2 regularisation strength, >= 0, with beta * lam < 1 (the retention 1 - beta lam > 0).
        scale, initial_state ([N, H, K, V]), output_final_state, mode, chunk_size, cu_seqlens: as
            `gated_delta_rule`.

    Returns:
        o: [B, T, H, V] in the input dtype, and the final state [N, H, K, V] or None.
    """
    B, T, H, _, _ = check_qkv(q, k, v)
    check_token_scalar("beta", beta, B, T, H, low=0.0)
    check_token_scalar("lam", lam, B, T, H, low=0.0)
    decay = beta.to(compute_dtype(q)) * lam.to(compute_dtype(q))  # [B, T, H]
    _check_below_one("lam", decay, "beta * lam")
    return _weight_decay_call(q, k, v, beta, decay, scale=scale, initial_state=initial_state, cu_seqlens=cu_seqlens)


@op(**FORMS)
def decoupled_gated_delta_rule(q, k, v, beta, lam, *, scale=None, initial_state=None, cu_seqlens=None):
    """Decoupled weight decay: M_t = (1 - lam_t) M_{t-1} + beta_t (v_t - M_{t-1} k_t) k_t^T (TTR, after
    eq. 41), run as Gated DeltaNet with alpha = 1 - lam, eta = beta / alpha, v' = alpha v.

    Args:
        q, k: [B, T, H, K]; v: [B, T, H, V].
        beta: [B, T, H] SGD step size, >= 0.
        lam: [B, T, H] weight decay, in [0, 1), independent of beta.
        scale, initial_state ([N, H, K, V]), output_final_state, mode, chunk_size, cu_seqlens: as
            `gated_delta_rule`.

    Returns:
        o: [B, T, H, V] in the input dtype, and the final state [N, H, K, V] or None.
    """
    B, T, H, _, _ = check_qkv(q, k, v)
    check_token_scalar("beta", beta, B, T, H, low=0.0)
    check_token_scalar("lam", lam, B, T, H, low=0.0)
    _check_below_one("lam", lam, "lam")
    return _weight_decay_call(q, k, v, beta, lam.to(compute_dtype(q)), scale=scale, initial_state=initial_state,
                              cu_seqlens=cu_seqlens)


def _weight_decay_call(q, k, v, beta, decay, **options):
    """M_t = (1 - decay_t) M_{t-1} + beta_t (v_t - M_{t-1} k_t) k_t^T as Gated DeltaNet (TTR eq. 38-41).

    In S = M^T: S_t = ((1 - decay) I - beta k k^T) S_{t-1} + beta k v^T, and the kernel's
    (I - eta k k^T)(alpha S_{t-1}) + eta k v'^T matches it term by term with alpha = 1 - decay (alpha is a
    scalar, so "decay first" commutes with the delta step), alpha eta = beta and eta v' = beta v."""
    dtype = compute_dtype(q)
    alpha = 1 - decay  # [B, T, H], in (0, 1]
    g = torch.log1p(-decay)  # [B, T, H], log alpha
    eta = beta.to(dtype) / alpha  # [B, T, H]
    v_prime = alpha.unsqueeze(-1) * v.to(dtype)  # [B, T, H, V]
    return delta_call(q.to(dtype), k.to(dtype), v_prime, g, eta, out_dtype=q.dtype, **options)


def _squared_norm(k: torch.Tensor) -> torch.Tensor:
    """[B, T, H, K] -> [B, T, H], ||k_t||^2 in the compute dtype."""
    return k.to(compute_dtype(k)).pow(2).sum(-1)


def _check_below_one(name: str, decay: torch.Tensor, expression: str) -> None:
    """The retention 1 - decay must stay positive, or its log gate does not exist (a value check)."""
    if checks_values(decay) and decay.numel():
        with torch.no_grad():
            if not bool((decay < 1).all()):  # not `(decay >= 1).any()`: every comparison with NaN is False
                raise ValueError(f"{name}: {expression} must be < 1 everywhere (the retention 1 - {expression} > 0), "
                                 f"got max {decay.max().item():.3g}")
