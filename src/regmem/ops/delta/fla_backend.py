"""Optional GPU kernels: the chunk form of the delta rule and the gated delta rule by flash-linear-attention.

Run by `backend="fla"`, or by `backend="auto"` (the default) on CUDA tensors when fla is installed (ops/common/
backends.py). fla's recurrences are regmem's (fla.ops.*.naive, read for fla 0.6.0): the state [N, H, K, V] with
o_t = S_t^T q_t, the decay applied first (a scalar gate to all of S, a diagonal gate to the K rows of S, as Kimi
Delta Attention's `chunk_kda`), then u_t = beta_t (v_t - S'^T k_t) and S_t = S' + k_t u_t^T; beta is taken as given
(not passed through a sigmoid in the kernel), so beta in (1, 2] keeps its negative eigenvalue. q is already
scaled, so fla is called with scale=1.
"""

from __future__ import annotations

from regmem.ops.common.backends import check_cuda, fla_backend, fla_kernel


def delta_fla_core(q, k, v, g, beta, *, initial_state, chunk_size):
    """Same contract as `delta_chunk_core`: g None (delta rule), [B, T, H] (Gated DeltaNet) or [B, T, H, K] (KDA)."""
    del chunk_size  # fla picks its own tiling
    check_cuda(q)
    kwargs = dict(q=q, k=k, v=v, beta=beta, scale=1.0, initial_state=initial_state, output_final_state=True)
    if g is None:
        return fla_kernel("fla.ops.delta_rule", "chunk_delta_rule")(**kwargs)
    if g.ndim == 3:
        return fla_kernel("fla.ops.gated_delta_rule", "chunk_gated_delta_rule")(g=g, **kwargs)
    return fla_kernel("fla.ops.kda", "chunk_kda")(g=g, **kwargs)


FLA = fla_backend(chunk=delta_fla_core)
