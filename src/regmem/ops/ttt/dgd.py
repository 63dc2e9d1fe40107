"""Delta Gradient Descent as a closed-form proximal step (Nested Learning, arXiv:2512.24695, Sec. 4.5, eqs. 56-57
and Appendix C), for one linear layer in regmem's row layout (h = x W, W: [d_in, d_out], the transpose of M).

DGD replaces the dot-product objective of a gradient step by an l2 regression onto the negative output gradient
u = -dL/dy, with a proximal term:
    W_{t+1} = argmin_W 1/2 ||W^T x - u||^2 + 1/(2 eta) ||W - W_t||_F^2                      (eq. 56)
By Sherman-Morrison, (x x^T + I/eta)^-1 = eta (I - eta' x x^T) with eta' = eta / (1 + eta ||x||^2), so
    W_{t+1} = (I - eta' x x^T) W_t - eta' x (dL/dy)^T                                          (eq. 57)
The paper prints eta' = eta / (1 + eta), the case ||x|| = 1. The explicit form (I - eta x x^T) W_t - eta x (dL/dy)^T,
one gradient step on eq. 56 from W_t, is what the engine `ttt(..., dgd=True)` applies per token (eq. 88); the two
agree to first order in eta (they differ by O(eta^2)).
"""

from __future__ import annotations

import torch


def dgd_step(W: torch.Tensor, x: torch.Tensor, grad_y: torch.Tensor, eta, *, proximal: bool = True) -> torch.Tensor:
    """One DGD step. W: [..., d_in, d_out]; x: [..., d_in] the layer input; grad_y: [..., d_out] = dL/dy at W;
    eta: a float or a tensor broadcastable to [...] (>= 0). proximal=True is the exact minimiser of eq. 56 (eq. 57);
    False is the explicit step with eta in place of eta'."""
    if W.ndim < 2 or x.shape != W.shape[:-1] or grad_y.shape != W.shape[:-2] + W.shape[-1:]:
        raise ValueError(f"W must be [..., d_in, d_out] with x [..., d_in] and grad_y [..., d_out], got W "
                         f"{list(W.shape)}, x {list(x.shape)}, grad_y {list(grad_y.shape)}")
    eta = torch.as_tensor(eta, dtype=W.dtype, device=W.device)
    if proximal:
        eta = eta / (1.0 + eta * (x * x).sum(-1))
    eta = eta[..., None, None] if eta.ndim else eta
    xW = x.unsqueeze(-2) @ W  # [..., 1, d_out]
    return W - eta * x.unsqueeze(-1) * (xW + grad_y.unsqueeze(-2))
