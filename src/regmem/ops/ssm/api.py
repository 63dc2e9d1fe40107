"""The public op of Mamba-1's selective scan (S6), `selective_scan`.

It validates its arguments, discretises (A, B) per token, and runs one of three forms: `reference` (reference.py,
the literal Mamba recurrence), `recurrent` and `chunk`. The selective scan *is* gated linear attention with one head
per channel: with q = C_t, k = Bbar_t, v = x_t and the diagonal log-gate delta_t A, the state h [D, N] is GLA's
S [H = D, K = N, V = 1] (DERIVATION.md beside this file). So the recurrent and chunk forms are GLA's
(`regmem/ops/linear_attn`), whose chunk form is linear in T and exact for any decay (log-space sums).

Shapes: x, delta: [B, T, D]; A: [D, N]; B_t, C_t: [B, T, N] (shared by the channels, as in Mamba-1); D_skip: [D];
state h: [Nseq, D, N]; Nseq = B, or the number of sequences with `cu_seqlens` (then B = 1).
"""

from __future__ import annotations

from typing import Literal, get_args

import torch

from regmem.ops.common import (
    Call,
    check_at_least,
    check_at_most,
    check_initial_state,
    check_same_device,
    check_shape,
    check_tensor,
    num_states,
    op,
)
from regmem.ops.linear_attn.chunk import gla_chunk_core
from regmem.ops.linear_attn.recurrent import gla_recurrent_core
from regmem.ops.ssm.reference import selective_scan_reference_core

Discretization = Literal["zoh", "simple"]  # exact zero-order hold | Mamba's Bbar = delta B
DISCRETIZATIONS = get_args(Discretization)


def zoh_input_weight(delta: torch.Tensor, A: torch.Tensor) -> torch.Tensor:
    """The zero-order-hold input weight per unit B, (exp(delta A) - 1) / A = delta * expm1(z) / z with z = delta A,
    and its limit delta (1 + z/2 + z^2/6) as z -> 0 (A = 0 or delta = 0), smooth for gradients too.
    delta: [..., D, 1] and A: [D, N] broadcast to [..., D, N]."""
    z = delta * A
    small = z.abs() < 1e-4
    safe = torch.where(small, torch.ones_like(z), z)
    ratio = torch.where(small, 1.0 + z / 2 + z * z / 6, torch.expm1(safe) / safe)
    return delta * ratio


@op(reference=selective_scan_reference_core, recurrent=gla_recurrent_core, chunk=gla_chunk_core)
def selective_scan(x, delta, A, B, C, D=None, *, discretization: Discretization = "zoh", initial_state=None,
                   cu_seqlens=None):
    """Mamba-1's selective scan (Gu & Dao, arXiv:2312.00752, Sec. 3.2, Algorithm 2):

        h_t = exp(delta_t A) ⊙ h_{t-1} + Bbar_t ⊙ x_t,    y_t = C_t^T h_t (+ D ⊙ x_t)

    per channel d: h_t[d, :] in R^N, A[d, :] a diagonal (real) state matrix, delta_t[d] > 0 the selective step, and
    B_t, C_t in R^N computed from the input (selection). The input weight is the zero-order hold of the continuous
    system dh/dt = A h + B x over the step (eq. 4 of the paper; the "State Space Model Lineage" section of Morrill's
    lecture *Continual Learning & Memory Models*, Columbia COMS6998, 2026):
        "zoh"    Bbar_t[d, n] = (exp(delta_t[d] A[d, n]) - 1) / A[d, n] * B_t[n]  (limit delta_t[d] B_t[n] as A -> 0)
        "simple" Bbar_t[d, n] = delta_t[d] B_t[n]   (Mamba's simplification, its first-order Taylor term)

    Args:
        x: [B, T, D] the input channels; delta: [B, T, D] step sizes (>= 0; Mamba: softplus of a projection).
        A: [D, N] the continuous state matrix's diagonal (<= 0 for a stable system; Mamba: -exp(A_log)).
        B, C: [B, T, N] input and output projections of the state, shared by every channel.
        D: [D] the skip connection, or None.
        discretization: "zoh" | "simple" (above).
        initial_state: h_0 [Nseq, D, N] or None for zeros.
        output_final_state: return h_T [Nseq, D, N] (float32, or float64 for float64 input).
        mode: "reference" | "recurrent" | "chunk".
        chunk_size: chunk length of the chunk form (a power of two).
        cu_seqlens: [Nseq + 1] integer offsets of packed sequences (B = 1).

    Returns:
        y: [B, T, D] in the input dtype, and h_T or None.
    """
    check_tensor("x", x, 3, "[B, T, D]")
    Bsz, T, Dch = x.shape
    check_tensor("delta", delta, 3, "[B, T, D]")
    check_shape("delta", delta, (Bsz, T, Dch), "[B, T, D]")
    check_tensor("A", A, 2, "[D, N]")
    if A.shape[0] != Dch:
        raise ValueError(f"A must have shape [D, N] with D = {Dch} (from x), got {list(A.shape)}")
    N = A.shape[1]
    for name, t in (("B", B), ("C", C)):
        check_tensor(name, t, 3, "[B, T, N]")
        check_shape(name, t, (Bsz, T, N), "[B, T, N]")
    if D is not None:
        check_tensor("D", D, 1, "[D]")
        check_shape("D", D, (Dch,), "[D]")
    for name, t in (("delta", delta), ("B", B), ("C", C)):  # A and D are parameters: any float dtype
        if t.dtype != x.dtype:
            raise ValueError(f"{name} must have the dtype of x ({x.dtype}), got {t.dtype}")
    check_same_device(x=x, delta=delta, A=A, B=B, C=C, D=D)
    check_at_least("delta", delta, 0.0, "is a step size and must be >= 0 everywhere")
    check_at_most("A", A, 0.0, "is the diagonal of a stable state matrix and must be <= 0 everywhere")
    if discretization not in DISCRETIZATIONS:
        raise ValueError(f"discretization must be one of {DISCRETIZATIONS}, got {discretization!r}")
    Nseq = num_states(Bsz, T, cu_seqlens)
    check_initial_state(initial_state, (Nseq, Dch, N), "[Nseq, D, N]", x)
    dtype = torch.float64 if x.dtype == torch.float64 else torch.float32
    x_c, delta_c, A_c, B_c, C_c = (t.to(dtype) for t in (x, delta, A, B, C))
    step = delta_c.unsqueeze(-1)  # [B, T, D, 1]
    weight = zoh_input_weight(step, A_c) if discretization == "zoh" else step.expand(-1, -1, -1, N)  # [B, T, D, N]
    tokens = {
        "q": C_c.unsqueeze(2).expand(-1, -1, Dch, -1),  # [B, T, D, N], C_t read by every channel
        "k": weight * B_c.unsqueeze(2),  # [B, T, D, N], Bbar_t
        "v": x_c.unsqueeze(-1),  # [B, T, D, 1]
        "g": step * A_c,  # [B, T, D, N], log Abar_t = delta_t A
    }
    skip = None if D is None else (x_c * D.to(dtype))  # [B, T, D]

    def finish(y, h):
        y = y[..., 0]  # [B, T, D]
        return (y if skip is None else y + skip), (h[..., 0] if h is not None else None)

    state = initial_state.unsqueeze(-1) if initial_state is not None else None  # GLA's [Nseq, D, N, 1]
    return Call(tokens, x.dtype, state, cu_seqlens=cu_seqlens, finish=finish)
