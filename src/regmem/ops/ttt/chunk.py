"""Chunk form of the test-time-training engine: one mini-batch of C tokens per step, every inner gradient of the
mini-batch taken at its start (state.py), the within-mini-batch parameter recurrence applied in parallel ("dual
form": the parameters of every token are never materialised).

Why it is parallel. Given the anchor theta_0 of a mini-batch, the keys run forward and the loss gradient runs back
for all C tokens at once (batched matmuls), giving each layer's inputs X = [x_1..x_C] and errors, and the scaled
gradient rows D = -eta ⊙ delta (the gradient of W_l is x_i^T delta_i, rank one). What remains is linear in the
parameters. With alpha, mu the weight-decay and momentum retentions and rho = eta under DGD (0 otherwise), each
layer's W (in row form, h = x W) follows
    Pi_i = mu_i Pi_{i-1} + x_i^T d_i,    W_i = alpha_i W_{i-1} + x_i^T e_i + live_i Pi_i,    e_i = -rho_i x_i W_{i-1},
which unrolls, inside the mini-batch, to (DERIVATION.md)
    W_i = a_i W_0 + b_i Pi_0 + sum_{r<=i} Gam_ir x_r^T e_r + sum_{r<=i} M_ir x_r^T d_r
with a_i = prod_{j<=i} alpha_j, Gam_ir = prod_{r<j<=i} alpha_j, M = Gam Eta (Eta_ur = prod_{r<j<=u} mu_j) and
b = Gam c (c_u = prod_{j<=u} mu_j); without momentum M = Gam and b = 0. The DGD errors e solve one unit
lower-triangular system per layer, the UT/WY step of DeltaNet:
    (I + L) E = -rho ⊙ (a_prev ⊙ X W_0 + b_prev ⊙ X Pi_0 + (M_prev ⊙ X X^T) D),   L_ir = rho_i Gam_{i-1,r} x_i.x_r
(r < i; "prev" is the coefficient of the parameters before token i). A query row z (the layer's input on the query
path, itself computed through the updated earlier layers) then reads
    z_i W_i = a_i z_i W_0 + b_i z_i Pi_0 + ((Gam ⊙ Z X^T) E)_i + ((M ⊙ Z X^T) D)_i,
a masked attention-like product, and the mini-batch's end state is the same expression at i = C.

Carrying a state that ends inside a mini-batch: rows are shifted right by their offset (dead tokens in front), so the
mini-batch grid of the call continues the one of the state; the first mini-batch takes its gradients at the state's
anchor and starts its recurrence from the state's parameters.

The form runs in blocks of c = min(chunk_size, C) tokens: a block holds the tokens of one mini-batch, whose
gradients all share the anchor, so the algebra above holds with the block's entering (W_0, Pi_0); the anchor moves
only where a mini-batch starts. The block length therefore changes the speed, never the result.

Legend: B batch, T time, H heads, K key dim, V value dim, N blocks, c block length, C mini-batch, P parameters per head.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from regmem.ops.common import (
    CompileBackend,
    check_compile_option,
    compiled,
    merge_chunks,
    segsum,
    split_chunks,
    suffix_exclusive,
)
from regmem.ops.ttt.model import InnerModel, activation, layer_norm, layer_steps, loss_grad, matmul, norms_sq
from regmem.ops.ttt.state import TTTState, start_anchor, zero_state


def ttt_chunk_core(q, k, v, beta, g, log_mu, live, *, initial_state, model: InnerModel, loss, loss_param, dgd, ln,
                   mini_batch, chunk_size, step_rule, read_scale, compile_blocks: bool | CompileBackend = False):
    """Arguments and returns as `ttt_reference_core`; the mini-batch runs in blocks of min(chunk_size, mini_batch)
    tokens (both powers of two), the anchor moving only at mini-batch boundaries. `compile_blocks` (True, or a
    torch.compile backend's name) runs every block through one compiled `_block` (ops/common/compiled.py): the same
    numbers to round-off, fewer and larger kernels."""
    check_compile_option("compile_blocks", compile_blocks)
    block = compiled(_block, compile_blocks) if compile_blocks else _block
    B, T, H, K = q.shape
    V = v.shape[-1]
    C = mini_batch
    c = min(chunk_size, C)  # block length; c divides C
    ln = None if ln is None else tuple(p.to(q.dtype)[:, None, :] for p in ln)  # [H, 1, V]
    with_momentum = log_mu is not None
    state = initial_state or zero_state(B, H, model.num_params(K, V), with_momentum, q)
    offset0 = state.offset
    seen = live.sum(dim=1)  # [B, H], live tokens of this call
    tokens = {"q": q, "k": k, "v": v, "beta": beta, "g": g, "log_mu": log_mu, "live": live}
    shift = None
    if initial_state is not None:  # continue the state's mini-batch grid (module docstring)
        shift = offset0.long()  # [B, H]
        tokens = _shift_right(tokens, shift, C)
    T_run = tokens["q"].shape[1]
    qc, kc, vc = (split_chunks(tokens[n], c) for n in ("q", "k", "v"))  # [B, H, N, c, K|V]
    gates = {n: split_chunks(tokens[n], c) for n in ("beta", "g", "live")}  # [B, H, N, c]
    mus = split_chunks(tokens["log_mu"], c) if with_momentum else None  # [B, H, N, c]
    kern = _kernels(gates["g"], mus, gates["live"])
    reads = read_scale.to(q.dtype) if read_scale is not None else None  # [H, C]

    # Parameters stay per layer inside the loop ([B, H, rows, columns] each) and are packed once at the end.
    W_now = model.unpack(state.params, K, V)
    P_now = model.unpack(state.momentum, K, V) if with_momentum else [None] * model.depth
    anchor_w = model.unpack(start_anchor(state), K, V)
    final_anchor = model.pack(anchor_w)
    outputs = []
    per_chunk = [x.unbind(2) for x in (qc, kc, vc, gates["beta"], gates["live"])]
    per_kernel = {n: x.unbind(2) for n, x in kern.items()}
    mu_n = mus.unbind(2) if with_momentum else None  # [B, H, c] per block
    for n, (q_n, k_n, v_n, eta_n, live_n) in enumerate(zip(*per_chunk, strict=True)):
        kn = {name: x[n] for name, x in per_kernel.items()}
        if n > 0 and n % (C // c) == 0:  # a mini-batch starts: its gradients are taken here
            anchor_w = W_now
            # Live tokens form a prefix of each row (after the shift), so a mini-batch holds live tokens iff its
            # first block does: the final anchor is the last such mini-batch's, checked once per mini-batch.
            has_live = (live_n.sum(-1) > 0).unsqueeze(-1)  # [B, H, 1]
            final_anchor = torch.where(has_live, model.pack(anchor_w), final_anchor)
        mu = mu_n[n] if with_momentum else None
        r_n = None
        if reads is not None:  # the block's positions in its mini-batch; padded tokens read at 1 (state.py)
            first = (n % (C // c)) * c
            r_n = reads[:, first:first + c]  # [H, c]
            r_n = (1 + live_n * (r_n - 1)).unsqueeze(-1)  # [B, H, c, 1]
        out, new_w, new_p = block(anchor_w, W_now, P_now, q_n, k_n, v_n, eta_n, mu, kn, model=model, loss=loss,
                                  loss_param=loss_param, dgd=dgd, ln=ln, step_rule=step_rule, read_scale=r_n)
        outputs.append(out)
        W_now, P_now = new_w, new_p
    theta = model.pack(W_now)
    momentum = model.pack(P_now) if with_momentum else state.momentum

    o = merge_chunks(torch.stack(outputs, dim=2), T_run)  # [B, T_run, H, V]
    if shift is not None:
        o = _unshift(o, shift, T)
    offset = torch.remainder(offset0 + seen, C)
    final_anchor = torch.where(offset.unsqueeze(-1) == 0, theta, final_anchor)
    return o, TTTState(theta, momentum, final_anchor, offset)


def _block(anchor_w, W_now, P_now, q_n, k_n, v_n, eta_n, mu_n, kn, *, model: InnerModel, loss, loss_param, dgd, ln,
           step_rule, read=None, read_scale=None, forward=None):
    """One block of c tokens inside one mini-batch (module docstring): gradients at the anchor's layers `anchor_w`,
    the recurrence from (W_now, P_now) (lists per layer; P None without momentum). q_n, k_n: [..., c, K]; v_n:
    [..., c, V]; eta_n, mu_n (log momentum retention or None): [..., c]; kn: the block's decay kernels (`_kernels`);
    the leading dims [...] ([B, H] in the chunk form) broadcast. `read` (None: all) selects, from every tensor's
    leading dims, the memories whose query path is computed (q_n is already selected): a caller that reads one of
    several stacked memories skips the others' reads; q_n None skips every read (the outputs are then None). Returns
    the outputs [..., c, V] and the layers' (W, Pi) at the block's end. read_scale: [..., c, 1] or None, each row
    reads the anchor plus that multiple of the change since it (state.py)."""
    y, trace = forward if forward is not None else model.forward(anchor_w, k_n, ln)  # [..., c, V]
    dy = loss_grad(loss, y, v_n, loss_param)
    deltas = model.backward(anchor_w, trace, dy, ln)
    steps, rhos = layer_steps(step_rule, eta_n.unsqueeze(-1), *norms_sq(trace[0], deltas, dy),
                              mu_n.unsqueeze(-1) if mu_n is not None else None)  # each layer's, [..., c, 1]
    z = q_n
    new_w, new_p = [], []
    layers = zip(W_now, P_now, trace[0], deltas, steps, rhos, strict=True)
    for layer, (W0, P0, X, delta, eta, rho) in enumerate(layers):
        D = -eta * delta
        XW0 = trace[1][layer] if W0 is anchor_w[layer] else None  # the key path's pre-activation at the anchor
        W_end, P_end, E = _layer_state(W0, P0, X, D, rho if dgd else None, kn, XW0)
        new_w.append(W_end)
        new_p.append(P_end)
        if z is None:
            continue
        pick = read or (lambda t: t)
        z_in = model.layer_input(z)
        h = _layer_read(z_in, *(None if t is None else pick(t) for t in (W0, P0, X, D, E)),
                        {name: pick(t) for name, t in kn.items()})
        if read_scale is not None:  # z (A + r (W - A)) = z A + r (z W - z A), A the anchor's layer
            h_anchor = matmul(z_in, pick(anchor_w[layer]))
            h = h_anchor + read_scale * (h - h_anchor)
        z = activation(model.activation, h) if layer < model.depth - 1 else h
    if z is None:
        return None, new_w, new_p
    ln_read = ln if ln is None or read is None else tuple(read(p) for p in ln)
    out = layer_norm(z, ln_read, model.ln_eps) if model.layer_norm else z
    return (out + q_n if model.residual else out), new_w, new_p


def ttt_mini_batch(q, k, v, beta, g, log_mu, weights: list, momenta: list, *, model: InnerModel, loss="l2",
                   loss_param=None, dgd: bool = False, step_rule="explicit", ln=None,
                   read=None, forward=None) -> tuple[torch.Tensor, list, list]:
    """Exactly one whole mini-batch from a mini-batch start, heads first and per layer: `ttt(..., mode="chunk",
    mini_batch=T)` on a state whose offset is 0, every token live, without the checks, the realignment and the dead
    block a continued call pays for, and without packing the parameters (a caller that runs a sequence mini-batch
    by mini-batch, like self-modifying Titans, knows it is aligned and keeps its layers apart between calls).
    k: [..., T, K]; v: [..., T, V]; beta, g (or None), log_mu (or None): [..., T]; weights: the layers
    [..., rows, columns] (`model.unpack` of the parameters, which are the anchor); momenta: the same for the
    momentum, or [None] * depth without it. The leading dims ([B, H], or e.g. [B, memories, H]) broadcast, so
    inputs shared by several memories are passed once. q: [..., T, K] of the memories `read` selects (`_block`), or
    None to advance the state without reading (o is then None).
    ln: the output layer norm's affine (gamma, beta), each broadcastable to [..., T, V] with the leading dims of
    the other tensors (so `read` selects from it too), or None. forward: the model's (output, trace) on k at the
    anchor (`InnerModel.forward`), when the caller computed it with other rows (`InnerModel.forward_parts`), or
    None. Returns o [..., T, V] and the layers' weights and momenta after the mini-batch."""
    g = torch.zeros_like(beta) if g is None else g
    kn = _kernels(g, log_mu)  # the one block's kernels, every token live
    return _block(weights, weights, momenta, q, k, v, beta, log_mu, kn, model=model, loss=loss,
                  loss_param=loss_param, dgd=dgd, ln=ln, step_rule=step_rule, read=read, forward=forward)


def _layer_state(W0, P0, X, D, rho, kn, XW0=None):
    """One layer of one mini-batch in the dual form (module docstring), its state: X: [..., C, d_in] the key-path
    inputs; W0, P0: [..., d_in, d_out] parameters and momentum entering the mini-batch (P0 None without momentum);
    D: [..., C, d_out] the rows -eta_i delta_i; rho: [..., C, 1] or None (no DGD); XW0: X W0 when the caller has it
    (the key path's pre-activations, when W0 is the anchor the gradients were taken at), or None. Returns the
    layer's (W, Pi) at the mini-batch end and the DGD errors E [..., C, d_out] (None without DGD)."""
    Xt = X.transpose(-1, -2)  # [..., d_in, C]
    rows = kn["M_end"] * D  # what X^T carries into W_end: the gradient rows, then the DGD errors
    P_end = E = None
    if rho is not None:  # the DGD errors e_i = -rho_i x_i W_{i-1}: one triangular solve
        XX = matmul(X, Xt)  # [..., C, C]
        rhs = kn["a_prev"] * (matmul(X, W0) if XW0 is None else XW0) + matmul(kn["M_prev"] * XX, D)
        if P0 is not None:
            rhs = rhs + kn["b_prev"] * matmul(X, P0)
        L = rho * (kn["Gam_prev"] * XX)  # strictly lower
        E = torch.linalg.solve_triangular(L, -rho * rhs, upper=False, unitriangular=True)  # [..., C, d_out]
        rows = rows + kn["Gam_end"] * E
    W_end = kn["a_end"] * W0 + matmul(Xt, rows)
    if P0 is not None:
        W_end = W_end + kn["b_end"] * P0
        P_end = kn["c_end"] * P0 + matmul(Xt, kn["E_end"] * D)
    return W_end, P_end, E


def _layer_read(Z, W0, P0, X, D, E, kn):
    """The query path of `_layer_state`'s layer: Z [..., C, d_in] reads the parameters after each token. Returns
    the pre-activations [..., C, d_out]."""
    ZX = matmul(Z, X.transpose(-1, -2))  # [..., C, C]
    h = kn["a"] * matmul(Z, W0) + matmul(kn["M"] * ZX, D)
    if P0 is not None:
        h = h + kn["b"] * matmul(Z, P0)
    if E is not None:
        h = h + matmul(kn["Gam"] * ZX, E)
    return h


def _kernels(g, log_mu, live=None):
    """g, live (None: every token live): [..., C]; log_mu: [..., C] or None; the leading dims are any ([B, H, N] for
    N mini-batches, or one mini-batch's [B, H]). The decay coefficients of each mini-batch, shaped as `_layer_state`
    and `_layer_read` use them: the matrices [..., C, C], the per-token factors [..., C, 1] and the "_end" scalars
    [..., 1, 1] (the rows "_end" of a matrix [..., C, 1]), each made once per mini-batch rather than reshaped in
    every layer; every factor is exp of a direct sum of log retentions, so retention 1 (g = 0) is exact."""
    Gam = torch.exp(segsum(g))  # [..., C(i), C(u)], prod_{u<j<=i} alpha_j, times live_u
    Gam = Gam if live is None else Gam * live.unsqueeze(-2)
    a = torch.exp(g.cumsum(dim=-1)).unsqueeze(-1)  # [..., C, 1]
    out = {"Gam": Gam, "a": a, "a_end": a[..., -1:, :], "Gam_end": Gam[..., -1, :].unsqueeze(-1),
           "a_prev": F.pad(a[..., :-1, :], (0, 0, 1, 0), value=1.0), "Gam_prev": _prev_rows(Gam)}
    if log_mu is None:
        M = Gam
    else:
        Eta = torch.exp(segsum(log_mu))  # [..., C(u), C(r)]
        c = torch.exp(log_mu.cumsum(dim=-1)).unsqueeze(-1)  # [..., C, 1]
        M = matmul(Gam, Eta)
        b = matmul(Gam, c)  # [..., C, 1]
        out |= {"b": b, "b_end": b[..., -1:, :], "b_prev": F.pad(b[..., :-1, :], (0, 0, 1, 0)),
                "c_end": c[..., -1:, :], "E_end": torch.exp(suffix_exclusive(log_mu, dim=-1)).unsqueeze(-1)}
    return out | {"M": M, "M_end": M[..., -1, :].unsqueeze(-1), "M_prev": _prev_rows(M)}


def _prev_rows(kernel):
    """[..., C, C] -> row i holds row i - 1 of the kernel, row 0 is zero."""
    return F.pad(kernel[..., :-1, :], (0, 0, 1, 0))


def _shift_right(tokens: dict, shift: torch.Tensor, C: int) -> dict:
    """Moves token t of row (b, h) to t + shift[b, h] (0 <= shift < C) in a sequence of T + C positions; the new
    positions are dead (live 0, retentions 1, step 0)."""
    B, T, H = tokens["beta"].shape
    pos = torch.arange(T + C, device=shift.device)[None, :, None] - shift[:, None, :]  # [B, T + C, H]
    valid = (pos >= 0) & (pos < T)
    index = pos.clamp(0, max(T - 1, 0))
    out = {}
    for name, x in tokens.items():
        if x is None:
            out[name] = None
            continue
        if T == 0:
            out[name] = x.new_zeros(B, C, *x.shape[2:])
            continue
        idx = index.view(B, T + C, H, *([1] * (x.ndim - 3))).expand(B, T + C, H, *x.shape[3:])
        mask = valid.view(B, T + C, H, *([1] * (x.ndim - 3)))
        out[name] = torch.gather(x, 1, idx) * mask
    return out


def _unshift(o: torch.Tensor, shift: torch.Tensor, T: int) -> torch.Tensor:
    """The inverse of `_shift_right` for the output o: [B, T + C, H, V] -> [B, T, H, V]."""
    B, _, H, V = o.shape
    pos = torch.arange(T, device=o.device)[None, :, None] + shift[:, None, :]  # [B, T, H]
    return torch.gather(o, 1, pos.unsqueeze(-1).expand(B, T, H, V))
