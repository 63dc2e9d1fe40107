"""Empirical retrieval capacity of regmem's ops, measured as black boxes with the SNR of Sec. 2.1 of
*Understanding Transformer from the Perspective of Associative Memory* (Zhong, Xu, Ao, Shi; arXiv:2505.19488,
eqs. 4-6). The paper derives SNR^-1 for kernelised outer-product memories only (`regmem.analysis.snr`); here the
same measurement runs on any memory that reads values linearly, so the update rules of its Table 2 (linear
attention, delta rule, least squares, softmax attention) and HLA can be compared on one curve, SNR^-1 against N.

Protocol, per trial (the batch dimension holds the trials):
    tokens 1..N   N random pairs (k_j, v_j) written in order, with q_j = k_j (only HLA reads q when writing);
    token N + 1   the probe: q = k_i for a uniformly drawn stored index i, k = 0, v = 0 and step size 0, so it
                  writes nothing; the op's output there is o = c v_i + r (eq. 4).
    c             read exactly through one extra value channel that is 1 for pair i and 0 elsewhere ("marker"):
                  every op here weights the values with one weight per pair, shared by all value channels, so that
                  channel's output is the weight of v_i. ("projection", c = <o, v_i> / ||v_i||^2, needs no such
                  assumption but moves the noise along v_i into the signal: with d_v channels it reports about
                  rho (1 - 1/d_v) / (1 + rho / d_v) for a true rho, e.g. 10.3 for rho = 16, d_v = 32.)
    SNR^-1        sum ||r||^2 / sum c^2 ||v_i||^2 over the trials (ratio of sums: c varies with the probe's position).

Keys lie on the sphere ||k||^2 = d_k and values on ||v||^2 = d_v (the fixed probe norm of the closed forms, now for
every pair), so linear attention measures exactly (N - 1) / d_k. Per op (`CAPACITY_OPS`):
    linear_attn    S = sum_j k_j v_j^T, scale 1: the linear-kernel memory of eqs. 1 and 7.
    delta_rule     unit keys k / sqrt(d_k) and beta = 1, so each write overwrites the newest pair exactly
                   (beta ||k||^2 = 1; the rule is stable only for beta ||k||^2 in (0, 2)); the probe has beta = 0.
    least_squares  ridge 1e-6 (near the min-norm interpolant), scale 1: exact recall while N <= d_k.
    softmax_attn   scale d_k^-1/2, i.e. the exp kernel at tau = sqrt(d_k), normalised (eq. 18).
    hla2           second-order HLA (masked, unnormalised), scale d_k^-1/2: pair j is stored under S_j q_j.
    deltaformer    softmax erase and read at scale d_k^-1/2 (eqs. 94-95), alpha = beta = 1; the probe has alpha =
                   beta = 0. Its output is still linear in V with one weight per pair (O = P (I + A)^{-1} V), so the
                   marker reads c exactly.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from regmem.ops import delta_rule, deltaformer, hla2, least_squares, linear_attn, softmax_attn

# A memory under test: (q, k [B, T, 1, K], v [B, T, 1, V], write [B, T, 1] = 1 for a stored pair, 0 at the probe)
# -> o [B, T, 1, V].
Memory = Callable[[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]
GAINS = ("marker", "projection")
_BLOCK_FLOATS = 1 << 24  # per block of trials; the T x T attention scores and T x K x K solves dominate


def _delta_rule(q, k, v, write):
    K = k.shape[-1]
    return delta_rule(q, k * K**-0.5, v, write, scale=1.0)[0]


CAPACITY_OPS: dict[str, Memory] = {
    "linear_attn": lambda q, k, v, write: linear_attn(q, k, v, scale=1.0)[0],
    "delta_rule": _delta_rule,
    "least_squares": lambda q, k, v, write: least_squares(q, k, v, ridge=1e-6, scale=1.0)[0],
    "softmax_attn": lambda q, k, v, write: softmax_attn(q, k, v, scale=k.shape[-1] ** -0.5)[0],
    "hla2": lambda q, k, v, write: hla2(q, k, v, scale=k.shape[-1] ** -0.5)[0],
    "deltaformer": lambda q, k, v, write: deltaformer(q, k, v, alpha=write, beta=write)[0],
}


def _resolve(op: str | Memory) -> Memory:
    if callable(op):
        return op
    if op not in CAPACITY_OPS:
        raise ValueError(f"op must be one of {tuple(CAPACITY_OPS)} or a callable, got {op!r}")
    return CAPACITY_OPS[op]


def _check_args(N, d_k, d_v, trials, gain) -> None:
    for name, value, low in (("N", N, 1), ("d_k", d_k, 1), ("d_v", d_v, 1), ("trials", trials, 1)):
        if isinstance(value, bool) or not isinstance(value, int) or value < low:
            raise ValueError(f"{name} must be an int >= {low}, got {value!r}")
    if gain not in GAINS:
        raise ValueError(f"gain must be one of {GAINS}, got {gain!r}")


def _sphere(gen, shape, dtype) -> torch.Tensor:
    """Gaussian directions scaled to norm sqrt(dim): [*shape] (drawn in float32, then cast)."""
    x = torch.randn(*shape, generator=gen).to(dtype)
    return x * (shape[-1] ** 0.5 / x.norm(dim=-1, keepdim=True))


def probe_sequence(keys: torch.Tensor, values: torch.Tensor, index: torch.Tensor):
    """The stored pairs followed by the probe of pair `index`: keys [b, N, d_k], values [b, N, d_v], index [b] ->
    q, k [b, N + 1, 1, d_k], v [b, N + 1, 1, d_v + 1] (the last channel marks pair `index`) and write [b, N + 1, 1]
    (0 at the probe)."""
    b, N, d_k = keys.shape
    rows = torch.arange(b)
    probe_key = keys[rows, index].unsqueeze(1)  # [b, 1, d_k]
    q = torch.cat([keys, probe_key], dim=1)  # [b, N + 1, d_k]
    k = torch.cat([keys, torch.zeros_like(probe_key)], dim=1)  # [b, N + 1, d_k]
    v = torch.cat([values, torch.zeros_like(values[:, :1])], dim=1)  # [b, N + 1, d_v]
    marker = torch.zeros_like(v[..., :1])  # [b, N + 1, 1]
    marker[rows, index] = 1.0
    v = torch.cat([v, marker], dim=-1)  # [b, N + 1, d_v + 1]
    write = torch.ones_like(v[..., 0])
    write[:, -1] = 0.0
    return q.unsqueeze(2), k.unsqueeze(2), v.unsqueeze(2), write.unsqueeze(2)


def measure_op_inverse_snr(op: str | Memory, N: int, d_k: int, d_v: int = 32, *, trials: int = 64,
                           seed: int | torch.Generator = 0, dtype: torch.dtype = torch.float64,
                           gain: str = "marker") -> float:
    """SNR^-1 of an op used as a memory of N pairs (protocol in the module docstring): a name of CAPACITY_OPS or a
    callable `Memory`. Trials run in blocks (the batch dimension); seed: an int or a torch.Generator."""
    memory = _resolve(op)
    _check_args(N, d_k, d_v, trials, gain)
    gen = seed if isinstance(seed, torch.Generator) else torch.Generator().manual_seed(seed)
    T = N + 1
    per_block = max(1, _BLOCK_FLOATS // (T * (T + d_k * d_k + d_k + d_v)))
    noise, signal = torch.zeros((), dtype=dtype), torch.zeros((), dtype=dtype)
    for start in range(0, trials, per_block):
        b = min(per_block, trials - start)
        keys, values = _sphere(gen, (b, N, d_k), dtype), _sphere(gen, (b, N, d_v), dtype)
        index = torch.randint(N, (b,), generator=gen)
        v_i = values[torch.arange(b), index]  # [b, d_v]
        with torch.no_grad():
            o = memory(*probe_sequence(keys, values, index))[:, -1, 0]  # [b, d_v + 1], the probe's read
        c = o[:, -1] if gain == "marker" else (o[:, :-1] * v_i).sum(-1) / d_v
        r = o[:, :-1] - c.unsqueeze(-1) * v_i
        noise += r.square().sum()
        signal += (c.square() * d_v).sum()
    return (noise / signal).item()


def capacity_curve(op: str | Memory, Ns, d_k: int, d_v: int = 32, *, trials: int = 64,
                   seed: int = 0, dtype: torch.dtype = torch.float64, gain: str = "marker") -> list[float]:
    """SNR^-1 of `op` at each N of `Ns` (fixed d_k), one `measure_op_inverse_snr` per N with seed `seed`."""
    return [measure_op_inverse_snr(op, int(N), d_k, d_v, trials=trials, seed=seed, dtype=dtype, gain=gain)
            for N in Ns]
