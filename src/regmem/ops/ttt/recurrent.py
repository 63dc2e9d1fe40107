"""Recurrent form of the test-time-training engine: one update per token with the inner gradient written out
(back-propagation through the inner model by hand, model.py), constant memory in T. This is the form decoding uses.

Per token t (reference.py has the equations): the key k_t runs forward through the mini-batch anchor theta_{s(t)},
keeping each layer's input x_l; the loss gradient runs back to the errors delta_l; the gradient of W_l is the outer
product x_l^T delta_l, so every update is rank one per layer:
    Pi_l = mu_t Pi_l - eta_t x_l^T delta_l,    W_l = alpha_t W_l - rho_t x_l^T (x_l W_l) + live_t Pi_l.

Legend: B batch, T time, H heads, K key dim, V value dim, P parameters per head.
"""

from __future__ import annotations

import torch

from regmem.ops.ttt.model import InnerModel, layer_steps, loss_grad, norms_sq
from regmem.ops.ttt.state import TTTState, read_point, start_anchor, zero_state


def ttt_recurrent_core(q, k, v, beta, g, log_mu, live, *, initial_state, model: InnerModel, loss, loss_param,
                       dgd, ln, mini_batch, step_rule, read_scale):
    """Arguments and returns as `ttt_reference_core`."""
    B, T, H, K = q.shape
    V = v.shape[-1]
    ln = None if ln is None else tuple(p.to(q.dtype)[:, None, :] for p in ln)  # [H, 1, V]
    reads = None if read_scale is None else read_scale.to(q.dtype).expand(B, *read_scale.shape)  # [B, H, C]
    state = initial_state or zero_state(B, H, model.num_params(K, V), log_mu is not None, q)
    theta, momentum, _, offset = state
    anchor = start_anchor(state)
    with_momentum = log_mu is not None
    mus = log_mu.unbind(1) if with_momentum else [None] * T
    # unbind, not q[:, t]: the backward of indexing would zero-fill all of q once per token (O(T^2)).
    steps = zip(q.unbind(1), k.unbind(1), v.unbind(1), beta.unbind(1), g.unbind(1), mus, live.unbind(1), strict=True)
    outputs = []
    for q_t, k_t, v_t, beta_t, g_t, log_mu_t, live_t in steps:
        anchor_w = model.unpack(anchor, K, V)
        y, trace = model.forward(anchor_w, k_t.unsqueeze(-2), ln)  # [B, H, 1, V]
        dy = loss_grad(loss, y, v_t.unsqueeze(-2), loss_param)
        deltas = model.backward(anchor_w, trace, dy, ln)
        etas, rhos = layer_steps(step_rule, beta_t[..., None, None], *norms_sq(trace[0], deltas, dy),
                                 log_mu_t[..., None, None] if with_momentum else None)  # per layer, [B, H, 1, 1]
        alpha = torch.exp(g_t)[..., None, None]
        mu = torch.exp(log_mu_t)[..., None, None] if with_momentum else None
        live_w = live_t[..., None, None]
        new_w, new_p = [], []
        P_w = model.unpack(momentum, K, V) if with_momentum else [None] * model.depth
        layers = zip(model.unpack(theta, K, V), P_w, trace[0], deltas, etas, rhos, strict=True)
        for W, Pm, x_l, d_l, eta, rho in layers:
            update = -eta * (x_l.transpose(-1, -2) @ d_l)  # [B, H, d_in, d_out], -eta_l x_l^T delta_l
            if with_momentum:
                Pm = mu * Pm + update
                new_p.append(Pm)
                update = live_w * Pm
            W_next = alpha * W + update
            if dgd:
                W_next = W_next - rho * x_l.transpose(-1, -2) @ (x_l @ W)
            new_w.append(W_next)
        theta = model.pack(new_w)
        if with_momentum:
            momentum = model.pack(new_p)
        read = theta if reads is None else read_point(reads, offset, live_t, anchor, theta)
        offset = torch.remainder(offset + live_t, mini_batch)
        anchor = torch.where(offset.unsqueeze(-1) == 0, theta, anchor)
        o_t, _ = model.forward(model.unpack(read, K, V), q_t.unsqueeze(-2), ln)
        outputs.append(o_t[:, :, 0])
    o = torch.stack(outputs, dim=1) if outputs else v.new_zeros(B, 0, H, V)
    return o, TTTState(theta, momentum, anchor, offset)
