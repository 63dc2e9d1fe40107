"""The query-key similarity of the nonparametric memories (*Test-time regression*, arXiv:2501.12352, Sec. 4
Vignette 4, eqs. 48-51; ttr.md §2.2 L19-L22): the weight s(k_i, q) of pair i in the regression that answers q.

Every weight is exp(logit) with logit = scale * q'.k' for transformed q', k', so one code path (and torch SDPA)
serves both kernels:
  - exponential (softmax) kernel: s = exp(scale * q.k), `scale=None` means K ** -0.5 (eq. 1);
  - Gaussian kernel of bandwidth B: s = exp(-||k - q||^2 / B) (eq. 51 with s_exp,B). Per query this is
    exp((2 q.k - ||k||^2) / B) times a factor exp(-||q||^2 / B) that cancels in every normalised regression, so
    q' = [q, 1], k' = [k, -||k||^2 / 2] and scale = 2 / B (exact for keys of any norm);
  - `qk_norm=True` L2-normalises q and k first (QK-norm). With unit-norm keys the exponential kernel of
    temperature 1 / scale *is* the Gaussian kernel with B = 2 / scale (eq. 51; only the keys need unit norm).

Shapes: q: [..., Tq, K], k: [..., Tk, K] -> logits [..., Tq, Tk].
"""

from __future__ import annotations

import torch
import torch.nn.functional as F


def check_similarity(scale, bandwidth, qk_norm) -> None:
    """`scale` and `bandwidth` are exclusive; a bandwidth is a positive number."""
    if scale is not None and not isinstance(scale, int | float):
        raise ValueError(f"scale must be a float or None, got {type(scale).__name__}")
    if bandwidth is not None:
        if scale is not None:
            raise ValueError("pass scale (exponential kernel) or bandwidth (Gaussian kernel), not both")
        if not isinstance(bandwidth, int | float) or not bandwidth > 0:
            raise ValueError(f"bandwidth must be a positive float, got {bandwidth!r}")
    if not isinstance(qk_norm, bool):
        raise ValueError(f"qk_norm must be a bool, got {qk_norm!r}")


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
