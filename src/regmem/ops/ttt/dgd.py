"""Delta Gradient Descent as one step on a linear layer (Nested Learning, arXiv:2512.24695, Sec. 4.5, eqs. 54-57,
Appendix C and eq. 88), in regmem's row layout: h = x W, W: [d_in, d_out], the transpose of the paper's M and of
a torch.nn.Linear weight.

A linear layer trained by GD is a memory mapping its input x to u = -dL/dy with a dot-product objective (eqs.
54-55). DGD uses the l2 regression objective with a proximal term instead (eq. 56); for N inputs x_n with output
gradients dL/dy_n, and `delta` the strength of the quadratic term (1 is eq. 56, 0 is the GD objective of eq. 55),
    W_{t+1} = argmin_W  delta/2 sum_n ||W^T x_n||^2 + sum_n <W^T x_n, dL/dy_n> + 1/(2 eta) ||W - W_t||_F^2.
It depends on the inputs only through two statistics: the gradient G = sum_n x_n (dL/dy_n)^T = dL/dW (what
autograd returns) and the second moment C = sum_n x_n x_n^T. Stationarity gives the exact (proximal) step
    W_{t+1} = (I + eta delta C)^{-1} (W_t - eta G),
a GD step followed by a data-dependent decay along the inputs' directions. For one input (C = x x^T) Sherman-Morrison
turns it into eq. 57, W_{t+1} = (I - eta' x x^T) W_t - eta' x (dL/dy)^T with eta' = eta / (1 + eta ||x||^2) (the
paper prints eta / (1 + eta), the case ||x|| = 1). The explicit step, one gradient step on the same objective,
    W_{t+1} = W_t - eta (delta C W_t + G),
agrees with it to first order in eta; it is the per-token rule of the test-time-training engine `ttt(..., dgd=True)`
(eq. 88, fused there with weight decay and momentum, and for an MLP applied layer by layer: reference.py), and
`regmem.optim.DGD` applies the exact step to the weights of linear layers.
"""

from __future__ import annotations

import torch


def dgd_step(W: torch.Tensor, grad: torch.Tensor, moment: torch.Tensor, eta, *, delta: float = 1.0,
             proximal: bool = True) -> torch.Tensor:
    """One DGD step on a linear layer h = x W (module docstring).

    Args:
        W: W_t, [..., d_in, d_out].
        grad: G = sum_n x_n (dL/dy_n)^T, [..., d_in, d_out]: the loss gradient with respect to W.
        moment: C = sum_n x_n x_n^T, [..., d_in, d_in]: the second moment of the layer's inputs.
        eta: the step size eta > 0, a float or a tensor broadcastable to [...].
        delta: strength of the quadratic (delta) term, >= 0: 1 is eq. 56, 0 plain GD.
        proximal: True for the exact minimiser (I + eta delta C)^{-1} (W - eta G) (eq. 57 for one input); False
            for the explicit step W - eta (delta C W + G) (eq. 88's rule).

    Returns W_{t+1}, [..., d_in, d_out].
    """
    d_in = W.shape[-2]
    if W.ndim < 2 or grad.shape != W.shape or moment.shape != W.shape[:-2] + (d_in, d_in):
        raise ValueError(f"W must be [..., d_in, d_out] with grad [..., d_in, d_out] and moment [..., d_in, d_in], "
                         f"got W {list(W.shape)}, grad {list(grad.shape)}, moment {list(moment.shape)}")
    eta = torch.as_tensor(eta, dtype=W.dtype, device=W.device)
    eta = eta[..., None, None] if eta.ndim else eta  # [..., 1, 1]
    if not proximal:
        return W - eta * (delta * (moment @ W) + grad)
    eye = torch.eye(d_in, dtype=W.dtype, device=W.device)
    return torch.linalg.solve(eye + (eta * delta) * moment, W - eta * grad)  # C symmetric positive semi-definite
