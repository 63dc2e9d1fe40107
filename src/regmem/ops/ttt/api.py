"""The public op of the test-time-training engine, `ttt`: fit any small regressor at test time.

It validates its arguments here and runs one of the forms of reference.py, recurrent.py and chunk.py
(`ttt(..., mode=...)` or `ttt.reference / .recurrent / .chunk`). The inner model and losses are in model.py, the
state and the mini-batch semantics in state.py, the algebra of the chunk form in DERIVATION.md beside this file.

Shapes: q, k: [B, T, H, K]; v: [B, T, H, V]; beta, g, log_mu: [B, T, H]; ln_weight, ln_bias: [H, V];
state TTTState(params [N, H, P], momentum [N, H, P] or [N, H, 0], anchor [N, H, P], offset [N, H]); N = B, or the
number of sequences with `cu_seqlens` (then B = 1). P = `model.num_params(K, V)`.
"""

from __future__ import annotations

import torch

from regmem.ops.common import (
    Call,
    check_chunk_size,
    check_log_gate,
    check_qkv,
    check_same_device,
    check_scale,
    check_shape,
    check_state_tuple,
    check_tensor,
    check_token_scalar,
    checks_values,
    compute_dtype,
    num_states,
    op,
    renamed_argument,
)
from regmem.ops.ttt.chunk import ttt_chunk_core
from regmem.ops.ttt.model import STEP_RULES, InnerModel, Loss, StepRule, check_loss
from regmem.ops.ttt.recurrent import ttt_recurrent_core
from regmem.ops.ttt.reference import ttt_reference_core
from regmem.ops.ttt.state import TTTState


@op(reference=ttt_reference_core, recurrent=ttt_recurrent_core, chunk=ttt_chunk_core)
def ttt(q, k, v, beta, g=None, log_mu=None, *, model: InnerModel | None = None, loss: Loss = "l2",
        loss_param: float | None = None, dgd: bool = False, step_rule: StepRule = "explicit", ln_weight=None,
        ln_bias=None, scale=None, initial_state=None, cu_seqlens=None, token_mask=None, mini_batch: int = 16,
        read_scale=None, log_eta=None):
    """Test-time training of a small regressor f_theta (model.py) on the stream of (k_t, v_t), read at q_t.

    Per token (1-based t), with theta_{s(t)} the parameters at the start of the token's mini-batch of `mini_batch`
    tokens (state.py):
        G_t = grad_theta loss(f_theta(k_t), v_t) at theta_{s(t)}
        Pi_t = exp(log_mu_t) Pi_{t-1} - beta_t G_t                   (momentum; Pi_t = -beta_t G_t without it)
        W_{l,t} = (exp(g_t) I - rho_t x_l x_l^T) W_{l,t-1} + Pi_{l,t}   (rho_t = beta_t with dgd, else 0)
    (with step_rule="proximal" layer l steps with a smaller beta_t that cannot expand: model.layer_steps)
        o_t = f_{theta_t}(scale * q_t)
    (with `read_scale` r, token t at position i of its mini-batch reads theta_{s(t)} + r_i (theta_t - theta_{s(t)}))
    - *Test-time regression* (arXiv:2501.12352, Sec. 3, eq. 8 with an MLP regressor and a streaming-SGD solver);
    - TTT-Linear / TTT-MLP (Sun et al., arXiv:2407.04620, Sec. 2.3-2.7): mini-batch inner GD, no decay/momentum;
    - Titans' deep memory (arXiv:2501.00663, Sec. 3.1, eqs. 9-14): momentum and weight decay, data-dependent;
    - Delta Gradient Descent (Nested Learning, arXiv:2512.24695, eq. 88), applied layer by layer with each layer's
      input x_l at the anchor (for a linear model exactly eq. 88 in regmem's layout W = M^T).

    `mini_batch` is a *model* hyper-parameter: it sets which parameters each gradient is taken at, so it changes
    the function (1 is the token recurrence). What TTT and Titans call the chunk size is this mini-batch. All three
    forms implement the same mini-batch semantics; `chunk_size` is, as for every op, only the block length of the
    chunk form (capped at the mini-batch, whose tokens it processes in parallel) and never changes the result.

    Args:
        q, k: [B, T, H, K]; v: [B, T, H, V], one floating dtype (bf16/fp16 compute in float32).
        beta: [B, T, H], the inner step size eta_t (>= 0).
        g: [B, T, H] log retention of weight decay, exp(g) = 1 - alpha_t (<= 0), or None for no weight decay.
        log_mu: [B, T, H] log retention of the momentum, log mu_t (<= 0), or None for no momentum (then the
            state's momentum field is [N, H, 0]). It was `log_eta`, now a deprecated alias (CHANGELOG.md).
        model: the inner model (`InnerModel`; None means the linear map k -> W^T k).
        loss: "l2" | "dot" | "huber" | "lp" (model.py); loss_param: the Huber delta or the exponent p.
        dgd: add Delta Gradient Descent's state-dependent decay -beta_t x_l x_l^T to every layer.
        step_rule: "explicit" (every layer steps with beta_t, the papers' printed rule) or "proximal" (layer l steps
            with beta_t / (1 + beta_t max(||x_l||^2, ||G_l||^2 / ||dloss/df||^2)), x_l its input at the anchor; on
            the output layer the exact proximal step of the l2 loss and of DGD's eq. 56 for one input, which cannot
            expand whatever ||x_l||; momentum then accumulates (1 - mu_t) of each step: model.layer_steps).
        ln_weight, ln_bias: [H, V] affine of the output layer norm when `model.layer_norm` (None: no affine).
        scale: multiplies q; None means 1 (a nonlinear memory is read at the query itself, so the K^-1/2 of
            attention scores that other ops default to has no meaning here).
        initial_state: TTTState (N sequences) or None: zero parameters, which is a fixed point of an MLP; layers
            pass their meta-learned initial parameters, expanded over the batch.
        output_final_state: return the TTTState after the last token (canonical: anchor = params at offset 0).
        mode: "reference" | "recurrent" | "chunk".
        mini_batch: C, the inner mini-batch (a power of two; part of the model).
        chunk_size: block length of the chunk form (a power of two; min(chunk_size, mini_batch) is used).
        cu_seqlens: [N + 1] integer offsets of packed sequences (B = 1).
        token_mask: [B, T] bool, False at padded tokens, True on a prefix of each row (right padding): padded tokens
            change nothing and do not count towards the mini-batch.
        read_scale: [C] or [H, C] (C = `mini_batch`), or None (all ones). The output of the token at position i
            (0-based) of its mini-batch reads every layer at theta_{s(t)} + r_i (theta_t - theta_{s(t)}): the anchor
            plus r_i times the change the mini-batch has made so far (state.py); the state is never scaled. Official
            TTT (ttt-lm-pytorch, `token_idx` plus its learnt bias) reads the summed gradients scaled by
            c_i = 1/(i + 1) + bias_i and ends the mini-batch at c_{C-1}: beta = c_{C-1} eta and r_i = c_i / c_{C-1}
            (official TTT has no decay or momentum; with them, r scales their change within the mini-batch too).
            Padded tokens read theta_t (r = 1). Gradients flow to r.

    Returns:
        o: [B, T, H, V] in the input dtype, and the final TTTState or None.
    """
    log_mu = renamed_argument("ttt", "log_mu", log_mu, "log_eta", log_eta)
    B, T, H, K, V = check_qkv(q, k, v)
    model = InnerModel() if model is None else model
    if not isinstance(model, InnerModel):
        raise ValueError(f"model must be an InnerModel, got {type(model).__name__}")
    model.check_dims(K, V)
    check_loss(loss, loss_param)
    if not isinstance(dgd, bool):
        raise ValueError(f"dgd must be a bool, got {dgd!r}")
    if step_rule not in STEP_RULES:
        raise ValueError(f"step_rule must be one of {STEP_RULES}, got {step_rule!r}")
    check_tensor("beta", beta, 3, "[B, T, H]")
    check_same_device(q=q, beta=beta, g=g, log_mu=log_mu)  # before any check that reads values
    check_token_scalar("beta", beta, B, T, H, low=0.0)
    for name, gate in (("g", g), ("log_mu", log_mu)):
        if gate is not None:
            check_log_gate(name, gate, B, T, H, K, ("scalar",))
    check_scale(scale)
    ln = _layer_norm_params(model, ln_weight, ln_bias, H, V)
    N = num_states(B, T, cu_seqlens)
    P = model.num_params(K, V)
    params = ((N, H, P), "[N, H, P]")
    momentum = ((N, H, P if log_mu is not None else 0), "[N, H, P]" if log_mu is not None else "[N, H, 0]")
    check_state_tuple(initial_state, TTTState, {"params": params, "momentum": momentum, "anchor": params,
                                                "offset": ((N, H), "[N, H]")}, q,
                      context=" (momentum [N, H, 0] when log_mu is None)")
    dtype = compute_dtype(q)
    live = torch.ones(B, T, H, dtype=dtype, device=q.device)
    g = torch.zeros_like(live) if g is None else g
    if token_mask is not None:
        _check_token_mask(token_mask, B, T)
        keep = token_mask.unsqueeze(-1)  # [B, T, 1]
        live = live * keep
        beta, g = beta.masked_fill(~keep, 0.0), g.masked_fill(~keep, 0.0)
        log_mu = log_mu.masked_fill(~keep, 0.0) if log_mu is not None else None
    q_read = q.to(dtype) * (1.0 if scale is None else scale)
    tokens = {"q": q_read, "k": k, "v": v, "beta": beta, "g": g, "log_mu": log_mu, "live": live}
    check_chunk_size(mini_batch, "mini_batch")
    read_scale = _read_scale(read_scale, H, mini_batch, q)
    options = {"model": model, "loss": loss, "loss_param": loss_param, "dgd": dgd, "ln": ln, "mini_batch": mini_batch,
               "step_rule": step_rule, "read_scale": read_scale}
    return Call(tokens, q.dtype, initial_state, options, cu_seqlens=cu_seqlens)


def _layer_norm_params(model: InnerModel, weight, bias, H: int, V: int):
    if (weight is not None or bias is not None) and not model.layer_norm:
        raise ValueError("ln_weight and ln_bias apply to an inner model with layer_norm=True")
    if weight is None and bias is None:
        return None
    if weight is None or bias is None:
        raise ValueError("ln_weight and ln_bias come together (or both None)")
    for name, p in (("ln_weight", weight), ("ln_bias", bias)):
        check_tensor(name, p, 2, "[H, V]")
        check_shape(name, p, (H, V), "[H, V]")
    return weight, bias


def _read_scale(read_scale, H: int, C: int, q):
    """read_scale [C] or [H, C] as [H, C], or None."""
    if read_scale is None:
        return None
    if not isinstance(read_scale, torch.Tensor) or not read_scale.is_floating_point():
        raise ValueError(f"read_scale must be a floating tensor of shape [C] or [H, C] (C = mini_batch = {C}), "
                         f"got {type(read_scale).__name__}")
    if tuple(read_scale.shape) not in ((C,), (H, C)):
        raise ValueError(f"read_scale must have shape [C] = {[C]} or [H, C] = {[H, C]} (C = mini_batch), "
                         f"got {list(read_scale.shape)}")
    check_same_device(q=q, read_scale=read_scale)
    return read_scale.expand(H, C)


def _check_token_mask(token_mask, B: int, T: int) -> None:
    if not isinstance(token_mask, torch.Tensor) or token_mask.dtype != torch.bool or tuple(token_mask.shape) != (B, T):
        got = f"{token_mask.dtype} of shape {list(token_mask.shape)}" if isinstance(token_mask, torch.Tensor) else \
            type(token_mask).__name__
        raise ValueError(f"token_mask must be a bool tensor of shape [B, T] = {[B, T]}, got {got}")
    if checks_values(token_mask) and T > 1 and bool((token_mask[:, 1:] & ~token_mask[:, :-1]).any()):
        raise ValueError("token_mask must be True on a prefix of each row (right padding); move left padding to "
                         "the right first")
