"""The public ops of higher-order linear attention (arXiv:2510.27258): `hla2`, `ahla`, `hla3`, `hla3_paper`.

Each op validates its arguments here and runs one of the forms of reference.py, recurrent.py and chunk.py
(`op(..., mode=...)` or `op.reference / .recurrent / .chunk`); the states are in state.py, the associative scan of
hla2 and ahla in scan.py, the math and the paper's errata in DERIVATION.md.

A per-head decay `g` [H] (log gamma <= 0, sec. 4.3; `decay` is its deprecated old name) is handed to the cores as a
per-token log gate [B, T, H] (g_t = log gamma), so the zero-gate padding of varlen packing and of chunking leaves the
state unchanged. The decay may also be given per token, [B, T, H]: a layer gives a padded token decay 0 (retention
1) and q = k = 0, which leaves every state unchanged (regmem/ops/common/padding.py, "neutral tokens").

Normalised read-outs (`normalize=True`: eq 3.4 for hla2, Theorem 6.1 for ahla) use the ones-column trick of
`regmem/ops/common/normalize.py`: the denominator is the numerator of v = 1, whose memory is (m, h) for hla2 and
(m, n) for ahla, so the unchanged core runs on v' = [v, 1] with C' = [C, m], G' = [G, h] (P' = [P, m],
E' = [E, n]) and the division is sign-safe: o_t = num_t / (den_t + eps * sign(den_t)), sign(0) := +1.

Ridge read-out of hla2 (`ridge` = lambda >= 0, Alg. 1 with S_eff = S_t + lambda I in the READ-OUT only):
    o_t = q_t^T ((S_t + lambda I) C_t - G_t) = (ridge-free o_t) + lambda q_t^T C_t   (den alike with m_t).
The paper calls this a stabilised variant: for lambda > 0 it is not the exact masked operator of Theorem 3.1.

Legend: B batch, T time, H heads, K key dim, V value dim, N states (B, or the number of sequences with
`cu_seqlens`, then B = 1). `scale=None` means K ** -0.5.
"""

from __future__ import annotations

import math

import torch

from regmem.ops.common import (
    Call,
    check_at_most,
    check_qkv,
    check_same_device,
    check_scale,
    check_state_tuple,
    check_tensor,
    num_states,
    op,
    renamed_argument,
    scaled_queries,
)
from regmem.ops.common.normalize import append_column, append_ones, divide_by_ones_column, split_column
from regmem.ops.hla.chunk import ahla_chunk_core, hla2_chunk_core, hla3_causal_chunk_core, hla3_paper_chunk_core
from regmem.ops.hla.recurrent import (
    ahla_recurrent_core,
    hla2_recurrent_core,
    hla3_causal_recurrent_core,
    hla3_paper_recurrent_core,
)
from regmem.ops.hla.reference import (
    ahla_reference_core,
    hla2_reference_core,
    hla3_causal_reference_core,
    hla3_paper_reference_core,
)
from regmem.ops.hla.state import AHLAState, HLA2State, HLA3PaperState, HLA3State


@op(reference=hla2_reference_core, recurrent=hla2_recurrent_core, chunk=hla2_chunk_core)
def hla2(q, k, v, *, masked=True, g=None, scale=None, initial_state=None, cu_seqlens=None, normalize=False,
         eps=1e-6, ridge=0.0, decay=None):
    """Second-order higher-order linear attention, strictly causal by default: eq 3.3 (Theorem 3.1) of
    *Higher-order Linear Attention* (arXiv:2510.27258), with the optional decay of sec. 4.3; unnormalised unless
    `normalize` (eq 3.4), optionally with the ridge read-out of Alg. 1.

        o_t = q_t^T (S_t C_t - G_t) = sum_{j<=t} sum_{i<=j} (q_t.k_i)(q_j.k_i) v_j     (gamma = 1)

    with S, C, G the prefix summaries of HLA2State; with decay the op is defined by the serial recurrence of
    recurrent.py. Equivalently (gamma = 1) F_t = F_{t-1} + (S_t q_t) v_t^T and o_t = q_t^T F_t.

    Args:
        q, k: [B, T, H, K]; v: [B, T, H, V], all one floating dtype (bf16/fp16 compute in float32).
        masked: True for the strictly causal eq 3.3; False for eq 3.1, o_t = q_t^T S_t C_t (every pair i, j <= t;
            the state is the same 5-tuple).
        g: log retention (<= 0, gamma = exp(g)), as every op names it: [H] per head (sec. 4.3), or [B, T, H] per
            token (the serial recurrence with gamma_t in place of gamma); None for gamma = 1.
        scale: multiplies q; None means K ** -0.5.
        initial_state: HLA2State of earlier tokens (shapes above), or None for zeros.
        output_final_state: return the HLA2State after the last token (float32, or float64 for float64 input).
        mode: "reference" | "recurrent" | "chunk".
        chunk_size: chunk length C of the chunk form (a power of two).
        cu_seqlens: [N + 1] integer offsets of packed sequences (B = 1).
        normalize: the ratio normalisation of eq 3.4, o_t = num_t / den_t with num_t the output above and
            den_t = q_t^T (S_t m_t - h_t) (unmasked q_t^T S_t m_t), i.e. the output for v = 1. The denominator is
            sign-safe: num_t / (den_t + eps * sign(den_t)), sign(0) := +1, so a negative den_t becomes den_t - eps.
        eps: the denominator's guard (> 0; only used with normalize).
        ridge: lambda >= 0 of the stabilised read-out S_eff = S_t + lambda I (Alg. 1), in the read-out only:
            adds lambda q_t^T C_t to the output (lambda q_t^T m_t to den_t). The paper calls this a stabilised
            variant; for lambda > 0 it is not the exact masked operator. The state is unchanged by it.
        decay: the old name of `g` (a DeprecationWarning; removed in the next release).

    Returns:
        o: [B, T, H, V] in the input dtype, and the final HLA2State or None.

    """
    _check_flag("masked", masked)
    _check_flag("normalize", normalize)
    check_real("eps", eps, positive=True)
    check_real("ridge", ridge, positive=False)
    g = renamed_argument("hla2", "g", g, "decay", decay)
    tokens = decayed_tokens(q, k, v, g, scale)
    B, T, H, K = q.shape
    V = v.shape[-1]
    check_hla2_state(initial_state, num_states(B, T, cu_seqlens), H, K, V, q)
    options = {"masked": masked, "ridge": float(ridge)}
    if not normalize:
        return Call(tokens, q.dtype, initial_state, options=options, cu_seqlens=cu_seqlens)
    if initial_state is not None:  # the memory of v' = [v, 1]: C' = [C, m], G' = [G, h]
        S, C, m, G, h = initial_state
        initial_state = HLA2State(S, append_column(C, m), m, append_column(G, h), h)

    def read_out(o, state):
        (C, m), (G, h) = split_column(state.C), split_column(state.G)
        return divide_by_ones_column(o, float(eps)), HLA2State(state.S, C, m, G, h)

    return Call({**tokens, "v": append_ones(v)}, q.dtype, initial_state, options=options, cu_seqlens=cu_seqlens,
                finish=read_out)


@op(reference=ahla_reference_core, recurrent=ahla_recurrent_core, chunk=ahla_chunk_core)
def ahla(q, k, v, *, g=None, scale=None, initial_state=None, cu_seqlens=None, normalize=False, eps=1e-6,
         decay=None):
    """Asymmetric HLA, strictly causal: o_t = q_t^T E_t (Theorem 6.1 of arXiv:2510.27258), i.e.
    o = ((A A) ⊙ L) V with A = L ⊙ Q K^T for gamma = 1 (eq 6.1); with decay defined by the serial recurrence;
    with `normalize` o_t = q_t^T E_t / (q_t^T n_t ± eps) (Theorem 6.1's normalised form, sign-safe).

    Args:
        q, k: [B, T, H, K]; v: [B, T, H, V], one floating dtype (bf16/fp16 compute in float32).
        g: log retention (<= 0, gamma = exp(g)): [H] per head, or [B, T, H] per token; None for gamma = 1.
        decay: the old name of `g` (a DeprecationWarning; removed in the next release).
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
    _check_flag("normalize", normalize)
    check_real("eps", eps, positive=True)
    g = renamed_argument("ahla", "g", g, "decay", decay)
    tokens = decayed_tokens(q, k, v, g, scale)
    B, T, H, K = q.shape
    V = v.shape[-1]
    N = num_states(B, T, cu_seqlens)
    kv, kk = ((N, H, K, V), "[N, H, K, V]"), ((N, H, K), "[N, H, K]")
    check_state_tuple(initial_state, AHLAState, {"P": kv, "m": kk, "E": kv, "n": kk}, q)
    if not normalize:
        return Call(tokens, q.dtype, initial_state, cu_seqlens=cu_seqlens)
    if initial_state is not None:  # the memory of v' = [v, 1]: P' = [P, m], E' = [E, n]
        P, m, E, n = initial_state
        initial_state = AHLAState(append_column(P, m), m, append_column(E, n), n)

    def read_out(o, state):
        (P, m), (E, n) = split_column(state.P), split_column(state.E)
        return divide_by_ones_column(o, float(eps)), AHLAState(P, m, E, n)

    return Call({**tokens, "v": append_ones(v)}, q.dtype, initial_state, cu_seqlens=cu_seqlens, finish=read_out)


@op(reference=hla3_causal_reference_core, recurrent=hla3_causal_recurrent_core, chunk=hla3_causal_chunk_core)
def hla3(q, k, v, *, scale=None, initial_state=None, cu_seqlens=None):
    """Third-order HLA (sec. 7 of arXiv:2510.27258), the natural causal triple sum, unnormalised, no decay:

        o_t = sum_{u<=t} sum_{i<=u} sum_{j<=u} (q_t.k_i)(q_u.k_i)(q_u.k_j) v_j^T,  i.e.  O = ((W W^T) ⊙ L) W V

    with W = L ⊙ Q K^T, streamed by HLA3State(S, P, F): S_t = S_{t-1} + k_t k_t^T, P_t = P_{t-1} + k_t v_t^T,
    F_t = F_{t-1} + (S_t q_t)(q_t^T P_t), o_t = q_t^T F_t (O(K^2 + K V) per token). The paper's printed
    "masked" recurrence computes another sum; it is `hla3_paper`. Decay and the normalised read-out are not
    implemented (the paper does not work out third-order decay).

    Args:
        q, k: [B, T, H, K]; v: [B, T, H, V], one floating dtype (bf16/fp16 compute in float32).
        scale: multiplies q; None means K ** -0.5.
        initial_state: HLA3State(S [N, H, K, K], P [N, H, K, V], F [N, H, K, V]) or None for zeros.
        output_final_state: return the state after the last token (float32, or float64 for float64 input).
        mode: "reference" | "recurrent" | "chunk".
        chunk_size: chunk length of the chunk form (a power of two).
        cu_seqlens: [N + 1] integer offsets of packed sequences (B = 1).

    Returns:
        o: [B, T, H, V] in the input dtype, and the final HLA3State or None.
    """
    B, T, H, K, V = check_qkv(q, k, v)
    check_scale(scale)
    N = num_states(B, T, cu_seqlens)
    kk, kv = ((N, H, K, K), "[N, H, K, K]"), ((N, H, K, V), "[N, H, K, V]")
    check_state_tuple(initial_state, HLA3State, {"S": kk, "P": kv, "F": kv}, q)
    return Call({"q": scaled_queries(q, scale), "k": k, "v": v}, q.dtype, initial_state, cu_seqlens=cu_seqlens)


@op(reference=hla3_paper_reference_core, recurrent=hla3_paper_recurrent_core, chunk=hla3_paper_chunk_core)
def hla3_paper(q, k, v, *, scale=None, initial_state=None, cu_seqlens=None):
    """The paper's printed third-order "masked" streaming kernel (Alg. 3 of arXiv:2510.27258 with gamma = 1),
    kept for reproduction and named for its source, not for what it was meant to compute:

        o_t = q_t^T (S^K_t S^Q_t P_t - G_t),  G = G1 + G2 + G3 of the paper (state HLA3PaperState(SK, SQ, P, G)).

    It does NOT compute ((W W^T W) ⊙ L) V nor the causal operator of `hla3` (DERIVATION.md, erratum 5):
    inclusion-exclusion removes only the triples whose maximum index is unique, so it computes
        o_t = sum over (i, u, j) in {1..t}^3 whose maximum index is attained at least twice of
              (q_t.k_i)(q_u.k_i)(q_u.k_j) v_j^T.
    With an initial state the state enters as a pseudo-token 0 before all others (S^K_0, S^Q_0, P_0 in place of
    k k^T, q q^T, k v^T) and o_t = q_t^T (sum over triples in {0..t}^3 of that rule - G_0).

    Args:
        q, k: [B, T, H, K]; v: [B, T, H, V], one floating dtype (bf16/fp16 compute in float32).
        scale: multiplies q; None means K ** -0.5.
        initial_state: HLA3PaperState(SK [N, H, K, K], SQ [N, H, K, K], P [N, H, K, V], G [N, H, K, V]) or None
            for zeros.
        output_final_state, mode, chunk_size, cu_seqlens: as `hla3`.

    Returns:
        o: [B, T, H, V] in the input dtype, and the final HLA3PaperState or None.
    """
    B, T, H, K, V = check_qkv(q, k, v)
    check_scale(scale)
    N = num_states(B, T, cu_seqlens)
    kk, kv = ((N, H, K, K), "[N, H, K, K]"), ((N, H, K, V), "[N, H, K, V]")
    check_state_tuple(initial_state, HLA3PaperState, {"SK": kk, "SQ": kk, "P": kv, "G": kv}, q)
    return Call({"q": scaled_queries(q, scale), "k": k, "v": v}, q.dtype, initial_state, cu_seqlens=cu_seqlens)


def check_hla2_state(initial_state, N: int, H: int, K: int, V: int, q: torch.Tensor) -> None:
    kk, kv, k = ((N, H, K, K), "[N, H, K, K]"), ((N, H, K, V), "[N, H, K, V]"), ((N, H, K), "[N, H, K]")
    check_state_tuple(initial_state, HLA2State, {"S": kk, "C": kv, "m": k, "G": kv, "h": k}, q)


def decayed_tokens(q, k, v, g, scale) -> dict:
    """Validates q, k, v, g and scale; returns the cores' tokens: q scaled [B, T, H, K] (compute dtype), k, v,
    and the log retention g ([H] or [B, T, H]) as a per-token log gate `log_gamma` [B, T, H] (None without it)."""
    B, T, H, _, _ = check_qkv(q, k, v)
    if g is not None:
        check_tensor("g", g, 3 if isinstance(g, torch.Tensor) and g.ndim == 3 else 1, "[H] or [B, T, H]")
        if tuple(g.shape) not in ((H,), (B, T, H)):
            raise ValueError(f"g must have shape [H] = {[H]} or [B, T, H] = {[B, T, H]}, got shape {list(g.shape)}")
        check_same_device(q=q, g=g)
        check_at_most("g", g, 0.0, "is a log retention factor and must be <= 0 everywhere")
    check_scale(scale)
    q_scaled = scaled_queries(q, scale)  # [B, T, H, K]
    log_gamma = None if g is None else g.to(q_scaled.dtype).expand(B, T, H)
    return {"q": q_scaled, "k": k, "v": v, "log_gamma": log_gamma}


def check_real(name: str, x, *, positive: bool) -> None:
    """x: a finite Python real, > 0 if positive else >= 0."""
    if isinstance(x, bool) or not isinstance(x, (int, float)):
        raise ValueError(f"{name} must be a Python float, got {type(x).__name__}")
    if not math.isfinite(x) or (x <= 0 if positive else x < 0):
        raise ValueError(f"{name} must be finite and {'> 0' if positive else '>= 0'}, got {x}")


def _check_flag(name: str, x) -> None:
    if not isinstance(x, bool):
        raise ValueError(f"{name} must be a bool, got {type(x).__name__}")
