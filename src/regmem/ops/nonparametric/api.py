"""The public ops of the nonparametric memories: `softmax_attn`, `local_linear_attn`, `local_polynomial`,
`kernel_regression`, and the weights `attention_weights`.

*Test-time regression* (arXiv:2501.12352), Sec. 4 Vignette 4: the memory is the key-value cache and each query
solves its own weighted regression over it. Each op validates its arguments here and runs one of the forms of
reference.py, recurrent.py and chunk.py (`op(..., mode=...)` or `op.reference / .recurrent / .chunk`). The state
is `KVState(k, v)`, the cache (state.py); the similarity and the kernels are in similarity.py, the math in
DERIVATION.md beside this file.

Padding: `key_mask` [B, S + T] (bool, True = the pair takes part; softmax, local linear, local polynomial) removes
pairs from every query's regression, except that a query always sees its own pair, so no fit is empty (a padded
query regresses on itself alone); the outputs of the other queries equal a call on the sequence without those
pairs.

Legend: B batch, T new tokens, S cached pairs, H heads, K key dim, V value dim, N sequences.
"""

from __future__ import annotations

import math

import torch
from einops import rearrange

from regmem.ops.common import (
    Call,
    check_key_mask,
    check_qkv,
    check_same_device,
    check_scale,
    check_shape,
    check_state,
    check_tensor,
    compute_dtype,
    num_states,
    op,
)
from regmem.ops.nonparametric.chunk import (
    kernel_chunk_core,
    local_linear_chunk_core,
    local_polynomial_chunk_core,
    softmax_chunk_core,
)
from regmem.ops.nonparametric.recurrent import (
    kernel_recurrent_core,
    local_linear_recurrent_core,
    local_polynomial_recurrent_core,
    softmax_recurrent_core,
)
from regmem.ops.nonparametric.reference import (
    kernel_reference_core,
    local_linear_reference_core,
    local_polynomial_reference_core,
    softmax_reference_core,
)
from regmem.ops.nonparametric.similarity import REGRESSION_KERNELS, causal_logits, similarity_features
from regmem.ops.nonparametric.state import KVState
from regmem.ops.nonparametric.triton_backend import TRITON

DEGREES = (0, 1, 2)
MAX_KEY_DIM_DEGREE_2 = 16  # the p = 2 design has C(K + 2, 2) columns per pair and query: 153 at K = 16


@op(reference=softmax_reference_core, recurrent=softmax_recurrent_core, chunk=softmax_chunk_core)
def softmax_attn(q, k, v, *, scale=None, bandwidth=None, qk_norm=False, initial_state=None, output_final_state=False,
                 cu_seqlens=None, key_mask=None):
    """Causal softmax attention as the Nadaraya-Watson (local constant) regressor, eq. (50) of *Test-time
    regression* (arXiv:2501.12352); with `qk_norm` or `bandwidth`, the Gaussian-kernel form of eq. (51).

    o_t = sum_{i <= t} s(k_i, q_t) v_i / sum_{j <= t} s(k_j, q_t), the sums running over the cache and the new pairs.

    Args:
        q, k: [B, T, H, K]; v: [B, T, H, V], all one floating dtype (bf16/fp16 compute in float32).
        scale: exponential kernel s = exp(scale * q.k); None means K ** -0.5. Exclusive with `bandwidth`.
        bandwidth: Gaussian kernel s = exp(-||k - q||^2 / bandwidth) (a positive float), exact for any key norm.
        qk_norm: L2-normalise q and k before the kernel (QK-norm).
        initial_state: `KVState(k [N, S, H, K], v [N, S, H, V])`, the cache, or None for an empty one.
        output_final_state: return `KVState` of the cache followed by the T new pairs (compute dtype).
        mode: "reference" | "recurrent" | "chunk" (SDPA).
        chunk_size: a power of two; unused, since SDPA chooses its own key blocks.
        cu_seqlens: [N + 1] integer offsets of packed sequences (B = 1); no initial or final state then.
        key_mask: [B, S + T] bool (S cached, T new pairs; True = the pair takes part) or None for all pairs.
            A masked pair is used by no query but its own, so no row is empty (a padded query attends to
            itself). Not with `cu_seqlens`.

    Returns:
        o: [B, T, H, V] in the input dtype, and the final `KVState` or None.

    """
    check_similarity(scale, bandwidth, qk_norm)
    options = {"scale": scale, "bandwidth": bandwidth, "qk_norm": qk_norm}
    return kv_call(q, k, v, initial_state, output_final_state, cu_seqlens, key_mask, options)


@op(reference=local_linear_reference_core, recurrent=local_linear_recurrent_core, chunk=local_linear_chunk_core,
    backends={"triton": TRITON})
def local_linear_attn(q, k, v, *, scale=None, bandwidth=None, qk_norm=False, ridge=1e-3, initial_state=None,
                      output_final_state=False, cu_seqlens=None, key_mask=None):
    """Local linear attention, eqs. (52)-(54) of *Test-time regression* (arXiv:2501.12352, Sec. 4 Vignette 4):
    query-similarity weights, locally linear regressor, analytic weighted least squares, returning the intercept
        o_t = v_bar + C_vk (C_kk + ridge I)^{-1} (q_t - k_bar).

    Args:
        q, k: [B, T, H, K]; v: [B, T, H, V], one floating dtype (bf16/fp16/fp32 compute in float32, float64 in
            float64; the output has the input dtype).
        scale: exponential kernel s = exp(scale q.k); None means K ** -0.5. Exclusive with `bandwidth`.
        bandwidth: Gaussian kernel s = exp(-||k - q||^2 / bandwidth) (eq. 51), a positive float, or None.
        qk_norm: L2-normalise q and k, for the weights and for the regression (which then lives in the
            normalised key space).
        ridge: positive float added to C_kk, the slope block of X^T W X (with weights normalised to sum 1);
            the intercept stays unpenalised. At 0 the system is singular while t <= K.
        initial_state: KVState(k [N, S, H, K], v [N, S, H, V]), pairs seen before q, or None.
        output_final_state: return KVState(k [N, S + T, H, K], v [N, S + T, H, V]) in the compute dtype.
        mode: "reference" | "recurrent" | "chunk" (default). The chunk and recurrent forms are differentiable
            once (their backward recomputes the weights), the reference form any number of times.
        chunk_size: queries per block C of the chunk form (a power of two).
        cu_seqlens: [N + 1] integer offsets of packed sequences (B = 1); then no initial or final state.
        key_mask: [B, S + T] bool (S cached, T new pairs; True = the pair takes part) or None for all pairs.
            A masked pair is used by no query but its own, so no fit is empty (a padded query regresses on
            itself). Not with `cu_seqlens`.
        backend: "auto" (default: regmem's Triton kernel for the chunk form's moments when the tensors are on CUDA
            and triton is installed, else torch), "torch" (all forms, any device) or "triton" (the chunk form;
            CUDA, or the CPU under TRITON_INTERPRET=1; triton_backend.py).

    Returns:
        o: [B, T, H, V] in the input dtype, and the final KVState or None.

    """
    check_similarity(scale, bandwidth, qk_norm)
    check_ridge(ridge)
    options = {"scale": scale, "bandwidth": bandwidth, "qk_norm": qk_norm, "ridge": float(ridge)}
    return kv_call(q, k, v, initial_state, output_final_state, cu_seqlens, key_mask, options)


@op(reference=local_polynomial_reference_core, recurrent=local_polynomial_recurrent_core,
    chunk=local_polynomial_chunk_core)
def local_polynomial(q, k, v, *, degree=2, scale=None, bandwidth=None, qk_norm=False, ridge=1e-3, initial_state=None,
                     output_final_state=False, cu_seqlens=None, key_mask=None):
    """Local polynomial attention of degree p, eqs. (48)-(49) of *Test-time regression* (arXiv:2501.12352),
    by the literal per-query weighted least squares (reference only: materialises [B, H, T, T, C(K + p, p)]).

    Args:
        q, k: [B, T, H, K]; v: [B, T, H, V], one floating dtype (float64 stays float64, others compute in
            float32; the output has the input dtype). Causal: query t regresses on the cache and pairs 1..t.
        degree: p in {0, 1, 2}. 0 is softmax attention (Nadaraya-Watson, eq. 50), 1 is local linear attention
            (eq. 52, `local_linear_attn.reference`), 2 adds the design columns vec_sym(d d^T) (needs K <= 16).
        scale, bandwidth, qk_norm: the similarity s(k, q) (similarity.py): exp(scale q.k) with scale=None
            meaning K ** -0.5, or exp(-||k - q||^2 / bandwidth); qk_norm L2-normalises q and k for the weights
            and for the regression.
        ridge: penalty (> 0) on every non-intercept coefficient, relative to the normalised weights (sum 1).
        initial_state, output_final_state, mode, chunk_size, cu_seqlens, key_mask: as `softmax_attn`;
            `chunk_size` is the number of queries per block of the chunk form.

    Returns:
        o: [B, T, H, V] in the input dtype (the fitted intercept M^[0] of each query), and the final KVState or
        None.

    """
    check_similarity(scale, bandwidth, qk_norm)
    check_ridge(ridge)
    if degree not in DEGREES or isinstance(degree, bool):
        raise ValueError(f"degree must be one of {DEGREES}, got {degree!r}")
    if degree == 2 and isinstance(q, torch.Tensor) and q.ndim == 4 and q.shape[-1] > MAX_KEY_DIM_DEGREE_2:
        raise ValueError(f"degree=2 is for small keys: K must be <= {MAX_KEY_DIM_DEGREE_2}, got q with K = "
                         f"{q.shape[-1]}")
    options = {"degree": degree, "scale": scale, "bandwidth": bandwidth, "qk_norm": qk_norm, "ridge": float(ridge)}
    return kv_call(q, k, v, initial_state, output_final_state, cu_seqlens, key_mask, options)


@op(reference=kernel_reference_core, recurrent=kernel_recurrent_core, chunk=kernel_chunk_core)
def kernel_regression(q, k, v, *, kernel="exp", scale=None, bandwidth=None, ridge=1e-3, initial_state=None,
                      output_final_state=False, cu_seqlens=None):
    """Exact kernel ridge regression memory, eqs. (42)-(43) of *Test-time regression* (arXiv:2501.12352).

    o_t = V_t^T (k(K_t, K_t) + ridge I)^{-1} k(K_t, q_t) over every pair i <= t (cache + new tokens).

    Args:
        q, k: [B, T, H, K]; v: [B, T, H, V], all one floating dtype (bf16/fp16 compute in float32).
        kernel: "exp" (exp(scale q.k)), "gaussian" (exp(-||k - q||^2 / bandwidth)), "linear" (q.k), or a
            positive semi-definite callable (a [..., n, K], b [..., m, K]) -> Gram [..., n, m].
        scale: for kernel="exp" only; None means K ** -0.5.
        bandwidth: for kernel="gaussian" only, where it is required (a positive float).
        ridge: the positive ridge lambda added to the Gram's diagonal (default 1e-3).
        initial_state: `KVState(k [N, S, H, K], v [N, S, H, V])`, the cache, or None for an empty one.
        output_final_state: return `KVState` of the cache followed by the T new pairs (compute dtype).
        mode: "reference" (per-prefix solves) | "recurrent" (growing Cholesky) | "chunk" (one Cholesky).
        chunk_size: a power of two; unused, the chunk form factorises the whole Gram.
        cu_seqlens: [N + 1] integer offsets of packed sequences (B = 1); no initial or final state then.

    Returns:
        o: [B, T, H, V] in the input dtype, and the final `KVState` or None.

    """
    check_kernel(kernel, scale, bandwidth, ridge)
    options = {"kernel": kernel, "scale": scale, "bandwidth": bandwidth, "ridge": float(ridge)}
    return kv_call(q, k, v, initial_state, output_final_state, cu_seqlens, None, options, key_mask_option=False)


def kv_call(q, k, v, initial_state, output_final_state, cu_seqlens, key_mask, options, *,
            key_mask_option=True) -> Call:
    """Validates q, k, v, the cache, cu_seqlens and the key mask of an op on a KV cache and hands them to its
    forms. With `cu_seqlens` there is neither an initial nor a final state (state.py)."""
    B, T, H, K, V = check_qkv(q, k, v)
    num_states(B, T, cu_seqlens)  # validates cu_seqlens
    check_kv_state(initial_state, B, H, K, V, q)
    if cu_seqlens is not None and (initial_state is not None or output_final_state):
        raise ValueError("cu_seqlens packs whole sequences: it takes no initial_state and returns no final state")
    if key_mask is not None:
        if cu_seqlens is not None:
            raise ValueError("key_mask and cu_seqlens are exclusive: a packed batch has no padding to mask")
        check_key_mask(key_mask, B, (initial_state.k.shape[1] if initial_state is not None else 0) + T)
        check_same_device(q=q, key_mask=key_mask)
    if key_mask_option:
        options = {**options, "key_mask": key_mask}
    return Call({"q": q, "k": k, "v": v}, q.dtype, initial_state, options=options, cu_seqlens=cu_seqlens)


def attention_weights(q, k, *, scale=None, bandwidth=None, qk_norm=False) -> torch.Tensor:
    """The regression weights w_ti = s(k_i, q_t) / sum_{j <= t} s(k_j, q_t) of eq. (50), causal (w_ti = 0 for i > t).

    q, k: [B, T, H, K] (one floating dtype) -> [B, H, T, T], rows summing to one, in the input dtype
    (computed in float64 for float64 input, else float32). Kernel arguments as `softmax_attn`."""
    check_similarity(scale, bandwidth, qk_norm)
    check_tensor("q", q, 4, "[B, T, H, K]")
    check_tensor("k", k, 4, "[B, T, H, K]")
    check_shape("k", k, q.shape, "[B, T, H, K]")
    if k.dtype != q.dtype:
        raise ValueError(f"k must have the dtype of q ({q.dtype}), got {k.dtype}")
    dtype = compute_dtype(q)
    qf, kf, scale = similarity_features(q.to(dtype), k.to(dtype), scale=scale, bandwidth=bandwidth, qk_norm=qk_norm)
    qf = rearrange(qf, "b t h d -> b h t d")  # [B, H, T, K']
    kf = rearrange(kf, "b t h d -> b h t d")  # [B, H, T, K']
    return causal_logits(qf, kf, scale).softmax(dim=-1).to(q.dtype)  # [B, H, T, T]


def check_similarity(scale, bandwidth, qk_norm) -> None:
    """`scale` and `bandwidth` are exclusive; a bandwidth is a positive number."""
    check_scale(scale)
    if bandwidth is not None:
        if scale is not None:
            raise ValueError("pass scale (exponential kernel) or bandwidth (Gaussian kernel), not both")
        if not isinstance(bandwidth, int | float) or not bandwidth > 0:
            raise ValueError(f"bandwidth must be a positive float, got {bandwidth!r}")
    if not isinstance(qk_norm, bool):
        raise ValueError(f"qk_norm must be a bool, got {qk_norm!r}")


def check_ridge(ridge) -> None:
    """The ridge on the slope block must be a positive float: at 0 the fit is singular while t <= K."""
    if isinstance(ridge, bool) or not isinstance(ridge, int | float) or not math.isfinite(ridge) or ridge <= 0:
        raise ValueError(f"ridge must be a positive finite float, got {ridge!r}")


def check_kernel(kernel, scale, bandwidth, ridge) -> None:
    """`scale` belongs to "exp" and `bandwidth` (required) to "gaussian"; `ridge` is a positive float."""
    if not callable(kernel) and kernel not in REGRESSION_KERNELS:
        raise ValueError(f"kernel must be one of {REGRESSION_KERNELS} or a callable (a, b) -> Gram, got {kernel!r}")
    check_scale(scale)
    if scale is not None and kernel != "exp":
        raise ValueError(f"scale applies to kernel='exp' only, got scale={scale!r} with kernel={kernel!r}")
    if kernel == "gaussian":
        if not isinstance(bandwidth, int | float) or not bandwidth > 0:
            raise ValueError(f"bandwidth must be a positive float for kernel='gaussian', got {bandwidth!r}")
    elif bandwidth is not None:
        raise ValueError(f"bandwidth applies to kernel='gaussian' only, got bandwidth={bandwidth!r}")
    if not isinstance(ridge, int | float) or not ridge > 0:
        raise ValueError(f"ridge must be a positive float, got {ridge!r}")


def check_kv_state(initial_state, B: int, H: int, K: int, V: int, q: torch.Tensor) -> None:
    if initial_state is None:
        return
    if not isinstance(initial_state, KVState):
        raise ValueError(f"initial_state must be a KVState(k [N, S, H, K], v [N, S, H, V]), got "
                         f"{type(initial_state).__name__}")
    S = initial_state.k.shape[1] if initial_state.k.ndim == 4 else -1
    check_state("initial_state.k", initial_state.k, (B, S, H, K), "[N, S, H, K]")
    check_state("initial_state.v", initial_state.v, (B, S, H, V), "[N, S, H, V]")
    check_same_device(q=q, k=initial_state.k, v=initial_state.v)
