"""Third-order higher-order linear attention (hla3): reference, recurrent and (causal) chunk forms, one module.

Implements sec. 7 of *Higher-order Linear Attention* (Zhang, Qin, Wang, Gu; arXiv:2510.27258; spec hla.md §4 and
erratum 5 of §6), unnormalised, per head, without decay. With A = Q K^T (q scaled) and W = L ⊙ A:

variant="causal" (the default, the natural causal third order):
    o_t = sum_{u<=t} sum_{i<=u} sum_{j<=u} (q_t.k_i)(q_u.k_i)(q_u.k_j) v_j^T,  i.e.  O = ((W W^T) ⊙ L) W V,
streamed by (state `HLA3State(S, P, F)`, all prefixes INCLUSIVE)
    S_t = S_{t-1} + k_t k_t^T      P_t = P_{t-1} + k_t v_t^T      F_t = F_{t-1} + (S_t q_t)(q_t^T P_t)
    o_t = q_t^T F_t                                        (O(K^2 + K V) per token).

variant="paper" (the paper's printed "masked" streaming kernel, Alg. 3 with gamma = 1, kept for reproduction):
    o_t = q_t^T (S^K_t S^Q_t P_t - G_t),  G = G1 + G2 + G3 of the paper (state `HLA3PaperState(SK, SQ, P, G)`).
It does NOT compute ((W W^T W) ⊙ L) V nor the causal operator above (spec erratum 5): inclusion-exclusion removes
only the triples whose maximum index is unique, so it computes
    o_t = sum over (i, u, j) in {1..t}^3 whose maximum index is attained at least twice of
          (q_t.k_i)(q_u.k_i)(q_u.k_j) v_j^T.
With an initial state the state enters as a pseudo-token 0 before all others (S^K_0, S^Q_0, P_0 in place of
k k^T, q q^T, k v^T) and o_t = q_t^T (sum over triples in {0..t}^3 of that rule - G_0).

Chunk form (variant="causal" only): the reference's masked matrix form applied per chunk of C tokens. For a chunk
entering with (S_0, P_0, F_0), Q, K, V of the chunk, L the inclusive lower-triangular [C, C] mask and W = L ⊙ Q K^T,
    R = Q P_0 + W V          (row u = q_u^T P_u,     P_u = P_0 + sum_{i<=u in chunk} k_i v_i^T)
    Y = Q S_0^T + W K        (row u = (S_u q_u)^T,   S_u = S_0 + sum_{i<=u in chunk} k_i k_i^T)
    M = (Q Y^T) ⊙ L          (M_tu = q_t^T S_u q_u for u <= t)
    O = Q F_0 + M R          (o_t = q_t^T F_0 + sum_{u<=t in chunk} (q_t^T S_u q_u)(q_u^T P_u) = q_t^T F_t)
and the carry S += K^T K, P += K^T V, F += Y^T R (F_C = F_0 + sum_u (S_u q_u)(q_u^T P_u)). Without decay every
carry is a plain sum, so the states entering all chunks are prefix sums over chunks and nothing runs serially. The
paper variant has no chunk form (mode="chunk" raises ValueError): its sec. 7.3 segment maps M^{KQP}[Z] are
O(K^3 V) per segment if dense.

Not implemented: decay (there is no decay argument; the paper does not work out third-order decay, spec §6 item 6)
and the normalised read-out (the m / h denominators are therefore not carried in the state).

Legend: B batch, T time, H heads, K key dim, V value dim, N states (B, or the number of sequences with
cu_seqlens); in the chunk form N chunks, C chunk size.
"""

from __future__ import annotations

from typing import NamedTuple

import torch
from einops import rearrange

from regmem.ops.common import (
    check_chunk_size,
    check_mode,
    check_qkv,
    check_scale,
    check_state_tuple,
    merge_chunks,
    num_states,
    run_core,
    scaled_queries,
    split_chunks,
)

VARIANTS = ("causal", "paper")


class HLA3State(NamedTuple):
    """State of the causal variant: S [N, H, K, K] = sum k k^T, P [N, H, K, V] = sum k v^T,
    F [N, H, K, V] = sum_u (S_u q_u)(q_u^T P_u) (spec hla.md §4)."""

    S: torch.Tensor
    P: torch.Tensor
    F: torch.Tensor


class HLA3PaperState(NamedTuple):
    """State of the paper variant: SK [N, H, K, K] = sum k k^T, SQ [N, H, K, K] = sum q q^T (q scaled),
    P [N, H, K, V] = sum k v^T, G [N, H, K, V] = G1 + G2 + G3 of the paper's Alg. 3 (spec hla.md §4)."""

    SK: torch.Tensor
    SQ: torch.Tensor
    P: torch.Tensor
    G: torch.Tensor


_STATE_TYPES = {"causal": HLA3State, "paper": HLA3PaperState}


def _zero_state(variant: str, k: torch.Tensor, V: int):
    B, _, H, K = k.shape
    kk, kv = k.new_zeros(B, H, K, K), k.new_zeros(B, H, K, V)
    if variant == "causal":
        return HLA3State(kk, kv, kv.clone())
    return HLA3PaperState(kk, kk.clone(), kv, kv.clone())


def _check_hla3_state(variant: str, initial_state, N: int, H: int, K: int, V: int, q: torch.Tensor) -> None:
    kk, kv = ((N, H, K, K), "[N, H, K, K]"), ((N, H, K, V), "[N, H, K, V]")
    shapes = {"S": kk, "P": kv, "F": kv} if variant == "causal" else {"SK": kk, "SQ": kk, "P": kv, "G": kv}
    check_state_tuple(initial_state, _STATE_TYPES[variant], shapes, q, context=f" for variant={variant!r}")


# ---------------------------------------------------------------------------------------------------------------
# Reference forms: masked matrix products / literal triple sums.
# ---------------------------------------------------------------------------------------------------------------


def hla3_causal_reference_core(q, k, v, *, initial_state):
    """q, k: [B, T, H, K] (q scaled); v: [B, T, H, V]. Masked matrix form, O(T^2): with W = L ⊙ Q K^T,
    Z = Q S_0^T + W K (row u = (S_u q_u)^T), Y = Q P_0 + W V (row u = q_u^T P_u),
    O = Q F_0 + ((Q Z^T) ⊙ L) Y   (= ((W W^T) ⊙ L) W V for a zero state);
    final S = S_0 + K^T K, P = P_0 + K^T V, F = F_0 + Z^T Y."""
    B, T, H, K = q.shape
    V = v.shape[-1]
    S0, P0, F0 = initial_state if initial_state is not None else _zero_state("causal", k, V)
    if T == 0:
        return v.new_zeros(B, 0, H, V), HLA3State(S0, P0, F0)
    q, k, v = (rearrange(x, "b t h d -> b h t d") for x in (q, k, v))
    L = torch.ones(T, T, dtype=torch.bool, device=q.device).tril()
    W = (q @ k.transpose(-1, -2)).masked_fill(~L, 0)  # [B, H, T, T]
    Z = q @ S0.transpose(-1, -2) + W @ k  # [B, H, T, K]
    Y = q @ P0 + W @ v  # [B, H, T, V]
    M = (q @ Z.transpose(-1, -2)).masked_fill(~L, 0)  # [B, H, T(t), T(u)], q_t^T S_u q_u for u <= t
    o = q @ F0 + M @ Y  # [B, H, T, V]
    state = HLA3State(S0 + k.transpose(-1, -2) @ k, P0 + k.transpose(-1, -2) @ v, F0 + Z.transpose(-1, -2) @ Y)
    return rearrange(o, "b h t v -> b t h v"), state


def _repeated_max_weights(T: int, t_index: torch.Tensor, dtype, device) -> torch.Tensor:
    """w[t, i, u, j] = 1 if i, u, j <= t and max(i, u, j) is attained at least twice, over indices 0..T."""
    idx = torch.arange(T + 1, device=device)
    i, u, j = idx[:, None, None], idx[None, :, None], idx[None, None, :]
    mx = torch.maximum(torch.maximum(i, u), j)
    repeated = ((i == mx).long() + (u == mx).long() + (j == mx).long()) >= 2  # [T+1, T+1, T+1]
    inside = mx[None] <= t_index[:, None, None, None]  # [T, T+1, T+1, T+1]
    return (repeated[None] & inside).to(dtype)


def hla3_paper_reference_core(q, k, v, *, initial_state):
    """Same contract as hla3_causal_reference_core. The literal triple sum the paper's recurrence computes,
    O(T^4) (a test oracle): with X^K_0 = SK_0, X^Q_0 = SQ_0, X^P_0 = P_0 and X^K_i = k_i k_i^T, X^Q_u = q_u q_u^T,
    X^P_j = k_j v_j^T for tokens 1..T,  F_t = sum_{i,u,j<=t, max attained >= 2} X^K_i X^Q_u X^P_j - G_0,
    o_t = q_t^T F_t; final G = G_0 + the same sum over the triples with a UNIQUE maximum."""
    B, T, H, K = q.shape
    V = v.shape[-1]
    SK0, SQ0, P0, G0 = initial_state if initial_state is not None else _zero_state("paper", k, V)
    if T == 0:
        return v.new_zeros(B, 0, H, V), HLA3PaperState(SK0, SQ0, P0, G0)
    XK = torch.cat([SK0.unsqueeze(2), torch.einsum("bthk,bthl->bhtkl", k, k)], dim=2)  # [B, H, T+1, K, K]
    XQ = torch.cat([SQ0.unsqueeze(2), torch.einsum("bthk,bthl->bhtkl", q, q)], dim=2)  # [B, H, T+1, K, K]
    XP = torch.cat([P0.unsqueeze(2), torch.einsum("bthk,bthv->bhtkv", k, v)], dim=2)  # [B, H, T+1, K, V]
    w = _repeated_max_weights(T, torch.arange(1, T + 1, device=q.device), q.dtype, q.device)  # [T, T+1, T+1, T+1]
    QP = torch.einsum("bhuxy,bhjyv->bhujxv", XQ, XP)  # [B, H, T+1, T+1, K, V], X^Q_u X^P_j
    wK = torch.einsum("tiuj,bhixy->bhtujxy", w, XK)  # [B, H, T, T+1, T+1, K, K]
    F = torch.einsum("bhtujxy,bhujyv->bhtxv", wK, QP) - G0.unsqueeze(2)  # [B, H, T, K, V]
    o = torch.einsum("bthk,bhtkv->bthv", q, F)
    unique = 1 - _repeated_max_weights(T, torch.tensor([T], device=q.device), q.dtype, q.device)[0]  # strict max
    G = G0 + torch.einsum("iuj,bhixy,bhujyv->bhxv", unique, XK, QP)  # [B, H, K, V], G0 + G1 + G2 + G3 at t = T
    return o, HLA3PaperState(XK.sum(2), XQ.sum(2), XP.sum(2), G)


# ---------------------------------------------------------------------------------------------------------------
# Recurrent forms: streaming prefix summaries, one token at a time (the decoding form).
# ---------------------------------------------------------------------------------------------------------------


def hla3_causal_recurrent_core(q, k, v, *, initial_state):
    """Same contract as hla3_causal_reference_core; constant memory in T."""
    B, T, H, K = q.shape
    V = v.shape[-1]
    S, P, F = initial_state if initial_state is not None else _zero_state("causal", k, V)
    outputs = []
    # unbind, not q[:, t]: the backward of indexing would zero-fill all of q once per token (O(T^2)).
    for q_t, k_t, v_t in zip(q.unbind(1), k.unbind(1), v.unbind(1), strict=True):
        S = S + k_t.unsqueeze(-1) * k_t.unsqueeze(-2)  # [B, H, K, K]
        P = P + k_t.unsqueeze(-1) * v_t.unsqueeze(-2)  # [B, H, K, V]
        y = torch.einsum("bhxy,bhy->bhx", S, q_t)  # [B, H, K], S_t q_t
        r = torch.einsum("bhk,bhkv->bhv", q_t, P)  # [B, H, V], q_t^T P_t
        F = F + y.unsqueeze(-1) * r.unsqueeze(-2)  # [B, H, K, V]
        outputs.append(torch.einsum("bhk,bhkv->bhv", q_t, F))
    o = torch.stack(outputs, dim=1) if outputs else v.new_zeros(B, 0, H, V)  # [B, T, H, V]
    return o, HLA3State(S, P, F)


def hla3_paper_recurrent_core(q, k, v, *, initial_state):
    """Same contract as hla3_paper_reference_core: the paper's Alg. 3 (gamma = 1), G = G1 + G2 + G3."""
    B, T, H, K = q.shape
    V = v.shape[-1]
    SK, SQ, P, G = initial_state if initial_state is not None else _zero_state("paper", k, V)
    outputs = []
    for q_t, k_t, v_t in zip(q.unbind(1), k.unbind(1), v.unbind(1), strict=True):
        SK_p, SQ_p, P_p = SK, SQ, P  # previous (exclusive) summaries
        SK = SK + k_t.unsqueeze(-1) * k_t.unsqueeze(-2)
        SQ = SQ + q_t.unsqueeze(-1) * q_t.unsqueeze(-2)
        P = P + k_t.unsqueeze(-1) * v_t.unsqueeze(-2)
        u1 = torch.einsum("bhx,bhxy->bhy", k_t, SQ_p)  # k_t^T S^Q_prev (a row: S^Q may be non-symmetric)
        G1 = k_t.unsqueeze(-1) * torch.einsum("bhk,bhkv->bhv", u1, P_p).unsqueeze(-2)  # k_t (k_t^T S^Q_prev P_prev)
        a2 = torch.einsum("bhxy,bhy->bhx", SK_p, q_t)  # S^K_prev q_t
        G2 = a2.unsqueeze(-1) * torch.einsum("bhk,bhkv->bhv", q_t, P_p).unsqueeze(-2)  # a2 (q_t^T P_prev)
        a3 = torch.einsum("bhxy,bhy->bhx", SK_p, torch.einsum("bhxy,bhy->bhx", SQ_p, k_t))  # S^K_p S^Q_p k_t
        G3 = a3.unsqueeze(-1) * v_t.unsqueeze(-2)  # a3 v_t^T
        G = G + G1 + G2 + G3
        z = torch.einsum("bhx,bhxy->bhy", torch.einsum("bhx,bhxy->bhy", q_t, SK), SQ)  # q_t^T S^K S^Q
        outputs.append(torch.einsum("bhk,bhkv->bhv", z, P) - torch.einsum("bhk,bhkv->bhv", q_t, G))
    o = torch.stack(outputs, dim=1) if outputs else v.new_zeros(B, 0, H, V)  # [B, T, H, V]
    return o, HLA3PaperState(SK, SQ, P, G)


# ---------------------------------------------------------------------------------------------------------------
# Chunk form (causal variant): every chunk's pieces batched; the carry is a prefix sum over chunks.
# ---------------------------------------------------------------------------------------------------------------


def _entering(x0: torch.Tensor, per_chunk: torch.Tensor) -> torch.Tensor:
    """x0: [B, H, ...] the state before chunk 1; per_chunk: [B, H, N, ...] each chunk's increment -> the state
    entering every chunk, x0 + the exclusive prefix sum over chunks: [B, H, N, ...]."""
    shifted = torch.cat([torch.zeros_like(per_chunk[:, :, :1]), per_chunk[:, :, :-1]], dim=2)  # chunk n-1 at n
    return x0.unsqueeze(2) + shifted.cumsum(2)


def hla3_causal_chunk_core(q, k, v, *, initial_state, chunk_size):
    """Same contract as hla3_causal_reference_core; chunk-parallel (the training form). The reference's masked
    matrix form per chunk: for a chunk entering with (S_0, P_0, F_0) and W = L ⊙ Q K^T of the chunk,
        Y = Q S_0^T + W K   (row u = (S_u q_u)^T),      R = Q P_0 + W V   (row u = q_u^T P_u),
        M = (Q Y^T) ⊙ L     (M_tu = q_t^T S_u q_u),     O = Q F_0 + M R,
    carry S += K^T K, P += K^T V, F += Y^T R. Without decay the carries are plain sums, so S_0, P_0 entering
    every chunk are prefix sums of the chunks' K^T K, K^T V; then Y, R of every chunk, then F_0 entering every
    chunk is the prefix sum of their Y^T R: no serial pass over chunks."""
    B, T, H, K = q.shape
    V = v.shape[-1]
    S0, P0, F0 = initial_state if initial_state is not None else _zero_state("causal", k, V)
    if T == 0:
        return v.new_zeros(B, 0, H, V), HLA3State(S0, P0, F0)
    # Step 0: pad T to N * C with zero tokens (they add nothing to S, P, F; their outputs are dropped), split.
    q, k, v = (split_chunks(x, chunk_size) for x in (q, k, v))  # [B, H, N, C, K|V]
    # Step 1: each chunk's increments of S and P, and the S, P entering every chunk.
    dS, dP = k.transpose(-1, -2) @ k, k.transpose(-1, -2) @ v  # [B, H, N, K, K], [B, H, N, K, V]
    S, P = _entering(S0, dS), _entering(P0, dP)  # [B, H, N, K, K], [B, H, N, K, V]
    # Step 2: intra-chunk scores and the rows (S_u q_u)^T, q_u^T P_u of every token.
    L = torch.ones(chunk_size, chunk_size, dtype=torch.bool, device=q.device).tril()
    W = (q @ k.transpose(-1, -2)).masked_fill(~L, 0)  # [B, H, N, C, C]
    Y = q @ S.transpose(-1, -2) + W @ k  # [B, H, N, C, K]
    R = q @ P + W @ v  # [B, H, N, C, V]
    # Step 3: each chunk's increment of F and the F entering every chunk.
    dF = Y.transpose(-1, -2) @ R  # [B, H, N, K, V]
    F = _entering(F0, dF)  # [B, H, N, K, V]
    # Step 4: outputs, o_t = q_t^T F_0 + sum_{u<=t in chunk} (q_t^T S_u q_u)(q_u^T P_u).
    M = (q @ Y.transpose(-1, -2)).masked_fill(~L, 0)  # [B, H, N, C(t), C(u)]
    o = q @ F + M @ R  # [B, H, N, C, V]
    final = HLA3State(S0 + dS.sum(2), P0 + dP.sum(2), F0 + dF.sum(2))
    return merge_chunks(o, T), final


# ---------------------------------------------------------------------------------------------------------------
# Public op.
# ---------------------------------------------------------------------------------------------------------------

_CORES = {
    ("causal", "reference"): hla3_causal_reference_core,
    ("causal", "recurrent"): hla3_causal_recurrent_core,
    ("causal", "chunk"): hla3_causal_chunk_core,
    ("paper", "reference"): hla3_paper_reference_core,
    ("paper", "recurrent"): hla3_paper_recurrent_core,
}


def hla3(q, k, v, *, variant="causal", scale=None, initial_state=None, output_final_state=False,
         mode="recurrent", chunk_size=64, cu_seqlens=None):
    """Third-order HLA, unnormalised, causal, no decay (spec hla.md §4; see the module docstring).

    Args:
        q, k: [B, T, H, K]; v: [B, T, H, V], one floating dtype (bf16/fp16 compute in float32).
        variant: "causal" (the natural causal third order, o = ((W W^T) ⊙ L) W V with W = L ⊙ Q K^T) or
            "paper" (the paper's printed Alg. 3: triples whose maximum index is attained at least twice).
        scale: multiplies q; None means K ** -0.5.
        initial_state: HLA3State(S [N, H, K, K], P [N, H, K, V], F [N, H, K, V]) for "causal",
            HLA3PaperState(SK [N, H, K, K], SQ [N, H, K, K], P [N, H, K, V], G [N, H, K, V]) for "paper",
            or None for zeros.
        output_final_state: return the state after the last token (float32, or float64 for float64 input).
        mode: "reference" | "recurrent" | "chunk". "chunk" (chunk-parallel, the training form) exists for
            variant="causal" only; with variant="paper" it raises ValueError. The default is "recurrent", the
            one fast form both variants have, so a default call never depends on the variant.
        chunk_size: chunk length of the chunk form (a power of two); validated and unused by the other forms.
        cu_seqlens: [N + 1] integer offsets of packed sequences (B = 1).

    Returns:
        o: [B, T, H, V] in the input dtype, and the final state or None.
    """
    if variant not in VARIANTS:
        raise ValueError(f"variant must be one of {VARIANTS}, got {variant!r}")
    check_mode(mode)
    if (variant, mode) == ("paper", "chunk"):
        raise ValueError("mode='chunk' with variant='paper': the chunk form of the paper's recurrence is not "
                         "implemented (its sec. 7.3 segment maps are O(K^3 V) per chunk); use mode='recurrent' "
                         "or mode='reference'")
    check_chunk_size(chunk_size)
    B, T, H, K, V = check_qkv(q, k, v)
    check_scale(scale)
    N = num_states(B, T, cu_seqlens)
    _check_hla3_state(variant, initial_state, N, H, K, V, q)
    q_scaled = scaled_queries(q, scale)  # [B, T, H, K]
    options = {"chunk_size": chunk_size} if mode == "chunk" else {}
    return run_core(_CORES[variant, mode], {"q": q_scaled, "k": k, "v": v}, initial_state,
                    output_final_state=output_final_state, cu_seqlens=cu_seqlens, out_dtype=q.dtype, **options)
