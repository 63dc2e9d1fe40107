"""The per-level math of the Continuum Memory System (Nested Learning, arXiv:2512.24695, Sec. 7.1; regmem/nested/cms.py
states the model, its variants and why each rule is what it is): a level's SwiGLU, its inner gradient written out
(chunk form) and token by token (reference form), and the updates applied when a level's chunk ends (eq. 71) and when
its parent's chunk ends (eq. 72).

Legend: B batch, n tokens of a piece, D model width, F hidden width of a level.
"""

from __future__ import annotations

from typing import Literal, NamedTuple, get_args

import torch
import torch.nn.functional as F

StepRule = Literal["explicit", "normalized", "capped"]
STEP_RULES = get_args(StepRule)


def uses_curvature(rule: StepRule) -> bool:
    """Whether the rule reads the chunk's summed curvature bound (every rule but eq. 71's explicit one)."""
    return rule != "explicit"


class SwiGLUWeights(NamedTuple):
    """A level's SwiGLU parameters per row: gate, up [B, D, F], down [B, F, D] (or one of these gradients)."""

    gate: torch.Tensor
    up: torch.Tensor
    down: torch.Tensor


class LevelState(NamedTuple):
    """theta: the level's current parameters; grad: the summed inner gradient of the unfinished chunk (None for a
    frozen level); curvature: [B], the unfinished chunk's summed `curvature_bound` (step rules "normalized" and
    "capped", else None); inside a block both are None right after a chunk ends (no zeros to add to); init: the
    value the level is reset to, learnt in context by its parent (variant "nested_learned" only, else None)."""

    theta: SwiGLUWeights
    grad: SwiGLUWeights | None
    curvature: torch.Tensor | None
    init: SwiGLUWeights | None


def swiglu(theta: SwiGLUWeights, u: torch.Tensor) -> torch.Tensor:
    """f_theta(u): u [B, n, D] -> [B, n, D]."""
    return torch.bmm(F.silu(torch.bmm(u, theta.gate)) * torch.bmm(u, theta.up), theta.down)


def swiglu_and_grad(theta: SwiGLUWeights, u, target, weight, curvature: bool):
    """f_theta(u) [B, n, D] and the gradient of sum_t weight_t / 2 ||f_theta(u_t) - target_t||^2 written out (per
    row, shaped like theta), sharing one forward; with `curvature`, also sum_t weight_t curvature_bound_t [B].
    u, target [B, n, D]; weight [B, n], or None for every weight 1."""
    z_gate, z_up = torch.bmm(u, theta.gate), torch.bmm(u, theta.up)  # [B, n, F]
    s = torch.sigmoid(z_gate)
    act = z_gate * s  # silu
    a = act * z_up
    out = torch.bmm(a, theta.down)  # [B, n, D]
    e = out - target if weight is None else (out - target) * weight.unsqueeze(-1)
    da = torch.bmm(e, theta.down.transpose(1, 2))  # [B, n, F]
    gain = z_up * (s + act * (1.0 - s))  # d a / d z_gate: silu'(z) = s (1 + z (1 - s))
    d_up, d_gate = da * act, da * gain
    ut = u.transpose(1, 2)  # [B, D, n]
    grad = SwiGLUWeights(torch.bmm(ut, d_gate), torch.bmm(ut, d_up), torch.bmm(a.transpose(1, 2), e))
    if not curvature:
        return out, grad, None
    bound = curvature_bound(theta, u, act, gain, a)  # [B, n]
    return out, grad, (bound if weight is None else weight * bound).sum(1)


def curvature_bound(theta: SwiGLUWeights, u, act, gain, a) -> torch.Tensor:
    """Per token, a bound on the largest eigenvalue of the Gauss-Newton curvature J_t J_t^T of f_theta(u_t) in all
    of theta (J_t [D, parameters]): ||a_t||^2 (W_down) + ||u_t||^2 sum_f (act_tf^2 + gain_tf^2) ||W_down[f]||^2
    (W_up, W_gate: lambda_max(W_down^T diag(c) W_down) <= its trace). u [B, n, D]; act, gain, a [B, n, F] -> [B, n]."""
    rows = theta.down.square().sum(-1).unsqueeze(-1)  # [B, F, 1]
    hidden = torch.bmm(act.square() + gain.square(), rows).squeeze(-1)  # [B, n]
    return a.square().sum(-1) + u.square().sum(-1) * hidden


def swiglu_and_grad_reference(theta: SwiGLUWeights, u, target, weight, curvature: bool):
    """swiglu_and_grad token by token: f_theta(u_t), grad L(theta; u_t) by torch.func.grad and curvature_bound
    with silu' by torch.func.grad, each summed over the tokens."""
    def loss(w: SwiGLUWeights, u_t, target_t, weight_t):  # u_t, target_t [B, 1, D]; weight_t [B, 1]
        return 0.5 * (weight_t.unsqueeze(-1) * (swiglu(w, u_t) - target_t) ** 2).sum()

    B = u.shape[0]
    weight = torch.ones(u.shape[:2], dtype=u.dtype, device=u.device) if weight is None else weight
    outs = []
    total = SwiGLUWeights(*(torch.zeros_like(w) for w in theta))
    norms = torch.zeros(B, dtype=u.dtype, device=u.device)
    for t in range(u.shape[1]):
        u_t, w_t = u[:, t:t + 1], weight[:, t]  # [B, 1, D], [B]
        outs.append(swiglu(theta, u_t))
        total = add(total, torch.func.grad(loss)(theta, u_t, target[:, t:t + 1], weight[:, t:t + 1]))
        z_gate, z_up = torch.bmm(u_t, theta.gate), torch.bmm(u_t, theta.up)  # [B, 1, F]
        act = F.silu(z_gate)
        gain = z_up * torch.func.grad(lambda z: F.silu(z).sum())(z_gate)  # d a / d z_gate
        norms = norms + w_t * curvature_bound(theta, u_t, act, gain, act * z_up)[:, 0]
    return torch.cat(outs, dim=1), total, (norms if curvature else None)


def add(a: SwiGLUWeights, b: SwiGLUWeights) -> SwiGLUWeights:
    return SwiGLUWeights(*(x + y for x, y in zip(a, b, strict=True)))


def zeros_like(w: SwiGLUWeights) -> SwiGLUWeights:
    return SwiGLUWeights(*(torch.zeros_like(t) for t in w))


def end_chunk(state: LevelState, rate: float, rule: StepRule, done: torch.Tensor | None) -> LevelState:
    """Eq. 71 at a chunk's end: theta - eta * (the chunk's summed gradient), with c the chunk's summed curvature bound
    eta = rate ("explicit"), rate / (1 + rate c) ("normalized") or min(rate, 1 / c) ("capped"), and cleared
    accumulators, on the rows where `done` [B]. For done=None (every row) the cleared accumulators are None: the next
    piece's sums start them (no zeros)."""
    theta, grad, curvature, init = state
    if rule == "explicit":
        stepped = SwiGLUWeights(*(w.add(g, alpha=-rate) for w, g in zip(theta, grad, strict=True)))
    else:
        divisor = 1.0 + rate * curvature if rule == "normalized" else (rate * curvature).clamp(min=1.0)
        eta = (rate / divisor).view(-1, 1, 1)  # [B, 1, 1]
        stepped = SwiGLUWeights(*(torch.addcmul(w, eta, g, value=-1.0) for w, g in zip(theta, grad, strict=True)))
    if done is None:
        return LevelState(stepped, None, None, init)
    theta, grad = where(done, stepped, theta), where(done, zeros_like(grad), grad)
    if curvature is not None:
        curvature = torch.where(done, 0.0, curvature)
    return LevelState(theta, grad, curvature, init)


def learn_init(init: SwiGLUWeights, theta: SwiGLUWeights, rate: float, rule: StepRule) -> SwiGLUWeights:
    """Eq. 72 learnt in context: the parent's step on 1/2 ||init - theta||^2, the distance from the child's reset
    value to where the child got in the parent's chunk: init + rate (theta - init) ("explicit"), or its exact
    proximal step, init + rate / (1 + rate) (theta - init), a convex combination ("normalized"), or that step capped
    at the whole distance, init + min(rate, 1) (theta - init) ("capped": the objective's curvature is 1)."""
    step = rate if rule == "explicit" else rate / (1.0 + rate) if rule == "normalized" else min(rate, 1.0)
    return SwiGLUWeights(*(i + step * (w - i) for i, w in zip(init, theta, strict=True)))


def where(done: torch.Tensor | None, new: SwiGLUWeights, old: SwiGLUWeights) -> SwiGLUWeights:
    """new on the rows where done [B] (every row for None), else old."""
    if done is None:
        return new
    pick = done.view(-1, 1, 1)
    return SwiGLUWeights(*(torch.where(pick, a, b) for a, b in zip(new, old, strict=True)))
