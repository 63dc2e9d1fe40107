"""Retrieval signal-to-noise of a kernelised associative memory: Sec. 2.1 and App. A of *Understanding Transformer
from the Perspective of Associative Memory* (Zhong, Xu, Ao, Shi; arXiv:2505.19488).

Store N pairs in S = sum_j v_j phi(k_j)^T and query a stored key: S phi(k_i) = c v_i + r with c = kappa(k_i, k_i)
and r = sum_{j != i} v_j kappa(k_j, k_i) (eqs. 4, 8-9). The inverse SNR is E[||r||^2] / (c^2 ||v_i||^2) with the
probe (k_i, v_i) held fixed and k_j ~ N(0, I_dk), v_j ~ N(0, I_dv) (eq. 5); the cross terms vanish, so
(eq. 57, exact)

    SNR^-1 = (N - 1) E[kappa(k_j, k_i)^2 | s^2] / kappa(k_i, k_i)^2,     s^2 = ||k_i||^2, k_j.k_i ~ N(0, s^2).

Per kernel, given s^2 (App. A; the paper then puts s^2 = d_k and N - 1 -> N):

    linear  1 / s^2                                   eq. 7:  N / d_k
    relu    1 / (2 s^2)                               eq. 15: N / (2 d_k)
    exp     exp((2/tau^2 - 2/tau) s^2)                eq. 13: N / exp(2 (tau - 1) d_k / tau^2)
    solu    (1 + 4 s^2/tau^2) / s^2 exp((2/tau^2 - 2/tau) s^2)
                                                      eq. 17 as printed: 5 N / (d_k exp(2 sqrt d_k)) at tau = sqrt d_k

Erratum: eq. 17 drops a factor e^2; the paper's own derivation gives 5 N / (d_k exp(2 sqrt d_k - 2)).
`paper_inverse_snr(..., as_printed=True)` keeps the printed form so that tests can show the difference.

Also here: the Monte-Carlo estimator (`measure_inverse_snr`), the same measurement on an explicitly built memory
(`measure_inverse_snr_end_to_end`), multi-head averaging (footnote 7: n_h heads with independent keys and shared
values, averaged by W_O), the smallest head dimension at which exp attention recalls reliably (d_k >=
(1 + ln(N) / 2)^2 at tau = sqrt d_k) and the temperature optimum of eq. 13's exponent (tau = 2).
"""

from __future__ import annotations

import math

import torch

from regmem.analysis.kernels import check_kernel, kernel_of_dot, relu_ffn

PROBE_NORMS = ("fixed", "random")
OPTIMAL_EXP_TEMPERATURE = 2.0  # argmax of g(tau) = 2 (tau - 1) / tau^2: g'(tau) = 2 (2 - tau) / tau^3
_BLOCK_FLOATS = 1 << 20  # draws per block of trials: 8 MiB in float64, cache-sized (1.5x faster than 128 MiB blocks)


def _check_sizes(N, d_k, d_v=1, trials=1, num_heads=1) -> None:
    for name, value, low in (("N", N, 2), ("d_k", d_k, 1), ("d_v", d_v, 1), ("trials", trials, 1),
                             ("num_heads", num_heads, 1)):
        if isinstance(value, bool) or not isinstance(value, int) or value < low:
            raise ValueError(f"{name} must be an int >= {low}, got {value!r}")


def _generator(seed: int | torch.Generator) -> torch.Generator:
    if isinstance(seed, torch.Generator):
        return seed
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise ValueError(f"seed must be an int or a torch.Generator, got {type(seed).__name__}")
    return torch.Generator().manual_seed(seed)


def _draw(gen, trials, N, d_k, d_v, num_heads, probe_norm, dtype):
    """One block of trials: probe keys [b, H, d_k], probe values [b, d_v], the other N - 1 keys [b, N-1, H, d_k]
    and values [b, N-1, d_v]. Normals are drawn in float32 (torch's float64 sampler is ~4x slower on CPU) and cast;
    the Monte-Carlo error dwarfs float32 rounding. The probe value always has ||v_i||^2 = d_v, the paper's
    assumption E||v_j||^2 = ||v_i||^2; the probe keys have ||k_i||^2 = d_k with probe_norm="fixed"."""
    def normal(*shape):
        return torch.randn(*shape, generator=gen).to(dtype)

    k_i, v_i = normal(trials, num_heads, d_k), normal(trials, d_v)
    k_other, v_other = normal(trials, N - 1, num_heads, d_k), normal(trials, N - 1, d_v)
    if probe_norm == "fixed":
        k_i = k_i * (d_k**0.5 / k_i.norm(dim=-1, keepdim=True))
    v_i = v_i * (d_v**0.5 / v_i.norm(dim=-1, keepdim=True))
    return k_i, v_i, k_other, v_other


def _blocks(trials: int, floats_per_trial: int):
    per_block = max(1, _BLOCK_FLOATS // floats_per_trial)
    for start in range(0, trials, per_block):
        yield min(per_block, trials - start)


def _check_estimator_args(kernel, N, d_k, d_v, tau, decimals, trials, probe_norm, num_heads) -> None:
    check_kernel(kernel, tau, decimals)
    _check_sizes(N, d_k, d_v, trials, num_heads)
    if probe_norm not in PROBE_NORMS:
        raise ValueError(f"probe_norm must be one of {PROBE_NORMS}, got {probe_norm!r}")


def measure_inverse_snr(kernel: str, N: int, d_k: int, d_v: int = 32, *, tau: float = 1.0, decimals: int = 0,
                        trials: int = 400, probe_norm: str = "fixed", num_heads: int = 1,
                        seed: int | torch.Generator = 0, dtype: torch.dtype = torch.float64) -> float:
    """Monte-Carlo SNR^-1 of eq. 5, vectorised over trials. Each trial draws a probe (k_i, v_i) and N - 1 other
    pairs, computes w_j = kappa(k_j, k_i), r = sum_j w_j v_j and c = kappa(k_i, k_i), and the estimate is the mean
    over probes of ||r||^2 / (c^2 ||v_i||^2): eq. 5 takes the expectation over the other pairs with the probe
    fixed. With probe_norm="fixed" (||k_i||^2 = d_k) every trial has the same signal, so this is the ratio of sums
    sum ||r||^2 / sum c^2 ||v_i||^2; with "random" the probe key keeps its Gaussian norm (linear: (N - 1) /
    (d_k - 2) on average). The probe value always has ||v_i||^2 = d_v.

    num_heads n_h > 1: footnote 7's multi-head read with independent keys per head ([n_h, d_k] per pair), shared
    values, and W_O averaging the heads: w_j = mean_h kappa(k_jh, k_ih), c = mean_h kappa(k_ih, k_ih).

    seed: an int or a torch.Generator (advanced by the draws). Returns a Python float.
    """
    _check_estimator_args(kernel, N, d_k, d_v, tau, decimals, trials, probe_norm, num_heads)
    gen = _generator(seed)
    ratios = []
    for block in _blocks(trials, N * (num_heads * d_k + d_v)):
        k_i, v_i, k_other, v_other = _draw(gen, block, N, d_k, d_v, num_heads, probe_norm, dtype)
        dots = torch.einsum("bnhd,bhd->bnh", k_other, k_i)  # [b, N-1, H]
        w = kernel_of_dot(kernel, dots, tau=tau, decimals=decimals).mean(-1)  # [b, N-1]
        c = kernel_of_dot(kernel, (k_i * k_i).sum(-1), tau=tau, decimals=decimals).mean(-1)  # [b]
        r = torch.einsum("bn,bnv->bv", w, v_other)  # [b, d_v]
        ratios.append(r.square().sum(-1) / (c.square() * v_i.square().sum(-1)))
    return torch.cat(ratios).mean().item()


def _read_memory(kernel, keys, values, q, tau, decimals):
    """Builds the memory of the pairs (keys [b, N, d_k], values [b, N, V]) and reads it at q [b, d_k] -> [b, V]:
    linear: the matrix S = sum_j v_j k_j^T (eq. 1), then S q; relu: the FFN W_V^T relu(W_K q) with W_K = keys and
    W_V = values (eq. 14); exp / solu / round, whose feature space is infinite (or has no finite map): the kernel
    sum sum_j v_j kappa(k_j, q) (eqs. 3, 12)."""
    if kernel == "linear":
        S = torch.einsum("bnv,bnd->bvd", values, keys)  # [b, V, d_k]
        return torch.einsum("bvd,bd->bv", S, q)
    if kernel == "relu":
        return relu_ffn(q.unsqueeze(1), keys, values).squeeze(1)
    w = kernel_of_dot(kernel, torch.einsum("bnd,bd->bn", keys, q), tau=tau, decimals=decimals)  # [b, N]
    return torch.einsum("bn,bnv->bv", w, values)


def measure_inverse_snr_end_to_end(kernel: str, N: int, d_k: int, d_v: int = 32, *, tau: float = 1.0,
                                   decimals: int = 0, trials: int = 400, probe_norm: str = "fixed",
                                   seed: int | torch.Generator = 0, dtype: torch.dtype = torch.float64) -> float:
    """`measure_inverse_snr` on a memory that is actually built (`_read_memory`) from all N pairs, probe included,
    and read at the probe key; o = S phi(k_i) is then split into c v_i + r. c is read exactly through one extra
    value channel, 1 for the probe pair and 0 for the others (the read is linear in the values, one weight per
    pair shared by every channel), and r = o - c v_i. Same draws as `measure_inverse_snr` for the same seed."""
    _check_estimator_args(kernel, N, d_k, d_v, tau, decimals, trials, probe_norm, 1)
    gen = _generator(seed)
    ratios = []
    for block in _blocks(trials, N * (d_k + d_v)):
        k_i, v_i, k_other, v_other = _draw(gen, block, N, d_k, d_v, 1, probe_norm, dtype)
        k_i = k_i.squeeze(1)  # [b, d_k]
        keys = torch.cat([k_i.unsqueeze(1), k_other.squeeze(2)], dim=1)  # [b, N, d_k], the probe first
        values = torch.cat([v_i.unsqueeze(1), v_other], dim=1)  # [b, N, d_v]
        marker = torch.zeros_like(values[..., :1])  # [b, N, 1]
        marker[:, 0] = 1.0
        o = _read_memory(kernel, keys, torch.cat([values, marker], dim=-1), k_i, tau, decimals)  # [b, d_v + 1]
        c = o[:, -1]
        r = o[:, :-1] - c.unsqueeze(-1) * v_i
        ratios.append(r.square().sum(-1) / (c.square() * v_i.square().sum(-1)))
    return torch.cat(ratios).mean().item()


def _round_moments(s2: float, decimals: int) -> tuple[float, float]:
    """E[round(X, decimals)] and E[round(X, decimals)^2] for X ~ N(0, s2), summed over the rounding grid."""
    step, s = 10.0**-decimals, math.sqrt(s2)
    n = torch.arange(-math.ceil(12 * s / step) - 1, math.ceil(12 * s / step) + 2, dtype=torch.float64)
    p = torch.special.ndtr((n + 0.5) * step / s) - torch.special.ndtr((n - 0.5) * step / s)
    return (p * n * step).sum().item(), (p * (n * step) ** 2).sum().item()


def _normalised_moments(kernel: str, s2: float, tau: float, decimals: int) -> tuple[float, float]:
    """(E[kappa | s^2] / kappa_ii, E[kappa^2 | s^2] / kappa_ii^2) for kappa = kappa(k_j, k_i), k_j.k_i ~ N(0, s2)
    and kappa_ii = kappa(k_i, k_i) = f(s2); exp and solu in log space (their terms overflow for large s2 / tau)."""
    if kernel == "linear":
        return 0.0, 1.0 / s2
    if kernel == "relu":
        return 1.0 / math.sqrt(2 * math.pi * s2), 1.0 / (2 * s2)
    if kernel == "round":
        diagonal = round(s2, decimals)
        if diagonal == 0:
            raise ValueError(f"round(||k_i||^2) is 0 for s2={s2}: no signal")
        m1, m2 = _round_moments(s2, decimals)
        return m1 / diagonal, m2 / diagonal**2
    first = math.exp(s2 / (2 * tau**2) - s2 / tau)  # E[e^{X/tau}] / e^{s2/tau}
    second = math.exp(2 * s2 / tau**2 - 2 * s2 / tau)  # E[e^{2X/tau}] / e^{2 s2/tau}
    if kernel == "exp":
        return first, second
    return first / tau, (1 + 4 * s2 / tau**2) / s2 * second  # solu: E[X e^{aX}] = a s2 e^{a^2 s2 / 2}, ...


def conditional_inverse_snr(kernel: str, N: int, s2: float, *, tau: float = 1.0, decimals: int = 0,
                            num_heads: int = 1) -> float:
    """The exact SNR^-1 (eq. 57) given the probe's squared key norm s2 = ||k_i||^2 (every head's, for n_h heads):

        (N - 1) (E[kappa^2] / n_h + (1 - 1/n_h) E[kappa]^2) / kappa(k_i, k_i)^2.

    For one head this is (N - 1) E[kappa^2] / kappa_ii^2. With n_h heads averaged (footnote 7) the variance falls
    by n_h but the squared mean does not, so only zero-mean kernels (linear) gain the full factor n_h."""
    check_kernel(kernel, tau, decimals)
    _check_sizes(N, 1, num_heads=num_heads)
    if not s2 > 0:
        raise ValueError(f"s2 must be positive, got {s2!r}")
    m1, m2 = _normalised_moments(kernel, float(s2), tau, decimals)
    return (N - 1) * (m2 / num_heads + (1 - 1 / num_heads) * m1**2)


def exact_inverse_snr(kernel: str, N: int, d_k: int, *, tau: float = 1.0, decimals: int = 0,
                      probe_norm: str = "fixed", num_heads: int = 1) -> float:
    """What `measure_inverse_snr` estimates. "fixed": `conditional_inverse_snr` at s2 = d_k. "random" (one head):
    its mean over s2 ~ chi^2_{d_k}, in closed form with a = 2/tau^2 - 2/tau and E[e^{a s2}] = (1 - 2a)^{-d_k/2},
    E[e^{a s2} / s2] = (1 - 2a)^{1 - d_k/2} / (d_k - 2):
    linear (N-1)/(d_k-2); relu half of it; exp (N-1) E[e^{a s2}]; solu (N-1) (E[e^{a s2}/s2] + 4 E[e^{a s2}]/tau^2)."""
    check_kernel(kernel, tau, decimals)
    _check_sizes(N, d_k, num_heads=num_heads)
    if probe_norm == "fixed":
        return conditional_inverse_snr(kernel, N, float(d_k), tau=tau, decimals=decimals, num_heads=num_heads)
    if probe_norm != "random":
        raise ValueError(f"probe_norm must be one of {PROBE_NORMS}, got {probe_norm!r}")
    if num_heads != 1 or kernel == "round":
        raise ValueError("probe_norm='random' has a closed form for one head of linear, relu, exp and solu only")
    if d_k <= 2:
        raise ValueError(f"d_k must be > 2 with probe_norm='random' (E[1/||k_i||^2] diverges), got {d_k}")
    a = 2 / tau**2 - 2 / tau
    if 1 - 2 * a <= 0:
        raise ValueError(f"tau={tau}: E[exp((2/tau^2 - 2/tau) ||k_i||^2)] diverges (needs 2/tau^2 - 2/tau < 1/2)")
    mgf, mgf_over_s2 = (1 - 2 * a) ** (-d_k / 2), (1 - 2 * a) ** (1 - d_k / 2) / (d_k - 2)
    per_pair = {"linear": 1 / (d_k - 2), "relu": 1 / (2 * (d_k - 2)), "exp": mgf,
                "solu": mgf_over_s2 + 4 / tau**2 * mgf}[kernel]
    return (N - 1) * per_pair


def paper_inverse_snr(kernel: str, N: int, d_k: int, *, tau: float = 1.0, as_printed: bool = True) -> float:
    """The paper's headline approximations (||k_i||^2 -> d_k, N - 1 -> N): eq. 7 (linear) N / d_k, eq. 15 (relu)
    N / (2 d_k), eq. 13 (exp) N / exp(2 (tau - 1) d_k / tau^2) and eq. 17 (solu, stated at tau = sqrt d_k).

    as_printed=True gives eq. 17 as printed, 5 N / (d_k exp(2 sqrt d_k)), which misses a factor e^2 (erratum);
    as_printed=False gives the corrected approximation N (1 + 4 d_k / tau^2) / d_k exp((2/tau^2 - 2/tau) d_k),
    which is 5 N / (d_k exp(2 sqrt d_k - 2)) at tau = sqrt d_k. The other kernels print correctly."""
    check_kernel(kernel, tau)
    _check_sizes(N, d_k)
    if kernel == "round":
        raise ValueError("kernel 'round' has no SNR formula in the paper")
    if kernel == "solu" and as_printed:
        if not math.isclose(tau, math.sqrt(d_k), rel_tol=1e-12):
            raise ValueError(f"eq. 17 is stated at tau = sqrt(d_k) = {math.sqrt(d_k):g}, got tau={tau!r}")
        return 5 * N / (d_k * math.exp(2 * math.sqrt(d_k)))
    return N / (N - 1) * conditional_inverse_snr(kernel, N, float(d_k), tau=tau)


def exp_snr_exponent(tau: float) -> float:
    """g(tau) = 2 (tau - 1) / tau^2 of eq. 13, SNR^-1_exp ~ N exp(-g(tau) d_k): largest (best recall) at tau = 2,
    where SNR^-1 = N e^{-d_k/2}. So lowering tau helps only while tau > 2 (the text's claim holds on (2, inf))."""
    check_kernel("exp", tau)
    return 2 * (tau - 1) / tau**2


def min_head_dim_formula(N: int) -> int:
    """The smallest d_k with N exp(-2 (sqrt d_k - 1)) <= 1 (exp at tau = sqrt d_k): ceil((1 + ln(N) / 2)^2), i.e.
    d_k = O(log^2 N) (the paper's capacity claim; the linear kernel needs d_k = O(N))."""
    _check_sizes(N, 1)
    return math.ceil((1 + 0.5 * math.log(N)) ** 2)


def min_head_dim(kernel: str, N: int, *, target: float = 1.0, max_dim: int = 1 << 40) -> int:
    """The smallest d_k whose exact SNR^-1 (fixed probe norm, tau = sqrt d_k for exp and solu) is <= target,
    found by bisection (SNR^-1 falls with d_k for every kernel here). Raises ValueError above max_dim."""
    check_kernel(kernel)
    if kernel == "round":
        raise ValueError("kernel 'round' is not monotone in d_k; choose linear, relu, exp or solu")

    def ok(d: int) -> bool:
        return exact_inverse_snr(kernel, N, d, tau=math.sqrt(d)) <= target

    high = 1
    while not ok(high):
        high *= 2
        if high > max_dim:
            raise ValueError(f"no d_k <= max_dim={max_dim} reaches SNR^-1 <= {target}")
    low = high // 2  # ok(low) is False (or low = 0)
    while high - low > 1:
        mid = (low + high) // 2
        low, high = (low, mid) if ok(mid) else (mid, high)
    return high
