"""AdaMuon (Si, Zhang and Shen, *AdaMuon: Adaptive Muon Optimizer*, arXiv:2507.11005, Algorithm 1; the authors'
code at github.com/Chongjie-Si/AdaMuon, `adamuon.py`): Muon's momentum memory and Newton-Schulz read-out
(`muon.py`), followed by an Adam-style second moment of the orthogonalised direction and a rescaling to a fixed RMS.
*Nested Learning* (arXiv:2512.24695, Sec. 9.7, Fig. 12) names it beside Muon as the peer of M3's step time.

For a weight W [m, n] with gradient g_t:

    m_t = lerp(m_{t-1}, -g_t, 1 - momentum)                   the memory, as in `MuonMemory` (points downhill)
    o_t = NS5(lerp(-g_t, m_t, momentum))                      Nesterov look-ahead (or m_t), orthogonalised
    v_t = beta2 v_{t-1} + (1 - beta2) o_t ⊙ o_t               element-wise second moment of the direction
    u_t = o_t / (sqrt(v_t / (1 - beta2^t)) + eps)             bias-corrected, as Adam's
    W_t = W_{t-1} (1 - lr wd) + lr · 0.2 sqrt(m n) · u_t / (||u_t||_F + eps)

The last line is the authors' RMS alignment: the step's RMS is 0.2 lr whatever the shape, the scale of an AdamW
step, so AdamW's learning rate carries over. Their code rescales by sqrt(min(m, n)) / (||u||_F + eps) and then by
0.2 sqrt(max(m, n)), the same product. Newton-Schulz runs in bfloat16 by default, as theirs does (`ns_dtype=None`:
the parameter's dtype); its first normalisation is x / max(||x||_F, 1e-7) where theirs is x / (||x||_F + 1e-7).
Everything after Newton-Schulz (v, the division, the rescaling) runs in the parameter's dtype. Their code keeps v
in bfloat16, the dtype of Newton-Schulz's output, where `v * 0.999` rounds back to v (a bfloat16 has 8 bits of
mantissa), so their v stops decaying; this is the algorithm as the paper writes it, without that artefact.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch

from .muon import check_matrix_params, momentum_direction
from .newton_schulz import QUINTIC
from .stepping import checked_grad, closure_loss

RMS = 0.2  # the step's RMS per unit of lr after the alignment (AdamW's typical update RMS)


class AdaMuon(torch.optim.Optimizer):
    """Muon's momentum and Newton-Schulz, an element-wise second moment of the result, RMS alignment (module
    docstring). Defaults are the authors' (lr 0.02, weight decay 0.01, momentum 0.95 with Nesterov, 5 quintic
    Newton-Schulz steps in bfloat16, beta2 0.999, eps 1e-8). Only 2-D parameters; give the rest to AdamW
    (`regmem.optim.param_groups`)."""

    def __init__(self, params, lr: float = 0.02, momentum: float = 0.95, nesterov: bool = True,
                 weight_decay: float = 0.01, beta2: float = 0.999, eps: float = 1e-8, ns_steps: int = 5,
                 ns_coefficients: tuple[float, float, float] = QUINTIC,
                 ns_dtype: torch.dtype | None = torch.bfloat16):
        checks = (("lr", lr, lr >= 0.0, ">= 0"), ("momentum", momentum, 0.0 <= momentum < 1.0, "in [0, 1)"),
                  ("weight_decay", weight_decay, weight_decay >= 0.0, ">= 0"),
                  ("beta2", beta2, 0.0 <= beta2 < 1.0, "in [0, 1)"), ("eps", eps, eps > 0.0, "> 0"))
        for name, value, ok, rule in checks:
            if not ok:
                raise ValueError(f"{name} must be {rule}, got {value!r}")
        if not (isinstance(ns_steps, int) and not isinstance(ns_steps, bool) and ns_steps >= 0):
            raise ValueError(f"ns_steps must be an int >= 0, got {ns_steps!r}")
        if len(ns_coefficients) != 3:
            raise ValueError(f"ns_coefficients must be three floats (a, b, c), got {ns_coefficients!r}")
        defaults = dict(lr=lr, momentum=momentum, nesterov=nesterov, weight_decay=weight_decay, beta2=beta2, eps=eps,
                        ns_steps=ns_steps, ns_coefficients=tuple(ns_coefficients), ns_dtype=ns_dtype)
        super().__init__(params, defaults)
        check_matrix_params(self)

    @torch.no_grad()
    def step(self, closure: Callable[[], torch.Tensor] | None = None):
        loss = closure_loss(closure)
        for group in self.param_groups:
            beta2, eps = group["beta2"], group["eps"]
            for p in group["params"]:
                if p.grad is None:
                    continue
                grad = checked_grad(self, p)
                state = self.state[p]
                if "memory" not in state:
                    state["memory"], state["second_moment"] = torch.zeros_like(p), torch.zeros_like(p)
                    state["step"] = 0
                state["step"] += 1
                second = state["second_moment"]
                direction = momentum_direction(state["memory"], grad, group, ns_eps=1e-7).to(p.dtype)
                second.mul_(beta2).addcmul_(direction, direction, value=1.0 - beta2)
                corrected = second / (1.0 - beta2 ** state["step"])
                update = direction / (corrected.sqrt() + eps)
                scale = group["lr"] * RMS * math.sqrt(p.shape[0] * p.shape[1]) / (update.norm() + eps)  # a tensor
                p.mul_(1.0 - group["lr"] * group["weight_decay"])
                p.add_(update * scale)
        return loss
