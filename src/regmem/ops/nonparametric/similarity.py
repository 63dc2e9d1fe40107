"""The query-key similarity of the nonparametric memories (*Test-time regression*, arXiv:2501.12352, Sec. 4
Vignette 4, eqs. 48-51): the weight s(k_i, q) of pair i in the regression that answers q; and the kernels (Gram
functions) of exact kernel regression (eqs. 42-43).

Every weight is exp(logit) with logit = scale * q'.k' for transformed q', k', so one code path (and torch SDPA)
serves both kernels:
  - exponential (softmax) kernel: s = exp(scale * q.k), `scale=None` means K ** -0.5 (eq. 1);
  - Gaussian kernel of bandwidth B: s = exp(-||k - q||^2 / B) (eq. 51 with s_exp,B). Per query this is
    exp((2 q.k - ||k||^2) / B) times a factor exp(-||q||^2 / B) that cancels in every normalised regression, so
    q' = [q, 1], k' = [k, -||k||^2 / 2] and scale = 2 / B (exact for keys of any norm);
  - `qk_norm=True` L2-normalises q and k first (QK-norm). With unit-norm keys the exponential kernel of
    temperature 1 / scale *is* the Gaussian kernel with B = 2 / scale (eq. 51; only the keys need unit norm).

Kernel regression's kernels k(a, b) = phi(a).phi(b): "exp" exp(scale a.b) (scale None -> K ** -0.5), "gaussian"
exp(-||a - b||^2 / bandwidth) (the exact kernel value: that regression is not normalised, so no per-query constant
may be dropped), "linear" a.b (dual ridge regression), or a positive semi-definite callable (a [..., n, K],
b [..., m, K]) -> Gram [..., n, m].

Shapes: q: [..., Tq, K], k: [..., Tk, K] -> logits [..., Tq, Tk].
"""

from __future__ import annotations

from functools import partial

import torch
import torch.nn.functional as F
from einops import rearrange

REGRESSION_KERNELS = ("exp", "gaussian", "linear")  # the kernels of kernel_regression, by name


def similarity_features(q: torch.Tensor, k: torch.Tensor, *, scale, bandwidth, qk_norm):
    """(q', k', scale') with logits = scale' * q'.k' equal, per query up to an additive constant, to log s(k, q).

    q: [..., K], k: [..., K] -> q': [..., K'], k': [..., K'] with K' = K, or K + 1 for a Gaussian kernel."""
    if qk_norm:
        q, k = F.normalize(q, dim=-1), F.normalize(k, dim=-1)
    if bandwidth is None:
        return q, k, (q.shape[-1] ** -0.5 if scale is None else float(scale))
    q_aug = torch.cat([q, torch.ones_like(q[..., :1])], dim=-1)  # [..., K + 1]
    k_aug = torch.cat([k, -0.5 * k.pow(2).sum(-1, keepdim=True)], dim=-1)  # [..., K + 1]
    return q_aug, k_aug, 2.0 / bandwidth


def allowed_pairs(Tq: int, Tk: int, offset: int, key_mask=None, device=None) -> torch.Tensor:
    """True where query t, at absolute position offset + t, may use pair j (at position j): j <= offset + t.

    With `key_mask` ([B, L] bool, L >= Tk; the Tk pairs are its first Tk, as the streamed forms pass prefixes)
    also key_mask[j] or j == offset + t: a masked pair is hidden from every query but its own, so no row is
    empty (a padded query attends to itself). Returns [Tq, Tk], or [B, 1, Tq, Tk] with `key_mask`."""
    query_pos = torch.arange(offset, offset + Tq, device=device).unsqueeze(-1)  # [Tq, 1]
    key_pos = torch.arange(Tk, device=device)  # [Tk]
    allowed = key_pos <= query_pos  # [Tq, Tk]
    if key_mask is None:
        return allowed
    return allowed & (key_mask[:, None, None, :Tk] | (key_pos == query_pos))  # [B, 1, Tq, Tk]


def causal_logits(q: torch.Tensor, k: torch.Tensor, scale: float, offset: int = 0, key_mask=None) -> torch.Tensor:
    """q: [..., Tq, K'], k: [..., Tk, K'] -> scale * q k^T with -inf where query t may not use pair j
    (`allowed_pairs`; with `key_mask` [B, L], q: [B, H, Tq, K'])."""
    logits = scale * (q @ k.transpose(-1, -2))  # [..., Tq, Tk]
    allowed = allowed_pairs(*logits.shape[-2:], offset, key_mask, device=q.device)
    return logits.masked_fill(~allowed, float("-inf"))


def heads_first(q, k, v):
    """q: [B, T, H, K], k: [B, L, H, K], v: [B, L, H, V] -> [B, H, T, K], [B, H, L, K], [B, H, L, V]."""
    q = rearrange(q, "b t h d -> b h t d")  # [B, H, T, K]
    k = rearrange(k, "b p h d -> b h p d")  # [B, H, L, K]
    v = rearrange(v, "b p h d -> b h p d")  # [B, H, L, V]
    return q, k, v


def softmax_features(q, k, v, *, scale, bandwidth, qk_norm):
    """q: [B, T, H, K], k: [B, L, H, K], v: [B, L, H, V] -> heads-first q', k', v and the logit scale."""
    q, k, scale = similarity_features(q, k, scale=scale, bandwidth=bandwidth, qk_norm=qk_norm)
    return (*heads_first(q, k, v), scale)


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


def ridged_gram(gram, k: torch.Tensor, ridge: float) -> torch.Tensor:
    """k: [B, H, P, K] -> k(K, K) + ridge I: [B, H, P, P]."""
    eye = torch.eye(k.shape[-2], dtype=k.dtype, device=k.device)
    return gram(k, k) + ridge * eye
