"""Asymmetric HLA (ahla, HLA sec. 6): reference == recurrent == chunk (outputs, the (P, m, E, n) final state, every
gradient, decay and initial_state included) in float64 and float32; the three forms agree over random shapes
(hypothesis); split + carry == one call; decoding == the parallel forward; cu_seqlens == per-sequence calls; gamma = 1
output == ((A A) ⊙ L) V (eq 6.1); the paper's printed chunk formula with the exclusive prefix R_{<t} is wrong while the
inclusive R_{<=t} is right; bad input fails with a ValueError naming the argument. Normalised read-out (Theorem 6.1)
with a sign-safe denominator: forms agree, num / den from the unnormalised op on v and on ones, the sign of the guard,
the state is unchanged."""

from functools import partial

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from helpers import (
    DECAYS,
    DTYPES,
    MODES,
    QKV_SHAPES,
    STATES,
    assert_all_close,
    assert_close,
    assert_cu_seqlens_equals_per_sequence,
    assert_decoding_equals_full,
    assert_forms_agree,
    assert_negative_denominator_moves_away_from_zero,
    assert_split_equals_one_call,
    random_qkv,
    rel_rms,
    run_with_grads,
    unit_key_inputs,
)
from regmem.ops import AHLAState, ahla

SHAPES = [
    pytest.param((2, 21, 2, 6, 4, 8), id="B2-T21-H2-K6-V4-C8"),
    pytest.param((1, 32, 2, 4, 7, 32), id="B1-T32-H2-K4-V7-C32"),
    pytest.param((1, 1, 1, 3, 2, 64), id="B1-T1-H1-K3-V2-C64"),
]


def random_state(N, H, K, V, dtype=torch.float64, seed=1):
    gen = torch.Generator().manual_seed(seed)
    return AHLAState(*(torch.randn(N, H, *s, generator=gen, dtype=dtype) for s in ((K, V), (K,), (K, V), (K,))))


def ahla_inputs(B, T, H, K, V, *, dtype=torch.float64, decay=True, with_state=True, seed=0):
    state = random_state if with_state else None
    return unit_key_inputs(B, T, H, K, V, state=state, decay=decay, dtype=dtype, seed=seed)




def _op(mode, **fixed):
    return partial(ahla, mode=mode, chunk_size=16, **fixed) if mode == "chunk" else partial(ahla, mode=mode, **fixed)


@pytest.mark.parametrize("with_state", STATES)
@pytest.mark.parametrize("decay", DECAYS)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", SHAPES)
def test_ahla_forms_match_reference_with_grads(shape, dtype, decay, with_state):
    B, T, H, K, V, C = shape
    inputs = ahla_inputs(B, T, H, K, V, dtype=dtype, decay=decay, with_state=with_state)
    assert_forms_agree(ahla, inputs, chunk_size=C)


@pytest.mark.parametrize("chunk_size", [1, 16, 64])
def test_chunk_size_does_not_change_the_result(chunk_size):
    inputs = ahla_inputs(1, 50, 2, 5, 3)
    expected = run_with_grads(partial(ahla, mode="chunk", chunk_size=8), inputs)
    actual = run_with_grads(partial(ahla, mode="chunk", chunk_size=chunk_size), inputs)
    assert_all_close(actual, expected, f"C={chunk_size} vs C=8")


def _aav(q, k, v):
    """((A A) ⊙ L) V with A = L ⊙ Q K^T (eq 6.1), q already scaled."""
    T = q.shape[1]
    L = torch.ones(T, T, dtype=torch.bool).tril()
    A = torch.einsum("bthk,bshk->bhts", q, k).masked_fill(~L, 0.0)  # [B, H, T, T]
    return torch.einsum("bhts,bshv->bthv", (A @ A).masked_fill(~L, 0.0), v)


def test_output_is_the_quadratic_form():
    """gamma = 1, no state: o = ((A A) ⊙ L) V, o_t = sum_{j<=t} sum_{i=j}^{t} (q_t.k_i)(q_i.k_j) v_j, every form."""
    q, k, v = random_qkv(2, 21, 2, 4, 3)
    expected = _aav(q * 0.5, k, v)
    # the double sum of eq 6.1 written out, for one batch / head
    t, b, h = 13, 1, 0
    qs = q * 0.5
    direct = sum((qs[b, t, h] @ k[b, i, h]) * (qs[b, i, h] @ k[b, j, h]) * v[b, j, h]
                 for j in range(t + 1) for i in range(j, t + 1))
    assert_close(expected[b, t, h], direct, "eq 6.1 double sum")
    for mode in MODES:
        o, _ = ahla(q, k, v, scale=0.5, mode=mode, chunk_size=8)
        assert_close(o, expected, mode)


def _paper_chunk_output(q, k, v, chunk_size, *, inclusive):
    """gamma = 1: the paper's Fig. 2C chunk read-out o_t = q_t^T (E^{(k-1)} + R^{KQ}_{prefix(t)} P^{(k-1)}) +
    [(A A) ⊙ L] V, with R_{prefix(t)} = sum_{i in chunk, i<=t (inclusive) or i<t (exclusive)} k_i q_i^T and the
    states E^{(k-1)}, P^{(k-1)} entering the chunk taken from the op itself."""
    T, outs, state = q.shape[1], [], None
    for a in range(0, T, chunk_size):
        qc, kc, vc = (x[:, a:a + chunk_size] for x in (q, k, v))
        C = qc.shape[1]
        P0 = state.P if state is not None else q.new_zeros(q.shape[0], q.shape[2], q.shape[3], v.shape[3])
        E0 = state.E if state is not None else torch.zeros_like(P0)
        mask = torch.ones(C, C, dtype=torch.bool).tril(0 if inclusive else -1)
        Rq = torch.einsum("bthk,bshk->bhts", qc, kc).masked_fill(~mask, 0.0)  # q_t^T k_i for i in the prefix
        cross = torch.einsum("bhts,bshk,bhkv->bthv", Rq, qc, P0)  # q_t^T R_prefix P0
        outs.append(torch.einsum("bthk,bhkv->bthv", qc, E0) + cross + _aav(qc, kc, vc))
        _, state = ahla(qc, kc, vc, scale=1.0, initial_state=state, output_final_state=True, mode="recurrent")
    return torch.cat(outs, dim=1)


def test_paper_chunk_formula_needs_the_inclusive_r_prefix():
    """Erratum 4 (ops/hla/DERIVATION.md): printed R^{KQ}_{<t} disagrees with the serial definition; R_{<=t} agrees."""
    q, k, v = random_qkv(1, 24, 2, 4, 3)
    serial, _ = ahla(q, k, v, scale=1.0, mode="recurrent")
    assert_close(_paper_chunk_output(q, k, v, 8, inclusive=True), serial, "inclusive R_{<=t}")
    assert rel_rms(_paper_chunk_output(q, k, v, 8, inclusive=False), serial) > 1e-2


def test_state_is_the_summaries_of_theorem_6_1():
    """gamma = 1: P_T = K^T V, m_T = sum k, E_T = sum_i k_i (q_i^T P_i), n_T = sum_i k_i (q_i^T m_i)."""
    q, k, v = random_qkv(2, 11, 2, 4, 3)
    for mode in MODES:
        _, st = ahla(q, k, v, scale=1.0, output_final_state=True, mode=mode, chunk_size=4)
        P = torch.einsum("bthk,bthv->bthkv", k, v).cumsum(1)  # [B, T, H, K, V]
        m = k.cumsum(1)
        assert_close(st.P, P[:, -1], f"{mode} P")
        assert_close(st.m, m[:, -1], f"{mode} m")
        assert_close(st.E, torch.einsum("bthk,bthj,bthjv->bhkv", k, q, P), f"{mode} E")
        assert_close(st.n, torch.einsum("bthk,bthj,bthj->bhk", k, q, m), f"{mode} n")


@pytest.mark.parametrize("decay", DECAYS)
@pytest.mark.parametrize("mode", MODES)
def test_split_and_carry_state_equals_one_call(mode, decay):
    tokens = ahla_inputs(2, 50, 2, 4, 3, with_state=False, decay=decay)
    op = _op(mode, g=tokens.pop("g", None))
    for cuts in ([0, 7], [16, 33, 49]):
        assert_split_equals_one_call(op, tokens, cuts)


@pytest.mark.parametrize("decay", DECAYS)
def test_step_by_step_decoding_equals_the_parallel_forward(decay):
    tokens = ahla_inputs(1, 40, 2, 5, 4, decay=decay)
    initial_state = tokens.pop("initial_state")
    op = partial(ahla, g=tokens.pop("g", None))
    assert_decoding_equals_full(op, tokens, prefill=23, initial_state=initial_state)


@pytest.mark.parametrize("mode", MODES)
def test_cu_seqlens_equals_per_sequence_calls_with_grads(mode):
    lengths = [5, 0, 33, 17, 1]
    tokens = ahla_inputs(1, sum(lengths), 2, 4, 3, with_state=False)
    op = _op(mode, g=tokens.pop("g"))
    assert_cu_seqlens_equals_per_sequence(op, tokens, lengths, random_state(len(lengths), 2, 4, 3))


def test_zero_length_sequence_keeps_the_state():
    q, k, v = random_qkv(1, 0, 2, 4, 3)
    state = random_state(1, 2, 4, 3)
    for mode in MODES:
        o, final = ahla(q, k, v, initial_state=state, output_final_state=True, mode=mode)
        assert o.shape == (1, 0, 2, 3)
        for name, a, b in zip(state._fields, final, state, strict=True):
            assert_close(a, b, f"{mode} {name}")


B, T, H, K, V = 2, 10, 3, 4, 5


def _state(**fields):
    shapes = {"P": (B, H, K, V), "m": (B, H, K), "E": (B, H, K, V), "n": (B, H, K)}
    return AHLAState(**{n: fields.get(n, torch.zeros(s)) for n, s in shapes.items()})


BAD = {
    "q rank 3": ({"q": torch.randn(B, T, H)}, "q"),
    "k mismatched K": ({"k": torch.randn(B, T, H, K + 1)}, "k"),
    "v mismatched H": ({"v": torch.randn(B, T, H + 1, V)}, "v"),
    "decay wrong shape": ({"g": torch.zeros(B, H)}, "g must|g is"),
    "decay positive": ({"g": torch.full((H,), 0.1)}, "g must|g is"),
    "initial_state a tuple": ({"initial_state": tuple(_state())}, "initial_state"),
    "initial_state.P wrong shape": ({"initial_state": _state(P=torch.zeros(B, H, K, K))}, "initial_state.P"),
    "initial_state.n wrong shape": ({"initial_state": _state(n=torch.zeros(B, H, V))}, "initial_state.n"),
    "cu_seqlens with B > 1": ({"cu_seqlens": torch.tensor([0, 4, T])}, "cu_seqlens"),
    "mode unknown": ({"mode": "parallel"}, "mode"),
    "chunk_size not a power of two": ({"chunk_size": 48}, "chunk_size"),
    "scale a tensor": ({"scale": torch.tensor(1.0)}, "scale"),
    "normalize not a bool": ({"normalize": 1}, "normalize"),
    "eps zero": ({"normalize": True, "eps": 0.0}, "eps"),
    "eps negative": ({"eps": -1e-6}, "eps"),
    "eps nan": ({"eps": float("nan")}, "eps"),
}


@pytest.mark.parametrize("case", list(BAD))
def test_bad_input_raises_value_error_naming_the_argument(case):
    override, name = BAD[case]
    args = {"q": torch.randn(B, T, H, K), "k": torch.randn(B, T, H, K), "v": torch.randn(B, T, H, V), **override}
    q, k, v = (args.pop(n) for n in ("q", "k", "v"))
    with pytest.raises(ValueError, match=name):
        ahla(q, k, v, **args)


# --- normalised read-out (Theorem 6.1): o_t = q_t^T E_t / (q_t^T n_t ± eps) -----------------------------------------


def positive_inputs(B, T, H, K, V, *, dtype=torch.float64, decay=True, with_state=True, seed=0):
    """Non-negative q, k and a state with m, n >= 0 entrywise keep every den_t = q_t^T n_t > 0 and away from 0, so
    the ratio is well conditioned and float32 comparisons measure the algorithm."""
    inputs = ahla_inputs(B, T, H, K, V, dtype=dtype, decay=decay, with_state=with_state, seed=seed)
    inputs["q"], inputs["k"] = inputs["q"].abs(), inputs["k"].abs()
    if with_state:
        P, m, E, n = inputs["initial_state"]
        inputs["initial_state"] = AHLAState(P, m.abs(), E, n.abs())
    return inputs


@pytest.mark.parametrize("with_state", STATES)
@pytest.mark.parametrize("decay", DECAYS)
@pytest.mark.parametrize("dtype", DTYPES)
def test_normalized_forms_match_reference_with_grads(dtype, decay, with_state):
    inputs = positive_inputs(2, 21, 2, 5, 3, dtype=dtype, decay=decay, with_state=with_state)
    assert_forms_agree(partial(ahla, normalize=True), inputs, chunk_size=8)


def _ones_state(state: AHLAState) -> AHLAState:
    """The state of the ones column: P -> m, E -> n."""
    return AHLAState(state.m.unsqueeze(-1), state.m, state.n.unsqueeze(-1), state.n)


def _num_den(inputs):
    """The unnormalised reference op on v (num) and on a ones column (den)."""
    inputs = dict(inputs)
    state = inputs.pop("initial_state")
    v = inputs.pop("v")
    num, _ = ahla(v=v, initial_state=state, mode="reference", **inputs)
    den, _ = ahla(v=torch.ones_like(v[..., :1]), initial_state=_ones_state(state), mode="reference", **inputs)
    return num, den


def test_normalized_output_is_num_over_den_of_the_unnormalized_op():
    """Signed random inputs: den_t takes both signs; o = num / (den + eps sign(den)) for every form, and the state
    is that of the unnormalised op."""
    inputs = ahla_inputs(2, 23, 2, 4, 3)
    eps = 1e-3
    num, den = _num_den(inputs)
    assert (den < 0).any() and (den > 0).any()
    expected = num / torch.where(den >= 0, den + eps, den - eps)
    for mode in MODES:
        o, final = _op(mode, normalize=True, eps=eps)(**inputs, output_final_state=True)
        assert_close(o, expected, mode)
        _, plain = _op(mode)(**inputs, output_final_state=True)
        for name, a, b in zip(final._fields, final, plain, strict=True):
            assert_close(a, b, f"{mode} state.{name}")


def test_denominator_is_q_n_of_the_summaries():
    """The ones column's numerator is Theorem 6.1's denominator: gamma = 1, no state, den_t = q_t^T n_t with
    n_t = sum_{i<=t} k_i (q_i^T m_i), m_i = sum_{j<=i} k_j."""
    inputs = ahla_inputs(1, 13, 2, 4, 3, decay=False, with_state=False)
    q, k = inputs["q"] * 0.5, inputs["k"]  # scale K^-0.5
    m = k.cumsum(1)  # [B, T, H, K]
    n = (k * (q * m).sum(-1, keepdim=True)).cumsum(1)  # [B, T, H, K]
    zero = AHLAState(*(torch.zeros(1, 2, *s, dtype=torch.float64) for s in ((4, 3), (4,), (4, 3), (4,))))
    _, den = _num_den({**inputs, "initial_state": zero})
    assert_close(den[..., 0], (q * n).sum(-1), "den")


def test_negative_denominator_is_pushed_away_from_zero():
    """Where den_t < 0 the output is num / (den - eps), not num / (den + eps); eps is large so the two differ."""
    inputs = ahla_inputs(1, 30, 2, 4, 3, seed=3)
    num, den = _num_den(inputs)
    assert_negative_denominator_moves_away_from_zero(
        lambda mode: _op(mode, normalize=True, eps=0.25)(**inputs)[0], num, den, 0.25, MODES
    )


@pytest.mark.parametrize("mode", MODES)
def test_normalized_split_and_carry_state_equals_one_call(mode):
    tokens = ahla_inputs(1, 40, 2, 4, 3, with_state=False)
    op = _op(mode, g=tokens.pop("g"), normalize=True)
    assert_split_equals_one_call(op, tokens, [9, 25])


@given(
    **QKV_SHAPES,
    decay=st.booleans(),
    with_state=st.booleans(),
    normalize=st.booleans(),
)
def test_forms_match_reference_property(B, T, H, K, V, chunk_size, decay, with_state, normalize):
    """Random shapes, float64: recurrent == reference and chunk == reference (outputs, state, every gradient).
    Normalised runs use the positive inputs, so den_t stays away from zero."""
    make = positive_inputs if normalize else ahla_inputs
    inputs = make(B, T, H, K, V, decay=decay, with_state=with_state)
    assert_forms_agree(partial(ahla, normalize=normalize), inputs, chunk_size=chunk_size)
