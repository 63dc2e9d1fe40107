"""Reference form of the test-time-training engine: token by token, the inner gradient taken by autograd
(`torch.func.grad`) on the literal inner loss at the mini-batch anchor, the update written as the papers write it.

For token t (1-based) with step eta_t = beta_t, weight-decay retention alpha_t = exp(g_t), momentum retention
mu_t = exp(log_mu_t), and theta_{s(t)} the parameters at the start of its mini-batch (state.py):
    G_t = grad_theta loss(f_theta(k_t), v_t) at theta = theta_{s(t)}
    Pi_t = mu_t Pi_{t-1} - eta_t G_t                         (momentum; without it Pi_t = -eta_t G_t)
    W_{l,t} = (alpha_t I - rho_t x_l x_l^T) W_{l,t-1} + Pi_{l,t}    (each layer l; rho_t = eta_t with dgd, else 0)
    o_t = f_{theta_t}(q_t)      (with a read scale r: f at theta_{s(t)} + r_i (theta_t - theta_{s(t)}), state.py)
x_l is the input of layer l for the key k_t at theta_{s(t)} (x_1 = k_t): Delta Gradient Descent applied layer-wise
(Nested Learning, arXiv:2512.24695, eq. 88 for a matrix memory, read in regmem's layout W = M^T; the per-layer
form is the natural extension to an MLP and reduces to eq. 88 for a linear model). Titans' memory update
(arXiv:2501.00663, eqs. 13-14) is the momentum line without dgd; TTT's (arXiv:2407.04620, Sec. 2) is mu = 0,
alpha = 1.

Legend: B batch, T time, H heads, K key dim, V value dim, P parameters per head.
"""

from __future__ import annotations

import torch

from regmem.ops.ttt.model import InnerModel, inner_loss, layer_steps
from regmem.ops.ttt.state import TTTState, read_point, start_anchor, zero_state


def ttt_reference_core(q, k, v, beta, g, log_mu, live, *, initial_state, model: InnerModel, loss, loss_param,
                       dgd, ln, mini_batch, step_rule, read_scale):
    """q, k: [B, T, H, K]; v: [B, T, H, V]; beta, g, live: [B, T, H]; log_mu: [B, T, H] or None (no momentum);
    initial_state: TTTState or None; ln: (gamma, beta) [H, V] or None. Returns o: [B, T, H, V], the TTTState."""
    B, T, H, K = q.shape
    V = v.shape[-1]
    ln = None if ln is None else tuple(p.to(q.dtype)[:, None, :] for p in ln)  # [H, 1, V]
    reads = None if read_scale is None else read_scale.to(q.dtype).expand(B, *read_scale.shape)  # [B, H, C]
    state = initial_state or zero_state(B, H, model.num_params(K, V), log_mu is not None, q)
    theta, momentum, _, offset = state
    anchor = start_anchor(state)
    eye = torch.eye(max(r for r, _ in model.shapes(K, V)), dtype=q.dtype)
    outputs = []
    for t in range(T):
        x_t, v_t = k[:, t, :, None, :], v[:, t, :, None, :]  # [B, H, 1, K], [B, H, 1, V]

        def total_loss(flat, x_t=x_t, v_t=v_t):
            y, _ = model.forward(model.unpack(flat, K, V), x_t, ln)
            return inner_loss(loss, y, v_t, loss_param).sum()  # the losses of different (b, h) do not interact

        grad = torch.func.grad(total_loss)(anchor)  # [B, H, P]
        y, (inputs, *_) = model.forward(model.unpack(anchor, K, V), x_t, ln)  # layer inputs x_l, [B, H, 1, d]
        dy = torch.func.grad(lambda y, v_t=v_t: inner_loss(loss, y, v_t, loss_param).sum())(y)  # dloss/df
        grads = model.unpack(grad, K, V)
        x_sq = [x.pow(2).sum(-1, keepdim=True) for x in inputs]
        g_sq = [G.pow(2).sum((-2, -1))[..., None, None] for G in grads]
        log_mu_t = log_mu[:, t, :, None, None] if log_mu is not None else None
        etas, rhos = layer_steps(step_rule, beta[:, t, :, None, None], x_sq, g_sq, dy.pow(2).sum(-1, keepdim=True),
                                 log_mu_t)  # each layer's steps, [B, H, 1, 1]
        scaled = model.pack([eta * G for eta, G in zip(etas, grads, strict=True)])  # eta_l G_l
        if log_mu is not None:
            momentum = torch.exp(log_mu[:, t, :, None]) * momentum - scaled
            step = live[:, t, :, None] * momentum
        else:
            step = -scaled
        alpha = torch.exp(g[:, t])[..., None, None]  # [B, H, 1, 1]
        new = []
        for W, W_step, x_l, rho in zip(model.unpack(theta, K, V), model.unpack(step, K, V), inputs, rhos,
                                       strict=True):
            d = W.shape[-2]
            rho = rho if dgd else torch.zeros_like(alpha)
            transition = alpha * eye[:d, :d] - rho * (x_l.transpose(-1, -2) @ x_l)  # [B, H, d, d]
            new.append(transition @ W + W_step)
        theta = model.pack(new)
        read = theta if reads is None else read_point(reads, offset, live[:, t], anchor, theta)
        offset = torch.remainder(offset + live[:, t], mini_batch)  # [B, H]
        anchor = torch.where(offset.unsqueeze(-1) == 0, theta, anchor)
        y, _ = model.forward(model.unpack(read, K, V), q[:, t, :, None, :], ln)
        outputs.append(y[:, :, 0])
    o = torch.stack(outputs, dim=1) if outputs else v.new_zeros(B, 0, H, V)
    return o, TTTState(theta, momentum, anchor, offset)
