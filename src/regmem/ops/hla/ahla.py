"""Asymmetric higher-order linear attention (AHLA, "A A V"): reference, recurrent and chunk forms, one module.

Implements sec. 6 of *Higher-order Linear Attention* (Zhang, Qin, Wang, Gu; arXiv:2510.27258; spec hla.md §3),
strictly causal, unnormalised or normalised. Without decay, with A = L ⊙ Q K^T,
    O = ((A A) ⊙ L) V,   o_t = sum_{j<=t} sum_{i=j}^{t} (q_t.k_i)(q_i.k_j) v_j^T            (eq 6.1)
and Theorem 6.1 reads it out of the prefix summaries (state `AHLAState(P, m, E, n)`, per head):
    P_t = g P_{t-1} + k_t v_t^T            m_t = g m_{t-1} + k_t
    E_t = g E_{t-1} + k_t (q_t^T P_t)      n_t = g n_{t-1} + k_t (q_t^T m_t)       (INCLUSIVE P_t, m_t)
    o_t = q_t^T E_t                                                                  (g = gamma_t, 1 without decay)
With decay the op is *defined* by this recurrence. m and n only enter the normalised read-out (`normalize=True`,
Theorem 6.1)
    o_t = q_t^T E_t / (q_t^T n_t + eps * sign(q_t^T n_t)),  sign(0) := +1,
sign-safe as in hla2 (a negative denominator moves away from zero, never through it). The denominator is the
numerator with v replaced by a ones column: m_t, n_t are exactly P_t, E_t of that column (m_t = sum k_i * 1,
n_t = sum k_i (q_i^T m_i), same weights in every form). So `_normalized_core` runs the unchanged core on
v' = [v, 1] with the state ([P, m], m, [E, n], n), splits the last column off as den (and off the final P', E' as
m, n), and divides in the compute dtype.

Chunk form (Fig. 2C, corrected as in spec §3): for a chunk entering with (P_0, E_0), a_t = sum_{s<=t in chunk}
log gamma_s, D_ti = e^{a_t - a_i} (i <= t) and A = (Q K^T) ⊙ D (inclusive diagonal),
    r_t = q_t^T P_t = e^{a_t} q_t^T P_0 + (A V)_t,        o_t = q_t^T E_t = e^{a_t} q_t^T E_0 + (A r)_t,
i.e. for gamma = 1: o = Q E_0 + ((Q K^T) ⊙ L)(Q P_0) + (A A) V, the paper's q_t^T R_{<=t} P_0 cross term with the
INCLUSIVE prefix R_{<=t} = sum_{i<=t in chunk} k_i q_i^T (the printed R_{<t} is wrong). The carry is
    E_out = lam E_0 + lam (K^T Q) P_0 + sum_i e^{a_C - a_i} k_i (A V)_i,   lam = e^{a_C},
i.e. the scan merge of eq 6.2 with R kept UNDECAYED and P_0 scaled by the chunk's decay (spec §3 warning).

Per-head decay [H] (log gamma <= 0) is spread per token as a log gate [B, T, H], so zero-gate padding (varlen
packing, chunk padding) is neutral. Legend: B batch, T time, H heads, K key dim, V value dim, N states (B, or the
number of sequences with cu_seqlens); in the chunk form N chunks, C chunk size.
"""

from __future__ import annotations

from functools import partial
from typing import NamedTuple

import torch
from einops import rearrange

from regmem.ops.common import (
    check_chunk_size,
    check_state_tuple,
    dispatch,
    merge_chunks,
    segsum,
    split_chunks,
    suffix_exclusive,
)
from regmem.ops.hla.interface import check_real, run_decayed, sign_safe_divide


class AHLAState(NamedTuple):
    """State of AHLA: P [N, H, K, V], m [N, H, K], E [N, H, K, V], n [N, H, K] (spec hla.md §3)."""

    P: torch.Tensor
    m: torch.Tensor
    E: torch.Tensor
    n: torch.Tensor


def _zero_state(k: torch.Tensor, V: int) -> AHLAState:
    B, _, H, K = k.shape
    return AHLAState(k.new_zeros(B, H, K, V), k.new_zeros(B, H, K), k.new_zeros(B, H, K, V), k.new_zeros(B, H, K))


def _check_ahla_state(initial_state, N: int, H: int, K: int, V: int, q: torch.Tensor) -> None:
    kv, k = ((N, H, K, V), "[N, H, K, V]"), ((N, H, K), "[N, H, K]")
    check_state_tuple(initial_state, AHLAState, {"P": kv, "m": k, "E": kv, "n": k}, q)


# ---------------------------------------------------------------------------------------------------------------
# Reference: every prefix's summaries from their defining decayed sums, O(T^2).
# ---------------------------------------------------------------------------------------------------------------


def ahla_reference_core(q, k, v, log_gamma, *, initial_state):
    """q, k: [B, T, H, K] (q scaled); v: [B, T, H, V]; log_gamma: [B, T, H] or None. With b_t = sum_{s<=t} log g_s,
    P_t = e^{b_t} P_0 + sum_{i<=t} e^{b_t - b_i} k_i v_i^T (m alike), E_t = e^{b_t} E_0 + sum_{i<=t} e^{b_t - b_i}
    k_i (q_i^T P_i) (n alike with m_i); o_t = q_t^T E_t. Returns o: [B, T, H, V] and the AHLAState at t = T."""
    B, T, H, K = q.shape
    V = v.shape[-1]
    state = initial_state if initial_state is not None else _zero_state(k, V)
    if T == 0:
        return v.new_zeros(B, 0, H, V), state
    g = q.new_zeros(B, H, T) if log_gamma is None else rearrange(log_gamma, "b t h -> b h t")  # [B, H, T]
    D = torch.exp(segsum(g))  # [B, H, T(t), T(i)], e^{b_t - b_i} for i <= t, 0 above the diagonal
    start = rearrange(torch.exp(g.cumsum(-1)), "b h t -> b t h")  # [B, T, H], e^{b_t}
    P = torch.einsum("bth,bhkv->bthkv", start, state.P) + torch.einsum("bhti,bihk,bihv->bthkv", D, k, v)
    m = torch.einsum("bth,bhk->bthk", start, state.m) + torch.einsum("bhti,bihk->bthk", D, k)
    r = torch.einsum("bthk,bthkv->bthv", q, P)  # [B, T, H, V], q_i^T P_i (inclusive)
    s = torch.einsum("bthk,bthk->bth", q, m)  # [B, T, H], q_i^T m_i
    E = torch.einsum("bth,bhkv->bthkv", start, state.E) + torch.einsum("bhti,bihk,bihv->bthkv", D, k, r)
    n = torch.einsum("bth,bhk->bthk", start, state.n) + torch.einsum("bhti,bihk,bih->bthk", D, k, s)
    o = torch.einsum("bthk,bthkv->bthv", q, E)  # [B, T, H, V], Theorem 6.1
    return o, AHLAState(P[:, -1], m[:, -1], E[:, -1], n[:, -1])


# ---------------------------------------------------------------------------------------------------------------
# Recurrent: Theorem 6.1's online updates, one token at a time (the decoding form).
# ---------------------------------------------------------------------------------------------------------------


def ahla_recurrent_core(q, k, v, log_gamma, *, initial_state):
    """Same contract as ahla_reference_core; constant memory in T."""
    B, T, H, K = q.shape
    V = v.shape[-1]
    P, m, E, n = initial_state if initial_state is not None else _zero_state(k, V)
    gates = log_gamma.unbind(1) if log_gamma is not None else [None] * T
    outputs = []
    # unbind, not q[:, t]: the backward of indexing would zero-fill all of q once per token (O(T^2)).
    for q_t, k_t, v_t, g_t in zip(q.unbind(1), k.unbind(1), v.unbind(1), gates, strict=True):
        if g_t is not None:
            gamma = g_t.exp()  # [B, H]
            P, E = gamma[..., None, None] * P, gamma[..., None, None] * E
            m, n = gamma[..., None] * m, gamma[..., None] * n
        P = P + k_t.unsqueeze(-1) * v_t.unsqueeze(-2)  # [B, H, K, V]
        m = m + k_t  # [B, H, K]
        r = torch.einsum("bhk,bhkv->bhv", q_t, P)  # [B, H, V], q_t^T P_t (current P)
        s = (q_t * m).sum(-1, keepdim=True)  # [B, H, 1], q_t^T m_t
        E = E + k_t.unsqueeze(-1) * r.unsqueeze(-2)  # [B, H, K, V]
        n = n + k_t * s  # [B, H, K]
        outputs.append(torch.einsum("bhk,bhkv->bhv", q_t, E))  # [B, H, V]
    o = torch.stack(outputs, dim=1) if outputs else v.new_zeros(B, 0, H, V)  # [B, T, H, V]
    return o, AHLAState(P, m, E, n)


# ---------------------------------------------------------------------------------------------------------------
# Chunk: intra-chunk matmuls for all chunks, a short pass over chunk summaries, outputs for all chunks.
# ---------------------------------------------------------------------------------------------------------------


def _chunk_pass(local, Rk, total, state: AHLAState):
    """The state entering every chunk (fields [B, H, N, ...]) and the final state. local: per-chunk (P, m, E, n)
    weighted to the chunk end; Rk: [B, H, N, K, K] undecayed sum_i k_i q_i^T; total: [B, H, N] = e^{a_C}."""
    P, m, E, n = state
    entering = []
    for (P_l, m_l, E_l, n_l), R, lam in zip(zip(*(x.unbind(2) for x in local), strict=True), Rk.unbind(2),
                                             total.unbind(2), strict=True):
        entering.append((P, m, E, n))
        lam2, lam1 = lam[..., None, None], lam[..., None]  # [B, H, 1, 1], [B, H, 1]
        E = lam2 * (E + R @ P) + E_l  # eq 6.2 merge, uses P entering the chunk
        n = lam1 * (n + (R @ m.unsqueeze(-1)).squeeze(-1)) + n_l
        P, m = lam2 * P + P_l, lam1 * m + m_l
    stacked = AHLAState(*(torch.stack(f, dim=2) for f in zip(*entering, strict=True)))
    return stacked, AHLAState(P, m, E, n)


def ahla_chunk_core(q, k, v, log_gamma, *, initial_state, chunk_size):
    """Same contract as ahla_reference_core; chunk-parallel (the training form)."""
    B, T, H, K = q.shape
    V = v.shape[-1]
    state = initial_state if initial_state is not None else _zero_state(k, V)
    if T == 0:
        return v.new_zeros(B, 0, H, V), state
    g = log_gamma if log_gamma is not None else q.new_zeros(B, T, H)  # [B, T, H]
    # Pad T to N * C with zero tokens and zero gates (neutral), split into chunks.
    q, k, v = (split_chunks(x, chunk_size) for x in (q, k, v))  # [B, H, N, C, K|V]
    g = split_chunks(g, chunk_size)  # [B, H, N, C]
    D = torch.exp(segsum(g))  # [B, H, N, C(t), C(i)], e^{a_t - a_i} for i <= t
    e_a = g.cumsum(-1).exp()  # [B, H, N, C], e^{a_t}
    to_end = suffix_exclusive(g, dim=-1).exp().unsqueeze(-1)  # [B, H, N, C, 1], e^{a_C - a_i}

    A = (q @ k.transpose(-1, -2)) * D  # [B, H, N, C, C], D_ti (q_t.k_i), inclusive diagonal
    r_loc, s_loc = A @ v, A.sum(-1)  # [B, H, N, C, V], [B, H, N, C]: local q_t^T P_t, q_t^T m_t
    kw = k * to_end  # [B, H, N, C, K]
    local = (kw.transpose(-1, -2) @ v, kw.sum(-2), kw.transpose(-1, -2) @ r_loc, (kw * s_loc.unsqueeze(-1)).sum(-2))
    Rk = k.transpose(-1, -2) @ q  # [B, H, N, K, K], undecayed R^{KQ} of the chunk
    enter, final = _chunk_pass(local, Rk, e_a[..., -1], state)

    ea = e_a.unsqueeze(-1)  # [B, H, N, C, 1]
    r = ea * (q @ enter.P) + r_loc  # [B, H, N, C, V], q_t^T P_t
    o = ea * (q @ enter.E) + A @ r  # [B, H, N, C, V], q_t^T E_t
    return merge_chunks(o, T), final


# ---------------------------------------------------------------------------------------------------------------
# Public op.
# ---------------------------------------------------------------------------------------------------------------


def _normalized_core(core, q, k, v, log_gamma, *, initial_state, eps, **options):
    """The normalised read-out of Theorem 6.1 from an unnormalised core: run it on v' = [v, 1] with P' = [P, m],
    E' = [E, n] (m, n are P, E of the ones column), split num / den and divide sign-safely."""
    B, T, H, _ = q.shape
    V = v.shape[-1]
    P, m, E, n = initial_state if initial_state is not None else _zero_state(k, V)
    v_aug = torch.cat([v, v.new_ones(B, T, H, 1)], dim=-1)  # [B, T, H, V + 1]
    aug = AHLAState(torch.cat([P, m.unsqueeze(-1)], -1), m, torch.cat([E, n.unsqueeze(-1)], -1), n)
    o_aug, final = core(q, k, v_aug, log_gamma, initial_state=aug, **options)  # [B, T, H, V + 1]
    o = sign_safe_divide(o_aug[..., :V], o_aug[..., V:], eps)  # [B, T, H, V]
    return o, AHLAState(final.P[..., :V], final.P[..., V], final.E[..., :V], final.E[..., V])


def _run_ahla(core, q, k, v, *, normalize, eps, **kwargs):
    if not isinstance(normalize, bool):
        raise ValueError(f"normalize must be a bool, got {type(normalize).__name__}")
    check_real("eps", eps, positive=True)
    if normalize:
        core = partial(_normalized_core, core, eps=float(eps))
    return run_decayed(core, q, k, v, check_initial=_check_ahla_state, **kwargs)


def ahla(q, k, v, *, decay=None, scale=None, initial_state=None, output_final_state=False, mode="chunk",
         chunk_size=64, cu_seqlens=None, normalize=False, eps=1e-6):
    """Asymmetric HLA, strictly causal: o_t = q_t^T E_t (Theorem 6.1 of arXiv:2510.27258), i.e.
    o = ((A A) ⊙ L) V with A = L ⊙ Q K^T for gamma = 1 (eq 6.1); with decay defined by the serial recurrence;
    with `normalize` o_t = q_t^T E_t / (q_t^T n_t ± eps) (Theorem 6.1's normalised form, sign-safe).

    Args:
        q, k: [B, T, H, K]; v: [B, T, H, V], one floating dtype (bf16/fp16 compute in float32).
        decay: [H] per-head log retention (<= 0, gamma = exp(decay)), or None for gamma = 1.
        scale: multiplies q; None means K ** -0.5.
        initial_state: AHLAState(P [N, H, K, V], m [N, H, K], E [N, H, K, V], n [N, H, K]) or None for zeros.
        output_final_state: return the AHLAState after the last token (float32, or float64 for float64 input).
        mode: "reference" | "recurrent" | "chunk".
        chunk_size: chunk length of the chunk form (a power of two).
        cu_seqlens: [N + 1] integer offsets of packed sequences (B = 1).
        normalize: divide by q_t^T n_t (the module docstring); the state is the same either way.
        eps: the denominator guard (> 0), added with the sign of the denominator (sign(0) := +1).

    Returns:
        o: [B, T, H, V] in the input dtype, and the final AHLAState or None.
    """
    check_chunk_size(chunk_size)
    forms = {"reference": ahla_reference, "recurrent": ahla_recurrent, "chunk": ahla_chunk}
    return dispatch(mode, forms, chunk_size, q=q, k=k, v=v, decay=decay, scale=scale, initial_state=initial_state,
                    output_final_state=output_final_state, cu_seqlens=cu_seqlens, normalize=normalize, eps=eps)


def ahla_reference(q, k, v, *, decay=None, scale=None, initial_state=None, output_final_state=False,
                   cu_seqlens=None, normalize=False, eps=1e-6):
    """`ahla` from the decayed prefix sums of its summaries (O(T^2))."""
    return _run_ahla(ahla_reference_core, q, k, v, decay=decay, scale=scale, initial_state=initial_state,
                     output_final_state=output_final_state, cu_seqlens=cu_seqlens, normalize=normalize, eps=eps)


def ahla_recurrent(q, k, v, *, decay=None, scale=None, initial_state=None, output_final_state=False,
                   cu_seqlens=None, normalize=False, eps=1e-6):
    """`ahla` one token at a time by Theorem 6.1's updates (the decoding form)."""
    return _run_ahla(ahla_recurrent_core, q, k, v, decay=decay, scale=scale, initial_state=initial_state,
                     output_final_state=output_final_state, cu_seqlens=cu_seqlens, normalize=normalize, eps=eps)


def ahla_chunk(q, k, v, *, decay=None, scale=None, initial_state=None, output_final_state=False, chunk_size=64,
               cu_seqlens=None, normalize=False, eps=1e-6):
    """`ahla` chunk-parallel (the training form)."""
    check_chunk_size(chunk_size)
    return _run_ahla(ahla_chunk_core, q, k, v, decay=decay, scale=scale, initial_state=initial_state,
                     output_final_state=output_final_state, cu_seqlens=cu_seqlens, chunk_size=chunk_size,
                     normalize=normalize, eps=eps)
