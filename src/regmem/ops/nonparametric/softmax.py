"""Softmax attention as a regression memory: the local-constant (Nadaraya-Watson) regressor of *Test-time
regression* (Wang, Shi, Fox; arXiv:2501.12352), Sec. 4 Vignette 4, eqs. (48)-(51) (ttr.md §2.2 L19-L21).

Every query q_t solves its own weighted regression over the pairs seen so far (eq. 48 with p = 0):
    m_{0,t}(q_t) = argmin_{m in R^V} 1/2 sum_{i<=t} s(k_i, q_t) ||v_i - m||^2 = sum_{i<=t} s_i v_i / sum_{j<=t} s_j,
which is eq. (50). The weight is s(k, q) = exp(logit) (`similarity.py`):
  - exponential kernel exp(scale * k.q), `scale=None` means K ** -0.5: standard softmax attention;
  - Gaussian kernel exp(-||k - q||^2 / B) with `bandwidth=B`: a proper local regressor for keys of any norm;
  - `qk_norm=True` L2-normalises q and k first; with unit-norm keys the exponential kernel of temperature tau is
    the Gaussian kernel with B = 2 tau (eq. 51: QK-norm softmax attention is a local constant regressor).

Forms (one signature; `softmax_attn(..., mode=...)` dispatches):
  - reference: the materialised causal weight matrix, softmax, times V (the definition);
  - recurrent: token by token, each query against the cache so far (what decoding does);
  - chunk: torch's `scaled_dot_product_attention` on the transformed q', k' (flash / memory-efficient kernels,
    which run an online softmax over key blocks internally), with q', k', v zero-padded to one head dim
    max(K', V) because the fused kernels need equal head dims. SDPA picks its own blocking, so `chunk_size` is
    unused; it is accepted for the uniform op signature.

State: `KVState(k [N, S, H, K], v [N, S, H, V])`, the cache; the final state is the cache plus the new pairs.

Padding: `key_mask` [B, S + T] (bool, True = the pair takes part) removes pairs from every query's regression,
except that a query always sees its own pair, so no row is empty (a padded query attends to itself, as in
`SoftmaxAttention`); the outputs of the other queries equal a call on the sequence without those pairs.

Legend: B batch, T new tokens, S cached tokens, H heads, K key dim (K' = K, or K + 1 for a Gaussian kernel),
V value dim, N sequences.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from einops import rearrange

from regmem.ops.common import check_chunk_size, check_shape, check_tensor, compute_dtype, dispatch
from regmem.ops.nonparametric.frame import run_nonparametric
from regmem.ops.nonparametric.similarity import allowed_pairs, causal_logits, check_similarity, similarity_features


def _features(q, k, v, *, scale, bandwidth, qk_norm):
    """q: [B, T, H, K], k: [B, S + T, H, K], v: [B, S + T, H, V] -> heads-first q', k', v and the logit scale."""
    q, k, scale = similarity_features(q, k, scale=scale, bandwidth=bandwidth, qk_norm=qk_norm)
    q = rearrange(q, "b t h d -> b h t d")  # [B, H, T, K']
    k = rearrange(k, "b s h d -> b h s d")  # [B, H, S + T, K']
    v = rearrange(v, "b s h d -> b h s d")  # [B, H, S + T, V]
    return q, k, v, scale


def softmax_reference_core(q, k, v, *, offset, scale, bandwidth, qk_norm, key_mask):
    """Eq. (50) literally: weights w_ti = s(k_i, q_t) / sum_{j <= offset + t} s(k_j, q_t), then o_t = sum_i w_ti v_i.

    q: [B, T, H, K]; k: [B, S + T, H, K]; v: [B, S + T, H, V]; offset = S; key_mask: [B, S + T] bool or None.
    Returns o: [B, T, H, V]."""
    q, k, v, scale = _features(q, k, v, scale=scale, bandwidth=bandwidth, qk_norm=qk_norm)
    weights = causal_logits(q, k, scale, offset, key_mask).softmax(dim=-1)  # [B, H, T, S + T]
    o = weights @ v  # [B, H, T, V]
    return rearrange(o, "b h t v -> b t h v")


def softmax_recurrent_core(q, k, v, *, offset, scale, bandwidth, qk_norm, key_mask):
    """Token by token: query t attends to the cache of offset + t + 1 pairs it sees (the decode step).

    Shapes as `softmax_reference_core`."""
    q, k, v, scale = _features(q, k, v, scale=scale, bandwidth=bandwidth, qk_norm=qk_norm)
    outputs = []
    for t in range(q.shape[2]):
        seen = offset + t + 1
        logits = causal_logits(q[:, :, t:t + 1], k[:, :, :seen], scale, offset + t, key_mask)  # [B, H, 1, seen]
        outputs.append(logits.softmax(dim=-1) @ v[:, :, :seen])  # [B, H, 1, V]
    o = torch.cat(outputs, dim=2) if outputs else v.new_zeros(*v.shape[:2], 0, v.shape[-1])  # [B, H, T, V]
    return rearrange(o, "b h t v -> b t h v")


def softmax_chunk_core(q, k, v, *, offset, scale, bandwidth, qk_norm, key_mask):
    """Fused SDPA on q', k' (flash / memory-efficient; online softmax over key blocks inside the kernel).

    Shapes as `softmax_reference_core`. Without a cache or key mask the mask is SDPA's own causal one; otherwise
    an explicit boolean mask (True = attend, `allowed_pairs`): [T, S + T], or [B, 1, T, S + T] with `key_mask`."""
    T = q.shape[1]
    q, k, v, scale = _features(q, k, v, scale=scale, bandwidth=bandwidth, qk_norm=qk_norm)
    if T == 0:
        return v.new_zeros(v.shape[0], 0, v.shape[1], v.shape[-1])
    # the fused kernels need one head dim for q, k and v (else SDPA falls back to its slow math path):
    # zero columns change no logit and add output columns that are dropped
    V, D = v.shape[-1], max(q.shape[-1], v.shape[-1])
    q = F.pad(q, (0, D - q.shape[-1]))  # [B, H, T, D]
    k = F.pad(k, (0, D - k.shape[-1]))  # [B, H, S + T, D]
    v = F.pad(v, (0, D - V))  # [B, H, S + T, D]
    if offset == 0 and key_mask is None:
        o = F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=scale)  # [B, H, T, D]
    else:
        allowed = allowed_pairs(T, offset + T, offset, key_mask, device=q.device)  # [B, 1, T, S + T] or [T, S + T]
        o = F.scaled_dot_product_attention(q, k, v, attn_mask=allowed, scale=scale)  # [B, H, T, D]
    return rearrange(o[..., :V], "b h t v -> b t h v")


def softmax_attn(
    q, k, v, *, scale=None, bandwidth=None, qk_norm=False, initial_state=None, output_final_state=False,
    mode="chunk", chunk_size=64, cu_seqlens=None, key_mask=None,
):
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
        chunk_size: a power of two; unused, since SDPA chooses its own key blocks (uniform op signature).
        cu_seqlens: [N + 1] integer offsets of packed sequences (B = 1); no initial or final state then.
        key_mask: [B, S + T] bool (S cached, T new pairs; True = the pair takes part) or None for all pairs.
            A masked pair is used by no query but its own, so no row is empty (a padded query attends to
            itself). Not with `cu_seqlens`.

    Returns:
        o: [B, T, H, V] in the input dtype, and the final `KVState` or None.
    """
    check_chunk_size(chunk_size)
    forms = {"reference": softmax_attn_reference, "recurrent": softmax_attn_recurrent, "chunk": softmax_attn_chunk}
    return dispatch(
        mode, forms, chunk_size, q=q, k=k, v=v, scale=scale, bandwidth=bandwidth, qk_norm=qk_norm,
        initial_state=initial_state, output_final_state=output_final_state, cu_seqlens=cu_seqlens, key_mask=key_mask,
    )


def softmax_attn_reference(
    q, k, v, *, scale=None, bandwidth=None, qk_norm=False, initial_state=None, output_final_state=False,
    cu_seqlens=None, key_mask=None,
):
    """`softmax_attn` by its definition: the causal weight matrix materialised (O(T (S + T)) memory)."""
    check_similarity(scale, bandwidth, qk_norm)
    return run_nonparametric(
        softmax_reference_core, q, k, v, initial_state=initial_state, output_final_state=output_final_state,
        cu_seqlens=cu_seqlens, scale=scale, bandwidth=bandwidth, qk_norm=qk_norm, key_mask=key_mask,
    )


def softmax_attn_recurrent(
    q, k, v, *, scale=None, bandwidth=None, qk_norm=False, initial_state=None, output_final_state=False,
    cu_seqlens=None, key_mask=None,
):
    """`softmax_attn` token by token against the growing cache (the decoding form)."""
    check_similarity(scale, bandwidth, qk_norm)
    return run_nonparametric(
        softmax_recurrent_core, q, k, v, initial_state=initial_state, output_final_state=output_final_state,
        cu_seqlens=cu_seqlens, scale=scale, bandwidth=bandwidth, qk_norm=qk_norm, key_mask=key_mask,
    )


def softmax_attn_chunk(
    q, k, v, *, scale=None, bandwidth=None, qk_norm=False, initial_state=None, output_final_state=False,
    chunk_size=64, cu_seqlens=None, key_mask=None,
):
    """`softmax_attn` by torch SDPA on the kernel features; `chunk_size` is unused (see the module docstring)."""
    check_chunk_size(chunk_size)
    check_similarity(scale, bandwidth, qk_norm)
    return run_nonparametric(
        softmax_chunk_core, q, k, v, initial_state=initial_state, output_final_state=output_final_state,
        cu_seqlens=cu_seqlens, scale=scale, bandwidth=bandwidth, qk_norm=qk_norm, key_mask=key_mask,
    )


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
