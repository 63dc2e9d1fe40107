"""The public op of DeltaFormer, `deltaformer`: softmax attention with the delta rule.

*Understanding Transformer from the Perspective of Associative Memory* (Zhong, Xu, Ao, Shi; arXiv:2505.19488),
Sec. 2.2 Vignette 2 and App. C-E. `deltaformer(..., mode=...)` validates its arguments here and runs one of the forms
of reference.py (eqs. 96-97, one triangular solve), recurrent.py (eqs. 41-42, token by token: the decode step) and
chunk.py (Listing 1, cleaned; the doubling inverse of eq. 100 as `solver="doubling"`). The state is `KUState(k, u)`,
the keys and their processed values (state.py). The math, the special cases and the paper's errata are in
DERIVATION.md beside this file.

Legend: B batch, T new tokens, S cached pairs, H key/value heads, Hq = H R query heads, G erase vectors per head,
K key dim, V value dim.
"""

from __future__ import annotations

import torch

from regmem.ops.common import (
    Call,
    check_key_mask,
    check_qkv,
    check_same_device,
    check_scale,
    check_score_kernel,
    check_shape,
    check_state_tuple,
    check_tensor,
    check_token_scalar,
    compute_dtype,
    op,
)
from regmem.ops.deltaformer.chunk import deltaformer_chunk_core
from regmem.ops.deltaformer.recurrent import deltaformer_recurrent_core
from regmem.ops.deltaformer.reference import deltaformer_reference_core
from regmem.ops.deltaformer.state import KUState
from regmem.ops.deltaformer.triton_backend import TRITON


@op(reference=deltaformer_reference_core, recurrent=deltaformer_recurrent_core, chunk=deltaformer_chunk_core,
    backends={"triton": TRITON})
def deltaformer(q, k, v, w=None, alpha=None, beta=None, *, erase_weights=None, erase_kernel="softmax",
                read_kernel="softmax", scale=None, decimals=0, initial_state=None, output_final_state=False,
                cu_seqlens=None, key_mask=None):
    """DeltaFormer, eqs. (41)-(42) of arXiv:2505.19488 (eqs. 94-95 with the default softmax kernels; eq. 111 with G
    erase vectors per head):

        u_t = alpha_t v_t - beta_t sum_{i < t} A[t, i] u_i,     A[t, i] = sum_j a_j kappa_1(scale w_t^j . k_i)
        o_t = sum_{i <= t} kappa_2(scale q_t . k_i) u_i

    A Transformer is beta = 0 (u = v); DeltaNet is kappa_1 = kappa_2 = "linear", w = k, alpha = beta (eq. 93).

    Args:
        q: [B, T, Hq, K], Hq a multiple of H (grouped-query reads: query head h reads key/value head h // (Hq / H)).
        k: [B, T, H, K]; v: [B, T, H, V]. One floating dtype for every tensor (bf16/fp16 compute in float32).
        w: the erase vectors, [B, T, H, K] (one per head, eq. 41) or [B, T, H, G, K] (G per head, eq. 111), or None
            for w = k (eq. 94).
        alpha: [B, T, H], the value gate alpha_t, or None for 1.
        beta: [B, T, H], the erase gate beta_t, or None for 1 (no range is imposed: the paper's gates are free).
        erase_weights: [H, G] tensor of the mixing weights a_j of eq. 111, or None for the mean (a_j = 1 / G).
        erase_kernel: kappa_1, one of "linear", "relu", "exp", "solu", "round", "softmax" (normalised over the pairs
            before t, Z^(1) of eq. 94; a row with none is zero, so u_1 = alpha_1 v_1).
        read_kernel: kappa_2, from the same list; "softmax" normalises over the pairs up to t (Z^(2), eq. 95).
        scale: multiplies every dot product; None means K ** -0.5 (Listing 1), 1.0 is Theorem 1's kernel.
        decimals: places kept by the "round" kernels (0 = integers, Theorem 1; 2 = Fig. 4); straight-through
            gradient.
        initial_state: KUState(k [N, S, H, K], u [N, S, H, V]), the cache, or None for an empty one.
        output_final_state: return KUState of the cache followed by the T new pairs (compute dtype).
        mode: "reference" | "recurrent" | "chunk".
        chunk_size: rows per block C of the chunk form (a power of two; T need not be a multiple).
        solver: chunk form only, "triangular" (forward substitution) or "doubling" (eq. 100).
        backend: "auto" (default: regmem's Triton kernels for the chunk form's erase pass when the tensors are on
            CUDA, triton is installed and erase_kernel is "softmax", else torch), "torch" (all forms, any device)
            or "triton" (the chunk form, softmax erase kernel; CUDA, or the CPU under TRITON_INTERPRET=1;
            triton_backend.py).
        cu_seqlens: [N + 1] integer offsets of packed sequences (B = 1); no initial or final state then.
        key_mask: [B, S + T] bool (True = the pair takes part) or None. A masked pair is erased against and read
            by no other token (a query always reads its own pair). Not with `cu_seqlens`.

    Returns:
        o: [B, T, Hq, V] in the input dtype, and the final KUState or None.

    """
    B, T, H, K, V, G, Hq = _check_inputs(q, k, v, w, alpha, beta)
    check_kernels(erase_kernel, read_kernel, decimals)
    check_scale(scale)
    dtype = compute_dtype(q)
    _check_cache(initial_state, B, H, K, V, q)
    if cu_seqlens is not None and (initial_state is not None or output_final_state):
        raise ValueError("cu_seqlens packs whole sequences: it takes no initial_state and returns no final state")
    if key_mask is not None:
        if cu_seqlens is not None:
            raise ValueError("key_mask and cu_seqlens are exclusive: a packed batch has no padding to mask")
        S = initial_state.k.shape[1] if initial_state is not None else 0
        check_key_mask(key_mask, B, S + T)
        check_same_device(q=q, key_mask=key_mask)
    if erase_weights is None:
        erase_weights = torch.full((H, G), 1.0 / G, dtype=dtype, device=q.device)
    else:
        check_tensor("erase_weights", erase_weights, 2, "[H, G]")
        check_shape("erase_weights", erase_weights, (H, G), "[H, G]")
        erase_weights = erase_weights.to(dtype)
    ones = q.new_ones(B, T, H)
    tokens = {"q": q, "k": k, "v": v, "w": (k.unsqueeze(3) if w is None else w if w.ndim == 5 else w.unsqueeze(3)),
              "alpha": ones if alpha is None else alpha, "beta": ones if beta is None else beta}
    options = {"erase_weights": erase_weights, "erase_kernel": erase_kernel, "read_kernel": read_kernel,
               "scale": K ** -0.5 if scale is None else float(scale), "decimals": decimals, "key_mask": key_mask}
    return Call(tokens, q.dtype, initial_state, options=options, cu_seqlens=cu_seqlens,
                torch_only=erase_kernel != "softmax")  # regmem's Triton kernels erase by softmax only


def check_kernels(erase_kernel: str, read_kernel: str, decimals: int) -> None:
    """The kernel options of `deltaformer` (also checked by the DeltaFormer layer at construction): both kernels
    from SCORE_KERNELS, `decimals` a non-negative int, and nonzero only when a kernel is "round", the one that
    reads it."""
    check_score_kernel("erase_kernel", erase_kernel, decimals)
    check_score_kernel("read_kernel", read_kernel, decimals)
    if decimals and "round" not in (erase_kernel, read_kernel):
        raise ValueError(f"decimals applies to a 'round' kernel, got decimals={decimals} with erase_kernel="
                         f"{erase_kernel!r}, read_kernel={read_kernel!r}")


def _check_inputs(q, k, v, w, alpha, beta):
    """Shapes and dtypes of the per-token inputs; returns (B, T, H, K, V, G, Hq)."""
    check_tensor("q", q, 4, "[B, T, Hq, K]")
    B, T, Hq, K = q.shape
    check_tensor("k", k, 4, "[B, T, H, K]")
    H = k.shape[2]
    check_shape("k", k, (B, T, H, K), "[B, T, H, K]")
    if H == 0 or Hq % H:
        raise ValueError(f"q's heads Hq must be a multiple of k's heads H, got Hq = {Hq} and H = {H}")
    check_qkv(k, k, v)
    V = v.shape[-1]
    G = 1
    if w is not None:
        check_tensor("w", w, w.ndim if isinstance(w, torch.Tensor) and w.ndim in (4, 5) else 4,
                     "[B, T, H, K] or [B, T, H, G, K]")
        G = w.shape[3] if w.ndim == 5 else 1
        check_shape("w", w, (B, T, H, G, K) if w.ndim == 5 else (B, T, H, K), "[B, T, H, K] or [B, T, H, G, K]")
    for name, gate in (("alpha", alpha), ("beta", beta)):
        if gate is not None:
            check_token_scalar(name, gate, B, T, H)
    for name, x in (("k", k), ("v", v), ("w", w), ("alpha", alpha), ("beta", beta)):
        if x is not None and x.dtype != q.dtype:
            raise ValueError(f"{name} must have the dtype of q ({q.dtype}), got {x.dtype}")
    check_same_device(q=q, k=k, v=v, w=w, alpha=alpha, beta=beta)
    return B, T, H, K, V, G, Hq


def _check_cache(initial_state, B: int, H: int, K: int, V: int, q: torch.Tensor) -> None:
    S = initial_state.k.shape[1] if isinstance(initial_state, KUState) and initial_state.k.ndim == 4 else -1
    shapes = {"k": ((B, S, H, K), "[N, S, H, K]"), "u": ((B, S, H, V), "[N, S, H, V]")}
    check_state_tuple(initial_state, KUState, shapes, q)
