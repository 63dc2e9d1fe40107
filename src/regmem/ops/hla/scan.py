"""Associative scan form of second-order HLA and of AHLA: per-token segments, their combine operators with the
decay errata corrected, a generic log-depth scan, and the state after every token computed the paper's way.

Implements the masked scan of sec. 4 (eq 4.1, Theorem 4.1) and the AHLA scan of sec. 6 (eq 6.2) of
*Higher-order Linear Attention* (Zhang, Qin, Wang, Gu; arXiv:2510.27258); the algebra is in DERIVATION.md
beside this file.

Segments. A segment of tokens 1..l with per-token log retention gates g_t, a_t = sum_{s<=t} g_s (from the segment
start), summarises what the segment does to a state entering it. Its state fields are the serial recurrence's
state (recurrent.py) reached from the zero state, plus
    hla2: Kbar = sum_t e^{a_l - a_t} e^{a_{t-1}} k_t k_t^T   [.., H, K, K]   (gamma^{l-1} sum_t k_t k_t^T if constant)
    ahla: R    = sum_t k_t q_t^T, UNDECAYED                    [.., H, K, K]
    both: log_rho = a_l                                        [.., H]
Combine, A precedes B, rho_B = e^{log_rho_B}:
    S, C, m:  rho_B X_A + X_B                 Kbar: rho_B Kbar_A + rho_A Kbar_B      log_rho: sum
    G = rho_B G_A + G_B + Kbar_B C_A          h = rho_B h_A + h_B + Kbar_B m_A
    P, m:     rho_B X_A + X_B                 R: R_A + R_B
    E = rho_B E_A + E_B + R_B (rho_B P_A)     n = rho_B n_A + n_B + R_B (rho_B m_A)
Derivation (hla2). Inside B with A's state entering, C_{t-1} = e^{a_{t-1}} C_A + C^B_{t-1}, and unrolling
G_t = e^{g_t} G_{t-1} + k_t k_t^T C_{t-1} to the end of B gives
    G = e^{a_l} G_A + sum_t e^{a_l - a_t} k_t k_t^T (e^{a_{t-1}} C_A + C^B_{t-1}) = rho_B G_A + Kbar_B C_A + G_B.
(ahla) P_t = e^{a_t} P_A + P^B_t inside B and E_t = e^{g_t} E_{t-1} + k_t q_t^T P_t (INCLUSIVE P_t), so the cross
term is sum_t e^{a_l - a_t} k_t q_t^T e^{a_t} P_A = rho_B R_B P_A: the gates cancel, R stays undecayed.
Kbar combines as written because a token of A sits rho_B further from the end and a token of B has rho_A more decay
before it. The identity element is all zeros (log_rho = 0). A token is the segment
(k k^T, q v^T, q, 0, 0, Kbar = k k^T, log g) (hla2) or (k q^T, k v^T, k, k (q.k) v^T, k (q.k), log g) (ahla).

Errata. The decayed operators as printed in the paper are wrong for gamma < 1 (errata 1 and 3 of DERIVATION.md): the
cross term S_B (rho_B C_A) of eq 4.1 must be Kbar_B C_A (S_B is decayed, the cross term needs the key moment
weighted by the decay before each token), and the R of eq 6.2 must not be decayed. For gamma = 1 Kbar = S and both
printed operators are exact. With these fixes Theorem 4.1 (serial == scan) holds for every segmentation.

The chunk forms (chunk.py) are this same scan with chunks as segments: each chunk's summary by matmuls,
the exclusive scan over chunk summaries run serially over the chunks, and the local part inside each chunk.

Shapes: q, k [B, T, H, K], v [B, T, H, V]; g None or a per-head log retention [H] (<= 0, gamma = exp(g));
q is multiplied by scale (None means K ** -0.5). Legend: B batch, T time, H heads, K key dim, V value dim,
N segments, L the longest segment.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import torch

from regmem.ops.common import associative_scan, check_qkv, check_state_tuple, map_fields, renamed_argument
from regmem.ops.hla.api import check_hla2_state, decayed_tokens
from regmem.ops.hla.state import AHLAState, HLA2State


class HLA2Segment(NamedTuple):
    """A second-order segment: S [.., H, K, K], C [.., H, K, V], m [.., H, K], G [.., H, K, V], h [.., H, K],
    Kbar [.., H, K, K], log_rho [.., H] (module docstring)."""

    S: torch.Tensor
    C: torch.Tensor
    m: torch.Tensor
    G: torch.Tensor
    h: torch.Tensor
    Kbar: torch.Tensor
    log_rho: torch.Tensor


class AHLASegment(NamedTuple):
    """An AHLA segment: R [.., H, K, K] (undecayed), P [.., H, K, V], m [.., H, K], E [.., H, K, V], n [.., H, K],
    log_rho [.., H] (module docstring)."""

    R: torch.Tensor
    P: torch.Tensor
    m: torch.Tensor
    E: torch.Tensor
    n: torch.Tensor
    log_rho: torch.Tensor


def _outer(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return x.unsqueeze(-1) * y.unsqueeze(-2)  # [.., K, K|V]


def _matvec(M: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    return (M @ x.unsqueeze(-1)).squeeze(-1)  # [.., K]


# ---------------------------------------------------------------------------------------------------------------
# Token segments and combine operators.
# ---------------------------------------------------------------------------------------------------------------


def _prepare(q, k, v, g, scale):
    """Validates and returns q (scaled), k, v in the compute dtype and the log gate [B, T, H] (zeros for None)."""
    tokens = decayed_tokens(q, k, v, g, scale)
    q_scaled, g = tokens["q"], tokens["log_gamma"]
    k, v = k.to(q_scaled.dtype), v.to(q_scaled.dtype)
    return q_scaled, k, v, q_scaled.new_zeros(q.shape[:3]) if g is None else g


def hla2_token_segments(q, k, v, *, g=None, scale=None, decay=None) -> HLA2Segment:
    """Every token as a segment (k k^T, q v^T, q, 0, 0, k k^T, log gamma), fields [B, T, H, ...], q scaled."""
    q, k, v, g = _prepare(q, k, v, renamed_argument("token_segments", "g", g, "decay", decay, stacklevel=3), scale)
    kk = _outer(k, k)  # [B, T, H, K, K]
    C = _outer(q, v)  # [B, T, H, K, V]
    return HLA2Segment(kk, C, q, torch.zeros_like(C), torch.zeros_like(q), kk, g)


def hla2_combine(a: HLA2Segment, b: HLA2Segment) -> HLA2Segment:
    """a then b (a precedes b in time), elementwise over broadcastable leading dims; corrected eq 4.1."""
    rho_b = b.log_rho.exp()
    r1, r2 = rho_b[..., None], rho_b[..., None, None]  # [.., H, 1], [.., H, 1, 1]
    rho_a2 = a.log_rho.exp()[..., None, None]  # [.., H, 1, 1]
    return HLA2Segment(
        S=r2 * a.S + b.S,
        C=r2 * a.C + b.C,
        m=r1 * a.m + b.m,
        G=r2 * a.G + b.G + b.Kbar @ a.C,  # a's C is the "previous C" of every token of b
        h=r1 * a.h + b.h + _matvec(b.Kbar, a.m),
        Kbar=r2 * a.Kbar + rho_a2 * b.Kbar,
        log_rho=a.log_rho + b.log_rho,
    )


def ahla_token_segments(q, k, v, *, g=None, scale=None, decay=None) -> AHLASegment:
    """Every token as a segment (k q^T, k v^T, k, k (q.k) v^T, k (q.k), log gamma), fields [B, T, H, ...]."""
    q, k, v, g = _prepare(q, k, v, renamed_argument("token_segments", "g", g, "decay", decay, stacklevel=3), scale)
    kq = k * (q * k).sum(-1, keepdim=True)  # [B, T, H, K], k (q.k): E uses the inclusive P = k v^T
    return AHLASegment(_outer(k, q), _outer(k, v), k, _outer(kq, v), kq, g)


def ahla_combine(a: AHLASegment, b: AHLASegment) -> AHLASegment:
    """a then b (a precedes b in time), elementwise over broadcastable leading dims; corrected eq 6.2."""
    rho_b = b.log_rho.exp()
    r1, r2 = rho_b[..., None], rho_b[..., None, None]  # [.., H, 1], [.., H, 1, 1]
    P_a, m_a = r2 * a.P, r1 * a.m  # a's summaries as seen at the end of b
    return AHLASegment(
        R=a.R + b.R,  # undecayed: the gates of b cancel in the cross term (erratum 3)
        P=P_a + b.P,
        m=m_a + b.m,
        E=r2 * a.E + b.E + b.R @ P_a,
        n=r1 * a.n + b.n + _matvec(b.R, m_a),
        log_rho=a.log_rho + b.log_rho,
    )


# ---------------------------------------------------------------------------------------------------------------
# Generic scan.
# ---------------------------------------------------------------------------------------------------------------


# ---------------------------------------------------------------------------------------------------------------
# States after every token, the paper's way.
# ---------------------------------------------------------------------------------------------------------------


def _check_segment_lengths(segment_lengths, T: int) -> list[int]:
    if not isinstance(segment_lengths, Sequence) or isinstance(segment_lengths, str):
        raise ValueError(
            f"segment_lengths must be a list of positive ints summing to T, got {type(segment_lengths).__name__}"
        )
    lengths = list(segment_lengths)
    if any(isinstance(n, bool) or not isinstance(n, int) or n < 1 for n in lengths):
        raise ValueError(f"segment_lengths must be positive ints, got {lengths}")
    if sum(lengths) != T:
        raise ValueError(f"segment_lengths must sum to T = {T}, got sum {sum(lengths)} ({lengths})")
    return lengths


def _scan_states(tokens, combine, initial, lengths: list[int]):
    """tokens: segments [B, T, H, ...]; initial: the segment entering first [B, H, ...]. Returns the combined
    segment after every token, [B, T, H, ...]."""
    T = tokens.log_rho.shape[1]
    if T == 0:
        return tokens
    N, L = len(lengths), max(lengths)
    starts = [sum(lengths[:c]) for c in range(N)]
    device = tokens.log_rho.device
    # Step 0: pad every segment to L with identity (zero) tokens, so all segments scan in one batch.
    gather = torch.tensor(
        [s + j if j < n else T for s, n in zip(starts, lengths, strict=True) for j in range(L)], device=device
    )  # [N * L], T points at the zero token
    padded = map_fields(lambda f: torch.cat([f, torch.zeros_like(f[:, :1])], 1).index_select(1, gather), tokens)
    segments = map_fields(lambda f: f.unflatten(1, (N, L)), padded)  # [B, N, L, H, ...]
    # Step 1: local inclusive scan inside every segment; its last element (padding is neutral) is the summary.
    local = associative_scan(combine, segments, dim=2)  # [B, N, L, H, ...]
    summaries = map_fields(lambda f: f[:, :, L - 1 :], local)  # [B, N, 1, H, ...]
    # Step 2: exclusive scan over [initial, summaries]: position c + 1 is what enters segment c.
    first = map_fields(lambda f: f[:, None, None], initial)  # [B, 1, 1, H, ...]
    elems = type(local)(*(torch.cat([i, s], 1) for i, s in zip(first, summaries, strict=True)))  # [B, N + 1, 1, ..]
    exclusive = associative_scan(combine, elems, dim=1, exclusive=True)  # [B, N + 1, 1, H, ...]
    prefix = map_fields(lambda f: f[:, 1:], exclusive)  # [B, N, 1, H, ...]
    # Step 3: state_t = prefix of its segment ⊕ local_t, then drop the padding.
    states = map_fields(lambda f: f.flatten(1, 2), combine(prefix, local))  # [B, N * L, H, ...]
    keep = torch.tensor([c * L + j for c, n in enumerate(lengths) for j in range(n)], device=device)  # [T]
    return map_fields(lambda f: f.index_select(1, keep), states)  # [B, T, H, ...]


def hla2_scan_states(q, k, v, *, g=None, scale=None, segment_lengths, initial_state=None, decay=None) -> HLA2State:
    """The HLA2State after every token (fields [B, T, H, ...], compute dtype) by the associative scan of eq 4.1
    (corrected): token segments, a local scan inside each segment of `segment_lengths` (positive ints summing to
    T), an exclusive scan over the segment summaries with `initial_state` (HLA2State [B, H, ...] or None for
    zeros) entering first, and prefix ⊕ local. Read out o_t = q_t^T (S_t C_t - G_t) with q scaled."""
    tokens = hla2_token_segments(q, k, v, g=renamed_argument("hla2_scan_states", "g", g, "decay", decay, stacklevel=3),
                                 scale=scale)
    B, T, H, K, V = check_qkv(q, k, v)
    check_hla2_state(initial_state, B, H, K, V, q)
    lengths = _check_segment_lengths(segment_lengths, T)
    new = tokens.S.new_zeros
    zero = (new(B, H, K, K), new(B, H, K, V), new(B, H, K), new(B, H, K, V), new(B, H, K))
    fields = zero if initial_state is None else tuple(s.to(tokens.S.dtype) for s in initial_state)
    # An initial state is a segment with no tokens after its end: Kbar = 0, log_rho = 0.
    initial = HLA2Segment(*fields, new(B, H, K, K), new(B, H))
    states = _scan_states(tokens, hla2_combine, initial, lengths)
    return HLA2State(states.S, states.C, states.m, states.G, states.h)


def ahla_scan_states(q, k, v, *, g=None, scale=None, segment_lengths, initial_state=None, decay=None) -> AHLAState:
    """The AHLAState after every token (fields [B, T, H, ...], compute dtype) by the associative scan of eq 6.2
    (corrected), as hla2_scan_states; initial_state: AHLAState [B, H, ...] or None. Read out o_t = q_t^T E_t."""
    tokens = ahla_token_segments(q, k, v, g=renamed_argument("ahla_scan_states", "g", g, "decay", decay, stacklevel=3),
                                 scale=scale)
    B, T, H, K, V = check_qkv(q, k, v)
    kv, kd = ((B, H, K, V), "[N, H, K, V]"), ((B, H, K), "[N, H, K]")
    check_state_tuple(initial_state, AHLAState, {"P": kv, "m": kd, "E": kv, "n": kd}, q)
    lengths = _check_segment_lengths(segment_lengths, T)
    new = tokens.P.new_zeros
    fields = (
        (new(B, H, K, V), new(B, H, K), new(B, H, K, V), new(B, H, K))
        if initial_state is None
        else (tuple(s.to(tokens.P.dtype) for s in initial_state))
    )
    # The initial segment always comes first, so its R is never the later operand's R_b: zeros are exact.
    initial = AHLASegment(new(B, H, K, K), *fields, new(B, H))
    states = _scan_states(tokens, ahla_combine, initial, lengths)
    return AHLAState(states.P, states.m, states.E, states.n)
