"""Online regression over switching autoregressive keys: the parameter-free experiment of *Test-time regression*
(Wang, Shi, Fox; arXiv:2501.12352, Sec. 5, eq. 55, Fig. 2).

Keys follow a vector AR(1) process whose retention switches from fast to slow at T/4:

    k_{t+1} = a_t k_t + noise * eps_t,   a_t = decays[0] for t < switch_at * T, else decays[1],
    eps_t ~ N(0, Sigma),  Sigma = (1 - rho) I + rho 1 1^T   (unit variances, equicorrelated),

and each key is bound to the direction of the next one, v_t = k_{t+1} / ||k_{t+1}|| (next-token prediction).
Token t queries with the next key, q_t = k_{t+1}, which the memory has not stored as a key yet: y_t = m_t(q_t),
fitted to the prefix {(k_i, v_i)}_{i<=t}, is an out-of-sample prediction of v_{t+1}, and Fig. 2 plots the loss
||v_{t+1} - m_t(k_{t+1})||^2. The naive forecaster (Sec. 5) predicts v_{t+1} by v_t.

Choices the paper leaves open (Sec. 5 does not state them), all exposed: the correlation rho (0.5), the first key
k_1 = noise * eps_0, and float64 data.

Shapes: q, k, v, target: [N, T, D] (N sequences, T tokens, D key dim); target_t = v_{t+1}.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from regmem.tasks.base import make_generator


@dataclass(frozen=True)
class OnlineRegressionConfig:
    dim: int = 64  # D_k (Sec. 5: 64)
    seq_len: int = 256  # T (Sec. 5: 256)
    decays: tuple[float, float] = (0.9, 0.999)  # AR retention before and after the switch (eq. 55)
    switch_at: float = 0.25  # the switch happens at t = switch_at * T (eq. 55: T/4)
    noise: float = 0.02  # innovation scale (eq. 55)
    rho: float = 0.5  # off-diagonal correlation of Sigma; the paper says only "non-zero"

    def __post_init__(self):
        if self.dim < 1 or self.seq_len < 1:
            raise ValueError(f"dim and seq_len must be >= 1, got {self.dim}, {self.seq_len}")
        if not -1.0 / max(self.dim - 1, 1) < self.rho < 1.0:
            raise ValueError(f"rho must lie in (-1 / (dim - 1), 1) so Sigma is positive definite, got {self.rho}")
        if not 0.0 <= self.switch_at <= 1.0:
            raise ValueError(f"switch_at must be a fraction in [0, 1], got {self.switch_at}")

    @property
    def switch_step(self) -> int:
        return int(self.switch_at * self.seq_len)


def switching_keys(config: OnlineRegressionConfig, num_sequences: int, *, seed: int | None = None,
                   generator: torch.Generator | None = None, dtype: torch.dtype = torch.float64):
    """Returns (q, k, v, target), each [N, T, D]: keys k_1..k_T, values v_t = k_{t+1} / ||k_{t+1}||, queries
    q_t = k_{t+1} and targets v_{t+1} = k_{t+2} / ||k_{t+2}||."""
    gen = make_generator(seed, generator)
    N, T, D = num_sequences, config.seq_len, config.dim
    sigma = (1 - config.rho) * torch.eye(D, dtype=torch.float64) + config.rho
    chol = torch.linalg.cholesky(sigma)  # eps = chol @ z, z ~ N(0, I)
    eps = torch.randn(N, T + 2, D, generator=gen, dtype=torch.float64) @ chol.T  # [N, T + 2, D]
    keys = [config.noise * eps[:, 0]]  # k_1
    for t in range(1, T + 2):  # k_{t+1} from k_t, t = 1..T+1 (1-based, as eq. 55)
        a = config.decays[0] if t < config.switch_step else config.decays[1]
        keys.append(a * keys[-1] + config.noise * eps[:, t])
    keys = torch.stack(keys, dim=1)  # [N, T + 2, D], k_1..k_{T+2}
    directions = keys / keys.norm(dim=-1, keepdim=True)
    k, q, v, target = keys[:, :T], keys[:, 1:T + 1], directions[:, 1:T + 1], directions[:, 2:]
    return tuple(x.to(dtype) for x in (q, k, v, target))
