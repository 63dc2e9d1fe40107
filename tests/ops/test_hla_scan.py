"""Associative scan of second-order HLA and AHLA (scan.py; arXiv:2510.27258 sec. 4, 6): the paper's way of
computing the state after every token (token segments, per-segment summaries, exclusive scan over them, local scan,
prefix ⊕ local) equals the serial recurrence for any segmentation, with decay and initial_state; the combine
operators are associative with the zero segment as identity; negative controls for errata 1-3 (the printed decayed
operators of eq 4.1 / eq 6.2 and the printed chunk formula of Fig. 1C fail, the corrected ones are exact); the
compact (S, F, eta) form; bad input fails with a ValueError naming the argument."""

import random
from typing import NamedTuple

import pytest
import torch

from helpers import STATES, assert_close, random_qkv, rel_rms
from regmem.ops import AHLAState
from regmem.ops.hla import HLA2State, ahla, hla2
from regmem.ops.hla.scan import (
    AHLASegment,
    HLA2Segment,
    ahla_combine,
    ahla_scan_states,
    ahla_token_segments,
    associative_scan,
    hla2_combine,
    hla2_scan_states,
    hla2_token_segments,
)

B, T, H, K, V = 2, 13, 2, 3, 2
DECAYS = [pytest.param(None, id="gamma1"), pytest.param((-0.4, -0.05), id="decay")]


def segmentations(seed: int) -> list[list[int]]:
    """All ones, one segment, and a random split of T (seeded)."""
    rng = random.Random(seed)
    cuts = sorted(rng.sample(range(1, T), rng.randint(1, 5)))
    return [[1] * T, [T], [b - a for a, b in zip([0, *cuts], [*cuts, T], strict=True)]]


def inputs(decay, seed=0):
    q, k, v = random_qkv(B, T, H, K, V, seed=seed)
    return q, k, v, (None if decay is None else torch.tensor(decay, dtype=torch.float64))


def random_fields(shapes, seed):
    gen = torch.Generator().manual_seed(seed)
    return [torch.randn(B, H, *s, generator=gen, dtype=torch.float64) for s in shapes]


def serial_states(op, q, k, v, decay, initial_state, state_cls):
    """The state after every token (fields [B, T, H, ...]) and the outputs of `op`, one recurrent call per token."""
    state, states, outputs = initial_state, [], []
    for t in range(q.shape[1]):
        o, state = op(q[:, t : t + 1], k[:, t : t + 1], v[:, t : t + 1], g=decay, initial_state=state,
                      output_final_state=True, mode="recurrent")  # fmt: skip
        states.append(state)
        outputs.append(o)
    return state_cls(*(torch.stack(f, dim=1) for f in zip(*states, strict=True))), torch.cat(outputs, dim=1)


def assert_states_close(actual, expected, label):
    for name, a, e in zip(expected._fields, actual, expected, strict=True):
        assert_close(a, e, f"{label} {name}")


def as_state(segment, state_cls):
    return state_cls(*(getattr(segment, name) for name in state_cls._fields))


def worst_rel_error(actual, expected) -> float:
    return max(rel_rms(a, e) for a, e in zip(actual, expected, strict=True))


# ---------------------------------------------------------------------------------------------------------------
# Scan == serial.
# ---------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("with_state", STATES)
@pytest.mark.parametrize("decay", DECAYS)
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_hla2_scan_states_match_serial(seed, decay, with_state):
    q, k, v, decay = inputs(decay, seed)
    init = HLA2State(*random_fields([(K, K), (K, V), (K,), (K, V), (K,)], seed)) if with_state else None
    expected, o = serial_states(hla2, q, k, v, decay, init, HLA2State)
    q_scaled = q * K**-0.5
    for lengths in segmentations(seed):
        states = hla2_scan_states(q, k, v, g=decay, segment_lengths=lengths, initial_state=init)
        assert_states_close(states, expected, f"segments {lengths}")
        # o_t = q_t^T (S_t C_t - G_t), eq 3.3
        read = torch.einsum("bthk,bthkv->bthv", q_scaled, states.S @ states.C - states.G)
        assert_close(read, o, f"segments {lengths} o")


@pytest.mark.parametrize("with_state", STATES)
@pytest.mark.parametrize("decay", DECAYS)
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_ahla_scan_states_match_serial(seed, decay, with_state):
    q, k, v, decay = inputs(decay, seed)
    init = AHLAState(*random_fields([(K, V), (K,), (K, V), (K,)], seed)) if with_state else None
    expected, o = serial_states(ahla, q, k, v, decay, init, AHLAState)
    for lengths in segmentations(seed):
        states = ahla_scan_states(q, k, v, g=decay, segment_lengths=lengths, initial_state=init)
        assert_states_close(states, expected, f"segments {lengths}")
        read = torch.einsum("bthk,bthkv->bthv", q * K**-0.5, states.E)  # o_t = q_t^T E_t, Theorem 6.1
        assert_close(read, o, f"segments {lengths} o")


# ---------------------------------------------------------------------------------------------------------------
# The operators: associativity, identity, the generic scan.
# ---------------------------------------------------------------------------------------------------------------


def random_segment(cls, shapes, seed):
    gen = torch.Generator().manual_seed(seed + 100)
    log_rho = -torch.rand(B, H, generator=gen, dtype=torch.float64)
    return cls(*random_fields(shapes, seed), log_rho)


HLA2_SHAPES = [(K, K), (K, V), (K,), (K, V), (K,), (K, K)]
AHLA_SHAPES = [(K, K), (K, V), (K,), (K, V), (K,)]
OPERATORS = [
    pytest.param(HLA2Segment, HLA2_SHAPES, hla2_combine, id="hla2"),
    pytest.param(AHLASegment, AHLA_SHAPES, ahla_combine, id="ahla"),
]


@pytest.mark.parametrize(("cls", "shapes", "combine"), OPERATORS)
def test_combine_is_associative_with_zero_identity(cls, shapes, combine):
    a, b, c = (random_segment(cls, shapes, seed) for seed in (0, 1, 2))
    assert_states_close(combine(combine(a, b), c), combine(a, combine(b, c)), "(a b) c vs a (b c)")
    zero = cls(*(torch.zeros_like(f) for f in a))
    assert_states_close(combine(zero, a), a, "0 a")
    assert_states_close(combine(a, zero), a, "a 0")


class Matrix(NamedTuple):
    M: torch.Tensor


def test_associative_scan_matches_a_serial_fold():
    """A non-commutative monoid (2x2 matrix products, identity I): inclusive and exclusive prefixes along dim 1."""
    x = Matrix(torch.randn(3, 11, 2, 2, generator=torch.Generator().manual_seed(0), dtype=torch.float64))
    eye = torch.eye(2, dtype=torch.float64).expand(3, 1, 2, 2)
    prefixes, acc = [], eye[:, 0]
    for i in range(11):
        prefixes.append(acc)
        acc = acc @ x.M[:, i]
        prefixes.append(acc)
    exclusive, inclusive = torch.stack(prefixes[0::2], 1), torch.stack(prefixes[1::2], 1)
    combine = lambda a, b: Matrix(a.M @ b.M)  # noqa: E731
    assert_close(associative_scan(combine, x, 1).M, inclusive, "inclusive")
    assert_close(associative_scan(combine, x, 1, exclusive=True, identity=Matrix(eye)).M, exclusive, "exclusive")


# ---------------------------------------------------------------------------------------------------------------
# Errata negative controls (errata 1 and 3 of ops/hla/DERIVATION.md).
# ---------------------------------------------------------------------------------------------------------------


def paper_hla2_combine(a, b):
    """Eq 4.1's decayed operator as printed: cross term S_B (rho_B C_A), no Kbar (erratum 1)."""
    rho = b.log_rho.exp()
    r1, r2 = rho[..., None], rho[..., None, None]
    return HLA2Segment(r2 * a.S + b.S, r2 * a.C + b.C, r1 * a.m + b.m, r2 * a.G + b.G + b.S @ (r2 * a.C),
                       r1 * a.h + b.h + (b.S @ (r1 * a.m).unsqueeze(-1)).squeeze(-1), a.Kbar,
                       a.log_rho + b.log_rho)  # fmt: skip


def paper_ahla_combine(a, b):
    """Eq 6.2's decayed operator as printed: R decayed, R_AB = rho_B R_A + R_B (erratum 3)."""
    rho = b.log_rho.exp()
    r1, r2 = rho[..., None], rho[..., None, None]
    return AHLASegment(r2 * a.R + b.R, r2 * a.P + b.P, r1 * a.m + b.m, r2 * a.E + b.E + b.R @ (r2 * a.P),
                       r1 * a.n + b.n + (b.R @ (r1 * a.m).unsqueeze(-1)).squeeze(-1),
                       a.log_rho + b.log_rho)  # fmt: skip


ERRATA = [
    pytest.param(hla2, hla2_token_segments, hla2_combine, paper_hla2_combine, HLA2State, id="erratum1-hla2"),
    pytest.param(ahla, ahla_token_segments, ahla_combine, paper_ahla_combine, AHLAState, id="erratum3-ahla"),
]


@pytest.mark.parametrize(("op", "tokens", "combine", "paper_combine", "state_cls"), ERRATA)
def test_printed_decayed_operator_fails_and_corrected_is_exact(op, tokens, combine, paper_combine, state_cls):
    """An inclusive scan over the tokens: the printed operator is exact for gamma = 1 only, the corrected one
    always."""
    for decay, printed_exact in ((None, True), ((-0.7, -0.3), False)):
        q, k, v, decay = inputs(decay)
        expected, _ = serial_states(op, q, k, v, decay, None, state_cls)
        segments = tokens(q, k, v, g=decay)
        corrected = associative_scan(combine, segments, dim=1)
        assert worst_rel_error(as_state(corrected, state_cls), expected) < 1e-12
        printed = associative_scan(paper_combine, segments, dim=1)
        error = worst_rel_error(as_state(printed, state_cls), expected)
        assert error < 1e-12 if printed_exact else error > 1e-2, f"decay {decay}: printed error {error:.3g}"


def chunk_outputs(q, k, v, chunk_size, *, corrected):
    """Fig. 1C, gamma = 1, scale 1: o = Q (S_prev C_prev - G_prev) + (((Lc ⊙ QK^T)(Lc ⊙ QK^T)^T) ⊙ Lc) V, plus
    with `corrected` the missing term ((Q S_prev Q^T) ⊙ Lc) V (erratum 2); the state entering each chunk comes
    from the recurrent op on the prefix."""
    pieces = []
    for start in range(0, q.shape[1], chunk_size):
        Q, Kc, Vc = (x[:, start : start + chunk_size].transpose(1, 2) for x in (q, k, v))  # [B, H, c, K|V]
        S, C, G = torch.zeros(B, H, K, K, dtype=q.dtype), torch.zeros(B, H, K, V, dtype=q.dtype), 0.0
        if start:
            _, prev = hla2(q[:, :start], k[:, :start], v[:, :start], scale=1.0, output_final_state=True,
                           mode="recurrent")  # fmt: skip
            S, C, G = prev.S, prev.C, prev.G
        Lc = torch.ones(Q.shape[2], Q.shape[2], dtype=q.dtype).tril()
        W = (Q @ Kc.transpose(-1, -2)) * Lc  # [B, H, c, c]
        o = Q @ (S @ C - G) + ((W @ W.transpose(-1, -2)) * Lc) @ Vc  # [B, H, c, V]
        if corrected:
            o = o + ((Q @ S @ Q.transpose(-1, -2)) * Lc) @ Vc
        pieces.append(o.transpose(1, 2))  # [B, c, H, V]
    return torch.cat(pieces, dim=1)  # [B, T, H, V]


@pytest.mark.parametrize("chunk_size", [1, 3, 4, 8])
def test_printed_chunk_formula_fails_and_corrected_is_exact(chunk_size):
    q, k, v = random_qkv(B, T, H, K, V)
    expected, _ = hla2(q, k, v, scale=1.0, mode="recurrent")
    assert_close(chunk_outputs(q, k, v, chunk_size, corrected=True), expected, f"corrected C={chunk_size}")
    error = rel_rms(chunk_outputs(q, k, v, chunk_size, corrected=False), expected)
    assert error > 1e-2, f"printed C={chunk_size}: error {error:.3g}"


# ---------------------------------------------------------------------------------------------------------------
# The compact (S, F, eta) form and bad input.
# ---------------------------------------------------------------------------------------------------------------


def test_five_tuple_equals_the_compact_f_eta_form():
    """gamma = 1: S_t C_t - G_t = F_t = sum_{j<=t} S_j q_j v_j^T and S_t m_t - h_t = eta_t = sum_{j<=t} S_j q_j at
    every t, so o_t = q_t^T F_t and den_t = q_t^T eta_t (ops/hla/DERIVATION.md, "Compact state")."""
    q, k, v, _ = inputs(None)
    states = hla2_scan_states(q, k, v, scale=1.0, segment_lengths=[4, 5, 4])
    Sq = torch.einsum("bthkj,bthj->bthk", states.S, q)  # [B, T, H, K], S_j q_j
    F = torch.cumsum(Sq.unsqueeze(-1) * v.unsqueeze(-2), dim=1)  # [B, T, H, K, V]
    eta = torch.cumsum(Sq, dim=1)  # [B, T, H, K]
    assert_close(states.S @ states.C - states.G, F, "F")
    assert_close((states.S @ states.m.unsqueeze(-1)).squeeze(-1) - states.h, eta, "eta")
    o, _ = hla2(q, k, v, scale=1.0, mode="recurrent")
    assert_close(torch.einsum("bthk,bthkv->bthv", q, F), o, "o")
    den, _ = hla2(q, k, torch.ones(B, T, H, 1, dtype=q.dtype), scale=1.0, mode="recurrent")
    assert_close(torch.einsum("bthk,bthk->bth", q, eta), den[..., 0], "den")


BAD = {
    "lengths not summing to T": ({"segment_lengths": [4, 4]}, "segment_lengths"),
    "zero length": ({"segment_lengths": [0, T]}, "segment_lengths"),
    "negative length": ({"segment_lengths": [T + 1, -1]}, "segment_lengths"),
    "float length": ({"segment_lengths": [6.5, 6.5]}, "segment_lengths"),
    "lengths an int": ({"segment_lengths": T}, "segment_lengths"),
    "decay wrong shape": ({"g": torch.zeros(H + 1, dtype=torch.float64)}, "g must|g is"),
    "decay positive": ({"g": torch.full((H,), 0.1, dtype=torch.float64)}, "g must|g is"),
}


@pytest.mark.parametrize("op", [hla2_scan_states, ahla_scan_states], ids=["hla2", "ahla"])
@pytest.mark.parametrize("case", list(BAD), ids=list(BAD))
def test_bad_input_raises_value_error_naming_the_argument(op, case):
    override, name = BAD[case]
    q, k, v = random_qkv(B, T, H, K, V)
    kwargs = {"segment_lengths": [T], **override}
    with pytest.raises(ValueError, match=name):
        op(q, k, v, **kwargs)
