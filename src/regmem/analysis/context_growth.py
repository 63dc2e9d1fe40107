"""Vignette 3 of *Understanding Transformer from the Perspective of Associative Memory* (Zhong, Xu, Ao, Shi;
arXiv:2505.19488, Sec. 4, eqs. 44-49, App. F): what a memory does as the context grows without end.

DeltaNet (eqs. 44-47). In-context learning is read as test-time SGD on 1/2 ||S k_t - v_t||^2 with k = W_k x,
v = W_v x and fixed weights. For x ~ N(0, Sigma) the expected loss has the unique minimiser

    S* = (W_v Sigma W_k^T) (W_k Sigma W_k^T)^{-1}                                (eq. 46)

which is W_v W_k^{-1} for every Sigma when W_k is square and invertible (eq. 47): the memory forgets the data and
the layer becomes a bigram model. With low-rank projections (multi-head, W_k: [K, D], K < D) Sigma does not
cancel and S* depends on the data. The paper's eq. 48, S* = W_v Sigma W_k^+ W_k Sigma^{-1} W_k^+, is not equal
to eq. 46 in general (it is kept as `paper_multihead_fixed_point` so a test shows the difference); eq. 46 is
the minimiser. If W_v = M W_k then S* = M for every Sigma.

`online_deltanet` runs the SGD itself. With `normalize=True` the step is beta / ||k||^2 (the normalised delta
rule); its fixed point is the minimiser of E[||S k - v||^2 / ||k||^2], which equals eq. 46 whenever v is a
linear function of k (full rank, or W_v = M W_k) but not in general. With `normalize=False` the mean of the
iterates obeys E[S_t] = E[S_{t-1}] (I - beta W_k Sigma W_k^T) + beta W_v Sigma W_k^T, whose limit is eq. 46
exactly (the iterates fluctuate around it by O(sqrt(beta))).

Softmax attention (eqs. 77-80, 49). With normalisation the memory is the running mean
S_t = 1/t sum_{i<=t} v_i phi(k_i)^T (eq. 79), its objective carries a factor 1/t, and each new token moves S by
O(1/t): ||S_t - S_{t-1}||_F t stays bounded and the weight of token t in o_t decays like 1/t. Without
normalisation (or for linear attention), S_t = sum_{i<=t} v_i k_i^T grows like sqrt(t) in spectral norm for
i.i.d. zero-mean pairs (Sec. 2.2, "update management").

Paper convention throughout: S: [V, K] with read o = S phi(q) (regmem's ops keep S^T, see `update_framework`).
Legend: D input dim, K key (or feature) dim, V value dim, T tokens, N trials; "..." any leading batch dims.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch


def _check_projections(key_proj, value_proj, covariance) -> None:
    if key_proj.ndim != 2 or value_proj.ndim != 2 or key_proj.shape[1] != value_proj.shape[1]:
        raise ValueError(f"key_proj must be [K, D] and value_proj [V, D] with one D, got {list(key_proj.shape)} "
                         f"and {list(value_proj.shape)}")
    D = key_proj.shape[1]
    if covariance.shape != (D, D):
        raise ValueError(f"covariance must have shape [D, D] = [{D}, {D}], got {list(covariance.shape)}")


def deltanet_fixed_point(key_proj: torch.Tensor, value_proj: torch.Tensor, covariance: torch.Tensor) -> torch.Tensor:
    """S* = (W_v Sigma W_k^T)(W_k Sigma W_k^T)^{-1} (eq. 46), the minimiser of E_x 1/2 ||S W_k x - W_v x||^2.

    key_proj W_k: [K, D]; value_proj W_v: [V, D]; covariance Sigma = E[x x^T]: [D, D]. Returns S*: [V, K].
    Raises ValueError if W_k Sigma W_k^T is singular (K > rank)."""
    _check_projections(key_proj, value_proj, covariance)
    gram = key_proj @ covariance @ key_proj.mT  # [K, K]
    cross = value_proj @ covariance @ key_proj.mT  # [V, K]
    if torch.linalg.matrix_rank(gram).item() < gram.shape[0]:
        raise ValueError("key_proj @ covariance @ key_proj^T is singular: the fixed point is not unique")
    return torch.linalg.solve(gram, cross.mT).mT  # gram is symmetric: S*^T = gram^{-1} cross^T


def paper_multihead_fixed_point(key_proj: torch.Tensor, value_proj: torch.Tensor,
                                covariance: torch.Tensor) -> torch.Tensor:
    """Eq. 48 as printed: W_v Sigma W_k^+ W_k Sigma^{-1} W_k^+ ([V, K]). Not the minimiser: use
    `deltanet_fixed_point` (eq. 46). Shapes as there; Sigma must be invertible."""
    _check_projections(key_proj, value_proj, covariance)
    pinv = torch.linalg.pinv(key_proj)  # [D, K]
    return value_proj @ covariance @ pinv @ key_proj @ torch.linalg.inv(covariance) @ pinv


def sample_inputs(covariance: torch.Tensor, shape: Sequence[int], generator: torch.Generator) -> torch.Tensor:
    """x ~ N(0, Sigma) of shape [*shape, D] for covariance Sigma: [D, D] (symmetric positive definite)."""
    chol, info = torch.linalg.cholesky_ex(covariance)
    if info.item() != 0:
        raise ValueError("covariance must be symmetric positive definite")
    z = torch.randn(*shape, covariance.shape[0], generator=generator, dtype=covariance.dtype)  # [*shape, D]
    return z @ chol.mT


def online_deltanet(key_proj: torch.Tensor, value_proj: torch.Tensor, covariance: torch.Tensor, *, steps: int,
                    step_size: float, generator: torch.Generator, trials: int = 1, normalize: bool = True,
                    initial_state: torch.Tensor | None = None) -> torch.Tensor:
    """Online DeltaNet SGD on a stationary stream (eqs. 44-45): x_t ~ N(0, Sigma), k_t = W_k x_t, v_t = W_v x_t,

        S_t = S_{t-1} - eta_t (S_{t-1} k_t - v_t) k_t^T,   eta_t = step_size / ||k_t||^2 (normalize) or step_size.

    key_proj: [K, D]; value_proj: [V, D]; covariance: [D, D]; steps: number of tokens; trials N independent
    streams run side by side; initial_state: [V, K] or [N, V, K], None for zeros; `generator` draws every x.
    Returns the trajectory [steps + 1, N, V, K] (index 0 is S_0) in the dtype of covariance."""
    _check_projections(key_proj, value_proj, covariance)
    if steps < 1 or trials < 1:
        raise ValueError(f"steps and trials must be >= 1, got steps={steps}, trials={trials}")
    if not step_size > 0:
        raise ValueError(f"step_size must be > 0, got {step_size}")
    K, V = key_proj.shape[0], value_proj.shape[0]
    x = sample_inputs(covariance, (steps, trials), generator)  # [steps, N, D]
    keys, values = x @ key_proj.mT, x @ value_proj.mT  # [steps, N, K], [steps, N, V]
    rates = step_size / keys.pow(2).sum(-1) if normalize else keys.new_full(keys.shape[:2], step_size)
    out = covariance.new_zeros(steps + 1, trials, V, K)
    if initial_state is not None:
        out[0] = initial_state
    S = out[0]
    for t in range(steps):
        residual = (S @ keys[t, :, :, None]).squeeze(-1) - values[t]  # [N, V], S k - v
        S = S - (rates[t, :, None] * residual)[:, :, None] * keys[t, :, None, :]  # [N, V, K]
        out[t + 1] = S
    return out


# ---------------------------------------------------------------------------------------------------------------
# Softmax / linear attention as t grows


def running_mean_memory(features: torch.Tensor, values: torch.Tensor) -> torch.Tensor:
    """S_t = 1/t sum_{i<=t} v_i phi(k_i)^T for t = 1..T (eq. 79, normalised softmax attention with an explicit
    feature map), by cumulative sums. features phi(k): [..., T, m]; values: [..., T, V]. Returns [..., T, V, m]."""
    if features.shape[:-1] != values.shape[:-1]:
        raise ValueError(f"features [..., T, m] and values [..., T, V] must share [..., T], got "
                         f"{list(features.shape)} and {list(values.shape)}")
    T = features.shape[-2]
    writes = values[..., :, None] * features[..., None, :]  # [..., T, V, m]
    t = torch.arange(1, T + 1, dtype=features.dtype, device=features.device)  # [T]
    return writes.cumsum(-3) / t[:, None, None]


def prefix_memories(keys: torch.Tensor, values: torch.Tensor, times: Sequence[int]) -> torch.Tensor:
    """S_t = sum_{i<=t} v_i k_i^T (eq. 1, un-normalised) at the increasing `times` (1-based, each <= T), one
    matmul per segment between consecutive times. keys: [..., T, K]; values: [..., T, V]. Returns
    [..., len(times), V, K]."""
    T = keys.shape[-2]
    if keys.shape[:-1] != values.shape[:-1]:
        raise ValueError(f"keys [..., T, K] and values [..., T, V] must share [..., T], got {list(keys.shape)} "
                         f"and {list(values.shape)}")
    if not times or list(times) != sorted(set(times)) or times[0] < 1 or times[-1] > T:
        raise ValueError(f"times must be strictly increasing integers in [1, T] = [1, {T}], got {list(times)}")
    bounds = [0, *times]
    segments = [values[..., a:b, :].mT @ keys[..., a:b, :] for a, b in zip(bounds[:-1], bounds[1:], strict=True)]
    return torch.stack(segments, dim=-3).cumsum(-3)  # [..., len(times), V, K]


def scaled_update_norms(states: torch.Tensor) -> torch.Tensor:
    """t ||S_t - S_{t-1}||_F for t = 1..T with S_0 = 0, from states [..., T, V, m] (S_1..S_T). Returns [..., T].
    For the running mean (eq. 79) this is ||v_t phi(k_t)^T - S_{t-1}||_F, bounded when the tokens are."""
    previous = torch.cat([torch.zeros_like(states[..., :1, :, :]), states[..., :-1, :, :]], dim=-3)
    T = states.shape[-3]
    t = torch.arange(1, T + 1, dtype=states.dtype, device=states.device)  # [T]
    return t * torch.linalg.matrix_norm(states - previous)


def last_token_weights(queries: torch.Tensor, keys: torch.Tensor, scale: float | None = None) -> torch.Tensor:
    """The weight of token t in o_t under causal softmax attention (eq. 2):
    exp(s q_t.k_t) / sum_{i<=t} exp(s q_t.k_i) with s = scale (None: K ** -0.5). queries, keys: [..., T, K].
    Returns [..., T]. Materialises the [..., T, T] score matrix."""
    if queries.shape != keys.shape:
        raise ValueError(f"queries and keys must both be [..., T, K], got {list(queries.shape)} and "
                         f"{list(keys.shape)}")
    T, K = keys.shape[-2:]
    s = K**-0.5 if scale is None else scale
    scores = s * queries @ keys.mT  # [..., T, T]
    causal = torch.ones(T, T, dtype=torch.bool, device=keys.device).tril()
    log_z = scores.masked_fill(~causal, float("-inf")).logsumexp(-1)  # [..., T]
    return torch.exp(scores.diagonal(dim1=-2, dim2=-1) - log_z)


def loglog_slope(times: Sequence[float] | torch.Tensor, values: torch.Tensor) -> float:
    """Least-squares slope of log(values) against log(times) (the exponent a of values ~ times^a).
    times: [P] positive; values: [P] positive."""
    x = torch.as_tensor(times, dtype=torch.float64).log()
    y = values.to(torch.float64).log()
    if x.shape != y.shape or x.numel() < 2:
        raise ValueError(f"times and values must be [P] with P >= 2, got {list(x.shape)} and {list(y.shape)}")
    xc = x - x.mean()
    return ((xc * (y - y.mean())).sum() / (xc * xc).sum()).item()


def spectral_norm_growth(dim: int, times: Sequence[int], trials: int, generator: torch.Generator) -> torch.Tensor:
    """E ||S_t||_2 for S_t = sum_{i<=t} v_i k_i^T with i.i.d. k, v ~ N(0, I_dim / dim), averaged over `trials`
    streams, at `times` (increasing, 1-based). Returns [len(times)]; grows like sqrt(t) (Sec. 2.2)."""
    T = max(times)
    keys = torch.randn(trials, T, dim, generator=generator, dtype=torch.float64) / math.sqrt(dim)
    values = torch.randn(trials, T, dim, generator=generator, dtype=torch.float64) / math.sqrt(dim)
    return torch.linalg.matrix_norm(prefix_memories(keys, values, times), ord=2).mean(0)
