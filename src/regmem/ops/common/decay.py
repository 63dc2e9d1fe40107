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
    return _SegmentSums.apply(g)


class _SegmentSums(torch.autograd.Function):
    """segsum with its backward written out: autograd through the cumsum over the [..., T, T] matrix would run
    flip-cumsum-flip over it, three passes where two serve (dD below is the gradient of D)."""

    @staticmethod
    def forward(g):
        T = g.shape[-1]
        x = g.unsqueeze(-1).expand(*g.shape, T)  # [..., T(t), T(s)], x[t, s] = g_t
        strictly_lower = torch.ones(T, T, dtype=torch.bool, device=g.device).tril(-1)
        D = x.masked_fill(~strictly_lower, 0.0).cumsum(dim=-2)  # D[t, s] = sum_{s < j <= t} g_j
        causal = torch.ones(T, T, dtype=torch.bool, device=g.device).tril()
        return D.masked_fill_(~causal, float("-inf"))

    @staticmethod
    def setup_context(ctx, inputs, output):
        pass

    @staticmethod
    def backward(ctx, dD):
        # dg_j = sum_{t >= j} sum_{s < j} dD[t, s]: a prefix sum along s, then a masked sum down the column t >= j.
        # Only entries with s < t are ever read, so the (-inf) upper triangle's gradient never enters.
        T = dD.shape[-1]
        if T < 2:
            return dD.new_zeros(dD.shape[:-1])
        before = dD[..., :-1].cumsum(dim=-1)  # [..., T(t), T-1(j-1)], sum_{s < j} dD[t, s] in column j - 1
        from_j_on = torch.ones(T, T - 1, dtype=torch.bool, device=dD.device).tril(-1)  # t >= j, i.e. t > j - 1
        dg = before.masked_fill(~from_j_on, 0.0).sum(dim=-2)  # [..., T-1], dg_1 .. dg_{T-1}
        return torch.cat([dg.new_zeros(*dg.shape[:-1], 1), dg], dim=-1)  # dg_0 = 0: no sum contains g_0


def suffix_exclusive(g: torch.Tensor, dim: int) -> torch.Tensor:
    """out[s] = sum_{j > s} g_j along `dim` (the decay from position s to the end of its block)."""
    last = torch.zeros_like(g.narrow(dim, 0, 1))
    shifted = torch.cat([g.narrow(dim, 1, g.shape[dim] - 1), last], dim=dim)  # shifted[s] = g_{s+1}
    return shifted.flip(dim).cumsum(dim).flip(dim)


def chunk_decays(g: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """g: [..., C, K|1], log gates of a chunk (time at dim -2) -> the three decays every chunk form uses:
    e^{b_t} from the chunk start to t (inclusive) [..., C, K|1], e^{b_C - b_s} from s (exclusive) to the chunk end
    [..., C, K|1], and e^{b_C} across the whole chunk [..., K|1]. Each exponent is a direct sum of its gates."""
    return _ChunkDecays.apply(g)


class _ChunkDecays(torch.autograd.Function):
    """The backward written out: autograd through cumsum, suffix_exclusive and exp ran ~12 passes over a diagonal
    gate ([..., C, K]); here one cumsum serves. With db = d(decay) ⊙ decay for each of the three,
    dg_j = sum_{t >= j} db_in_t + sum_{s < j} db_out_s + db_total
         = (sum_t db_in_t + db_total) + sum_{s < j} (db_out_s - db_in_s)."""

    @staticmethod
    def forward(g):
        return torch.exp(g.cumsum(dim=-2)), torch.exp(suffix_exclusive(g, dim=-2)), torch.exp(g.sum(dim=-2))

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.save_for_backward(*output)

    @staticmethod
    def backward(ctx, d_in, d_out, d_total):
        e_in, e_out, e_total = ctx.saved_tensors
        db_in = torch.zeros_like(e_in) if d_in is None else d_in * e_in  # [..., C, K|1]
        db_out = torch.zeros_like(e_out) if d_out is None else d_out * e_out
        whole = db_in.sum(dim=-2, keepdim=True)  # [..., 1, K|1]
        if d_total is not None:
            whole = whole + (d_total * e_total).unsqueeze(-2)
        before = (db_out - db_in).cumsum(dim=-2)  # inclusive; shifted by one below to sum s < j
        return torch.cat([whole, whole + before[..., :-1, :]], dim=-2)
