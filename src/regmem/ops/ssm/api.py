"""The public op of Mamba-1's selective scan (S6), `selective_scan`.

It validates its arguments and runs one of three forms on x, delta, B, C with the options A and discretization:
`reference` (reference.py, the unrolled time-varying system), `recurrent` (recurrent.py, token by token) and `chunk`
(chunk.py, a scan over chunks of time that never holds the expanded [T, D, N] tensors at once). The selective scan
equals gated linear attention with one head per channel (DERIVATION.md beside this file); it has forms of its own
because with one value per head GLA's chunk form costs C times the scan and holds [B, T, D, N] decay tensors.

Shapes: x, delta: [B, T, D]; A: [D, N]; B_t, C_t: [B, T, N] (shared by the channels, as in Mamba-1); D_skip: [D];
state h: [Nseq, D, N]; Nseq = B, or the number of sequences with `cu_seqlens` (then B = 1).
"""

from __future__ import annotations

from regmem.ops.common import (
    Call,
    check_at_least,
    check_at_most,
    check_initial_state,
    check_same_device,
    check_shape,
    check_tensor,
    compute_dtype,
    num_states,
    op,
)
from regmem.ops.ssm.chunk import selective_scan_chunk_core
from regmem.ops.ssm.discretize import DISCRETIZATIONS, Discretization
from regmem.ops.ssm.recurrent import selective_scan_recurrent_core
from regmem.ops.ssm.reference import selective_scan_reference_core


@op(reference=selective_scan_reference_core, recurrent=selective_scan_recurrent_core,
    chunk=selective_scan_chunk_core)
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
    dtype = compute_dtype(x)
    skip = None if D is None else x.to(dtype) * D.to(dtype)  # [B, T, D]

    def finish(y, h):
        return (y if skip is None else y + skip), h

    return Call({"x": x, "delta": delta, "B": B, "C": C}, x.dtype, initial_state, cu_seqlens=cu_seqlens,
                options={"A": A.to(dtype), "discretization": discretization}, finish=finish)
