"""Delta Gradient Descent (DGD) as one step on a linear layer (Nested Learning, arXiv:2512.24695, Sec. 4.5, eqs.
54-57, Appendix C), in regmem's row layout: h = x W, W: [d_in, d_out], the transpose of the paper's M and of a
torch.nn.Linear weight. The step depends on the inputs through the weight gradient G and the input moment C only;
its objective, the exact (proximal) and the explicit step, eq. 57 as the one-input case and the paper's erratum on
eta' are derived in DERIVATION.md §5 beside this file. `regmem.optim.DGD` takes the exact step, the engine
`ttt(..., dgd=True)` the explicit one (eq. 88).
"""

from __future__ import annotations

import torch


def dgd_step(W: torch.Tensor, grad: torch.Tensor, moment: torch.Tensor, eta, *, delta: float = 1.0,
             proximal: bool = True) -> torch.Tensor:
    """One DGD step on a linear layer h = x W (DERIVATION.md §5).

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
    if W.ndim < 2:
        raise ValueError(f"W must be [..., d_in, d_out], got shape {list(W.shape)}")
    d_in = W.shape[-2]
    if grad.shape != W.shape:
        raise ValueError(f"grad must be [..., d_in, d_out], the shape of W {list(W.shape)}, got {list(grad.shape)}")
    if moment.shape != W.shape[:-2] + (d_in, d_in):
        raise ValueError(f"moment must be [..., d_in, d_in] = {list(W.shape[:-2] + (d_in, d_in))}, got "
                         f"{list(moment.shape)}")
    eta = torch.as_tensor(eta, dtype=W.dtype, device=W.device)
    eta = eta[..., None, None] if eta.ndim else eta  # [..., 1, 1]
    if not proximal:
        return W - eta * (delta * (moment @ W) + grad)
    eye = torch.eye(d_in, dtype=W.dtype, device=W.device)
    return torch.linalg.solve(eye + (eta * delta) * moment, W - eta * grad)  # C symmetric positive semi-definite
