"""A probe, not part of regmem (2026-11-30, issue 45): the state half of one layer of the TTT engine's dual form
(src/regmem/ops/ttt/chunk.py, `_layer_state`) as one autograd.Function with its backward written out, to test
whether autograd's per-node cost is what keeps Hope's eager training step above 12x a Gated DeltaNet layer.

Forward, for one layer (rows layout, h = x W; shapes [..., C, d] with the kernels of chunk.`_kernels`):

    XX   = X X^T                                  (only with DGD)
    rhs  = a_prev ⊙ X W0 + (M_prev ⊙ XX) D + b_prev ⊙ X P0
    E    = (I + L)^-1 (-rho ⊙ rhs),   L = rho ⊙ Gam_prev ⊙ XX          (strictly lower: a unit-triangular solve)
    rows = M_end ⊙ D + Gam_end ⊙ E
    W    = a_end W0 + X^T rows + b_end P0
    Pi   = c_end P0 + X^T (E_end ⊙ D)

Backward, from the cotangents (gW, gPi, gE): with G = X gW the cotangent of rows, the solve's right-hand side gets
gB = (I + L)^-T (gE + Gam_end ⊙ G) and L gets strict_lower(-gB E^T); the DGD right-hand side sends
g_rhs = -rho ⊙ gB back through its three terms, and XX's cotangent S reaches X as (S + S^T) X. It is exact against
autograd through the engine's form (probe.py checks 24 combinations in float64, and torch's gradcheck), first order
only. It made the step no faster (probe.txt), so the engine keeps its written-out form.
"""

from __future__ import annotations

import torch
from torch.autograd.function import once_differentiable

from regmem.ops.ttt.model import matmul  # noqa: E402


def layer_state(W0, P0, X, D, rho, kn: dict, XW0=None):
    """One layer of one mini-batch in the dual form, its state: X [..., C, d_in] the key-path inputs; W0, P0
    [..., d_in, d_out] the parameters and momentum entering the mini-batch (P0 None without momentum); D [..., C,
    d_out] the rows -eta_i delta_i; rho [..., C, 1] or None (no DGD); kn: the block's kernels (chunk.`_kernels`);
    XW0: X W0 when the caller has it (the key path's pre-activations at the anchor), or None. Returns the layer's
    (W, Pi) at the mini-batch end (Pi None without momentum) and the DGD errors E [..., C, d_out] (None without
    DGD). The leading dims broadcast."""
    momentum, dgd = P0 is not None, rho is not None
    coefficients = [kn["a_end"], kn["M_end"]]
    coefficients += [kn["b_end"], kn["c_end"], kn["E_end"]] if momentum else [None] * 3
    coefficients += [kn["Gam_end"], kn["a_prev"], kn["M_prev"], kn["Gam_prev"]] if dgd else [None] * 4
    coefficients += [kn["b_prev"]] if momentum and dgd else [None]
    W, P, E = LayerStateFunction.apply(W0, P0, X, D, rho, XW0 if dgd else None, *coefficients)
    return W, (P if momentum else None), (E if dgd else None)


class LayerStateFunction(torch.autograd.Function):
    """`layer_state` (module docstring). Absent terms are None inputs; the outputs that do not exist are returned as
    empty tensors that nothing reads."""

    @staticmethod
    def forward(ctx, W0, P0, X, D, rho, XW0, a_end, M_end, b_end, c_end, E_end, Gam_end, a_prev, M_prev, Gam_prev,
                b_prev):
        Xt = X.transpose(-1, -2)  # [..., d_in, C]
        rows = M_end * D
        E = XW = XP = XX = rhs = L = None
        if rho is not None:  # the DGD errors e_i = -rho_i x_i W_{i-1}: one triangular solve
            XX = matmul(X, Xt)  # [..., C, C]
            XW = matmul(X, W0) if XW0 is None else XW0
            rhs = a_prev * XW + matmul(M_prev * XX, D)
            if P0 is not None:
                XP = matmul(X, P0)
                rhs = rhs + b_prev * XP
            L = rho * (Gam_prev * XX)  # strictly lower
            E = torch.linalg.solve_triangular(L, -rho * rhs, upper=False, unitriangular=True)  # [..., C, d_out]
            rows = rows + Gam_end * E
        W = a_end * W0 + matmul(Xt, rows)
        P = None
        if P0 is not None:
            W = W + b_end * P0
            P = c_end * P0 + matmul(Xt, E_end * D)
        ctx.save_for_backward(W0, P0, X, D, rho, XW0, a_end, M_end, b_end, c_end, E_end, Gam_end, a_prev, M_prev,
                              Gam_prev, b_prev, E, XW, XP, XX, rhs, L, rows)
        ctx.set_materialize_grads(False)
        ctx.w_shape = W.shape
        empty = W.new_empty(0)
        return W, (empty if P is None else P), (empty if E is None else E)

    @staticmethod
    @once_differentiable  # the forward's intermediates are saved without a graph: a second derivative raises
    def backward(ctx, gW, gP, gE):
        (W0, P0, X, D, rho, XW0, a_end, M_end, b_end, c_end, E_end, Gam_end, a_prev, M_prev, Gam_prev, b_prev,
         E, XW, XP, XX, rhs, L, rows) = ctx.saved_tensors
        momentum, dgd = P0 is not None, rho is not None
        gP = gP if momentum else None
        gE = gE if dgd else None
        if gW is None:  # only the momentum or the errors are read (the end parameters are not)
            gW = W0.new_zeros(ctx.w_shape)
        Xt = X.transpose(-1, -2)
        g_rows = matmul(X, gW)  # [..., C, d_out]
        gX = matmul(rows, gW.transpose(-1, -2))
        gW0 = a_end * gW
        ga_end = (gW * W0).sum((-1, -2), keepdim=True)
        gD = M_end * g_rows
        gM_end = (g_rows * D).sum(-1, keepdim=True)
        gP0 = gb_end = gc_end = gE_end = None
        if momentum:
            gP0 = b_end * gW
            gb_end = (gW * P0).sum((-1, -2), keepdim=True)
            if gP is not None:
                gP0 = gP0 + c_end * gP
                gc_end = (gP * P0).sum((-1, -2), keepdim=True)
                g_ED = matmul(X, gP)  # the cotangent of E_end ⊙ D
                gX = gX + matmul(E_end * D, gP.transpose(-1, -2))
                gE_end = (g_ED * D).sum(-1, keepdim=True)
                gD = gD + E_end * g_ED
        grho = gXW0 = gGam_end = ga_prev = gM_prev = gGam_prev = gb_prev = None
        if dgd:
            gGam_end = (g_rows * E).sum(-1, keepdim=True)
            gE_total = Gam_end * g_rows if gE is None else gE + Gam_end * g_rows
            # E = (I + L)^-1 B with B = -rho ⊙ rhs: B's cotangent solves the transposed (upper, unit) system
            gB = torch.linalg.solve_triangular(L.transpose(-1, -2), gE_total, upper=True, unitriangular=True)
            gL = torch.tril(-matmul(gB, E.transpose(-1, -2)), diagonal=-1)
            grho = (gL * (Gam_prev * XX)).sum(-1, keepdim=True) - (gB * rhs).sum(-1, keepdim=True)
            g_rhs = -rho * gB
            gGam_prev = gL * (rho * XX)
            gXX = gL * (rho * Gam_prev)
            ga_prev = (g_rhs * XW).sum(-1, keepdim=True)
            gXW = a_prev * g_rhs
            MXX = M_prev * XX
            g_MXX = matmul(g_rhs, D.transpose(-1, -2))
            gD = gD + matmul(MXX.transpose(-1, -2), g_rhs)
            gM_prev = g_MXX * XX
            gXX = gXX + g_MXX * M_prev
            if momentum:
                gb_prev = (g_rhs * XP).sum(-1, keepdim=True)
                gXP = b_prev * g_rhs
                gX = gX + matmul(gXP, P0.transpose(-1, -2))
                gP0 = gP0 + matmul(Xt, gXP)
            if XW0 is not None:
                gXW0 = gXW
            else:
                gX = gX + matmul(gXW, W0.transpose(-1, -2))
                gW0 = gW0 + matmul(Xt, gXW)
            gX = gX + matmul(gXX + gXX.transpose(-1, -2), X)
        grads = (gW0, gP0, gX, gD, grho, gXW0, ga_end, gM_end, gb_end, gc_end, gE_end, gGam_end, ga_prev, gM_prev,
                 gGam_prev, gb_prev)
        inputs = (W0, P0, X, D, rho, XW0, a_end, M_end, b_end, c_end, E_end, Gam_end, a_prev, M_prev, Gam_prev,
                  b_prev)
        return tuple(None if g is None or t is None or not ctx.needs_input_grad[i] else g.sum_to_size(t.shape)
                     for i, (g, t) in enumerate(zip(grads, inputs, strict=True)))
