"""M3, Multi-scale Momentum Muon (Behrouz et al., *Nested Learning: The Illusion of Deep Learning Architectures*,
arXiv:2512.24695, Sec. 7.2, Algorithm 1): a two-level Continuum Memory System over the gradient stream -- a fast
momentum written every step and a slow momentum written every f steps, each read out through Newton-Schulz
(Sec. 4.2, eqs. 43-44), combined and normalised by an Adam-style second moment ("M3 = Adam + Muon + CMS").

Algorithm 1 with its lost superscript restored (M^(2) is the slow memory, O^(2) its read-out), per step t = 1, 2, ...:

    M1_t = M1_{t-1} + beta1 g_t                 (fast memory, line 7)
    V_t  = V_{t-1}  + beta2 g_t * g_t           (second moment, element-wise, line 8)
    O1_t = NS_T(M1_t)                           (line 9)
    W_t  = W_{t-1} - lr (O1_t + alpha O2) / (sqrt(V_t) + eps)     (element-wise division, line 10)
    if t = 0 (mod f):                           (end of chunk k = t / f; lines 3-4 of chunk k + 1)
        M2 = M2 + beta3 sum_{s = t-f+1}^{t} g_s
        O2 = NS_T(M2)

so O2 is 0 during the first chunk (M2 = 0) and, from step t = kf + 1 on, the read-out of the gradients of steps
1..kf; the slow memory changes only after steps t = 0 (mod f).

Open details of Algorithm 1, decided here:
  * accumulate="sum" (default) is the paper's literal accumulation above. accumulate="ema" reads the betas as
    decays: M1 <- beta1 M1 + (1 - beta1) g, V <- beta2 V + (1 - beta2) g*g, M2 <- beta3 M2 + (1 - beta3) S with S
    the chunk's gradient sum (Adam-style moving averages, no bias correction). Under "sum", beta1 and beta3 only
    rescale M1 and M2, which Newton-Schulz ignores (it normalises by the Frobenius norm first): they do not change
    the update at all (tested), and V grows without bound like AdaGrad's. The paper's "1 > beta1, beta2, beta3" and
    its AdEMAMix-like symbols suggest EMAs were meant; "ema" is that reading.
  * The slow sum spans exactly the f gradients of the finished chunk, steps (k-1)f+1 .. kf (the printed range
    (k-1)f .. kf would count f + 1 gradients and one of them twice).
  * 1-D parameters (norms, biases) and embeddings are not Newton-Schulz'd: M3 rejects non-2-D parameters; route
    them to AdamW with `param_groups`.
  * The paper does not report hyperparameters; the defaults (lr 1e-3, betas (0.9, 0.999, 0.9), alpha 1, f 100,
    Muon's quintic with 5 steps, eps 1e-8) are conventional choices, not the paper's.
  * weight_decay (default 0, not in Algorithm 1) is decoupled: W <- W (1 - lr weight_decay) before the update.
  * Newton-Schulz runs in bfloat16 where bfloat16 matmuls are native (`ns_dtype="auto"`, the default: a CUDA device
    or a CPU with AVX512-BF16 or AMX, `newton_schulz.fast_bfloat16`), as `torch.optim.Muon` always does, and in the
    parameter's dtype elsewhere, where bfloat16 is emulated and ~27x slower; the read-outs return to the parameter's
    dtype. In float32 a step cost 2.8x torch.optim.Muon's on one thread of a CPU with AVX512-BF16 (four 256 x 256
    weights; float32 Newton-Schulz 2.7x its bfloat16) and 1.1x MuonMemory's float32 step: the iteration's
    precision, not Algorithm 1's extra memories, was the cost (benchmarks/optimizers.md, "Optimisers").
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Literal

import torch

from .muon import check_matrix_params
from .newton_schulz import QUINTIC, fast_bfloat16, newton_schulz
from .stepping import checked_grad, closure_loss


class M3(torch.optim.Optimizer):
    """Multi-scale Momentum Muon (Algorithm 1; module docstring for the exact update and the decided details).

    Args:
        params: 2-D parameters (or groups of them).
        lr: learning rate eta (>= 0).
        betas: (beta1, beta2, beta3) in [0, 1): fast-memory, second-moment and slow-memory coefficients.
        alpha: weight of the slow read-out O2 (>= 0).
        eps: added to sqrt(V) (> 0).
        frequency: f, the slow memory's chunk length in steps (int >= 1).
        ns_steps: Newton-Schulz steps T (>= 0).
        ns_coefficients: (a, b, c); QUINTIC (Muon) or CUBIC (eq. 44).
        accumulate: "sum" (Algorithm 1 as printed; beta1, beta3 then have no effect) or "ema" (moving averages).
        weight_decay: decoupled weight decay (>= 0).
        ns_eps: floor on the Frobenius norm before Newton-Schulz (> 0).
        ns_dtype: dtype of the Newton-Schulz iteration: a dtype, None (the param's) or "auto" (bfloat16 where it is
            native on the param's device, else the param's dtype; module docstring).

    State per parameter: "step" (int), "fast_momentum" M1, "second_moment" V, "slow_momentum" M2,
    "slow_readout" O2 and "chunk_grad_sum" (gradients since the last slow write).
    """

    def __init__(
        self,
        params,
        lr: float = 1e-3,
        betas: tuple[float, float, float] = (0.9, 0.999, 0.9),
        alpha: float = 1.0,
        eps: float = 1e-8,
        frequency: int = 100,
        ns_steps: int = 5,
        ns_coefficients: tuple[float, float, float] = QUINTIC,
        accumulate: Literal["sum", "ema"] = "sum",
        weight_decay: float = 0.0,
        ns_eps: float = 1e-7,
        ns_dtype: torch.dtype | Literal["auto"] | None = "auto",
    ):
        if not lr >= 0.0:
            raise ValueError(f"lr must be >= 0, got {lr}")
        if len(betas) != 3 or not all(0.0 <= b < 1.0 for b in betas):
            raise ValueError(f"betas must be three values in [0, 1), got {betas!r}")
        if not alpha >= 0.0:
            raise ValueError(f"alpha must be >= 0, got {alpha}")
        if not eps > 0.0:
            raise ValueError(f"eps must be > 0, got {eps}")
        if not (isinstance(frequency, int) and frequency >= 1):
            raise ValueError(f"frequency must be an int >= 1, got {frequency!r}")
        if not (isinstance(ns_steps, int) and ns_steps >= 0):
            raise ValueError(f"ns_steps must be an int >= 0, got {ns_steps!r}")
        if len(ns_coefficients) != 3:
            raise ValueError(f"ns_coefficients must be three floats (a, b, c), got {ns_coefficients!r}")
        if accumulate not in ("sum", "ema"):
            raise ValueError(f"accumulate must be 'sum' or 'ema', got {accumulate!r}")
        if not weight_decay >= 0.0:
            raise ValueError(f"weight_decay must be >= 0, got {weight_decay}")
        if not ns_eps > 0.0:
            raise ValueError(f"ns_eps must be > 0, got {ns_eps}")
        if ns_dtype not in (None, "auto") and not (isinstance(ns_dtype, torch.dtype) and ns_dtype.is_floating_point):
            raise ValueError(f"ns_dtype must be a floating torch.dtype, None or 'auto', got {ns_dtype!r}")
        defaults = dict(lr=lr, betas=tuple(betas), alpha=alpha, eps=eps, frequency=frequency, ns_steps=ns_steps,
                        ns_coefficients=tuple(ns_coefficients), accumulate=accumulate, weight_decay=weight_decay,
                        ns_eps=ns_eps, ns_dtype=ns_dtype)
        super().__init__(params, defaults)
        check_matrix_params(self)

    def _state(self, p: torch.Tensor) -> dict:
        state = self.state[p]
        if not state:
            state["step"] = 0
            for key in ("fast_momentum", "second_moment", "slow_momentum", "slow_readout", "chunk_grad_sum"):
                state[key] = torch.zeros_like(p)
        return state

    @staticmethod
    def _write(memory: torch.Tensor, value: torch.Tensor, beta: float, accumulate: str) -> None:
        """Memory write: M + beta value ("sum", Algorithm 1) or beta M + (1 - beta) value ("ema")."""
        if accumulate == "sum":
            memory.add_(value, alpha=beta)
        else:
            memory.lerp_(value, 1.0 - beta)

    @torch.no_grad()
    def step(self, closure: Callable[[], torch.Tensor] | None = None):
        loss = closure_loss(closure)
        for group in self.param_groups:
            beta1, beta2, beta3 = group["betas"]
            accumulate = group["accumulate"]

            def orthogonalise(m: torch.Tensor, group=group) -> torch.Tensor:
                dtype = group["ns_dtype"]
                if dtype == "auto":
                    dtype = torch.bfloat16 if fast_bfloat16(m.device) else None
                return newton_schulz(m, group["ns_steps"], group["ns_coefficients"], eps=group["ns_eps"],
                                     compute_dtype=dtype).to(m.dtype)

            for p in group["params"]:
                if p.grad is None:
                    continue
                grad = checked_grad(self, p)
                state = self._state(p)
                state["step"] += 1
                self._write(state["fast_momentum"], grad, beta1, accumulate)  # line 7
                self._write(state["second_moment"], grad * grad, beta2, accumulate)  # line 8
                state["chunk_grad_sum"].add_(grad)
                direction = orthogonalise(state["fast_momentum"])  # line 9
                direction.add_(state["slow_readout"], alpha=group["alpha"])
                direction.div_(state["second_moment"].sqrt().add_(group["eps"]))  # line 10
                p.mul_(1.0 - group["lr"] * group["weight_decay"])
                p.sub_(direction, alpha=group["lr"])
                if state["step"] % group["frequency"] == 0:  # end of a chunk: lines 3-4 for the next one
                    self._write(state["slow_momentum"], state["chunk_grad_sum"], beta3, accumulate)
                    state["slow_readout"].copy_(orthogonalise(state["slow_momentum"]))
                    state["chunk_grad_sum"].zero_()
        return loss
