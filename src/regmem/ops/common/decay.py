"""Log-space decay sums, each computed as a direct sum of the gates it spans.

Never form a decay as the difference of two long cumulative sums: in float32 `b_t - b_s` of two large
cumsums loses ~|b| * 6e-8 of absolute accuracy in the exponent. Every helper below sums only the gates that a
factor spans, so a product of retention factors prod_{j=s+1}^{t} exp(g_j) is as accurate as its own terms.
Gates have the time axis at dim `dim` (default -1) and may carry trailing channel dims after it.
"""

from __future__ import annotations

import torch


def segsum(g: torch.Tensor) -> torch.Tensor:
    """g: [..., T] -> D: [..., T, T] with D[t, s] = sum_{j=s+1}^{t} g_j for s <= t and -inf above the diagonal.

    exp(D) is the causal decay matrix L of the parallel form of eq. (16) of *Test-time regression* (arXiv:2501.12352),
    L_{ts} = prod_{j=s+1}^t gamma_j."""
    T = g.shape[-1]
    x = g.unsqueeze(-1).expand(*g.shape, T)  # [..., T(t), T(s)], x[t, s] = g_t
    strictly_lower = torch.ones(T, T, dtype=torch.bool, device=g.device).tril(-1)
    x = x.masked_fill(~strictly_lower, 0.0)  # keep g_t only where t > s
    D = x.cumsum(dim=-2)  # D[t, s] = sum_{s < j <= t} g_j
    causal = torch.ones(T, T, dtype=torch.bool, device=g.device).tril()
    return D.masked_fill(~causal, float("-inf"))


def suffix_exclusive(g: torch.Tensor, dim: int) -> torch.Tensor:
    """out[s] = sum_{j > s} g_j along `dim` (the decay from position s to the end of its block)."""
    last = torch.zeros_like(g.narrow(dim, 0, 1))
    shifted = torch.cat([g.narrow(dim, 1, g.shape[dim] - 1), last], dim=dim)  # shifted[s] = g_{s+1}
    return shifted.flip(dim).cumsum(dim).flip(dim)
