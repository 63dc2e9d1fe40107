"""Third-order HLA (arXiv:2510.27258, sec. 7; ops/hla/DERIVATION.md, erratum 5): for `hla3` (the causal triple sum)
and `hla3_paper` (the paper's printed recurrence), reference == recurrent == chunk (outputs, final state, every
gradient, initial_state included) in float64 and float32, also over random shapes (hypothesis); chunk size
invariance; split + carry == one call; decoding == the parallel forward; cu_seqlens == per-sequence calls; hla3 equals
the literal causal triple sum and ((W W^T) ⊙ L) W V; the paper's recurrence equals the "maximum attained at least
twice" triple sum and differs from the causal definition (the erratum); the unmasked identity
q_T^T S^K S^Q P == (A A^T A V)_T; bad input raises ValueError naming the argument."""

import itertools
from functools import partial

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from helpers import (
    DTYPES,
    MODES,
    QKV_SHAPES,
    STATES,
    assert_all_close,
    assert_close,
    assert_cu_seqlens_equals_per_sequence,
    assert_decoding_equals_full,
    assert_forms_agree,
    assert_split_equals_one_call,
    random_qkv,
    rel_rms,
    run_with_grads,
    unit_key_inputs,
)
from regmem.ops import HLA3PaperState, HLA3State, hla3, hla3_paper

SHAPES = [
    pytest.param((2, 9, 2, 4, 3), id="B2-T9-H2-K4-V3"),
    pytest.param((1, 1, 1, 3, 2), id="B1-T1-H1-K3-V2"),
]
VARIANTS = ["causal", "paper"]
OPS = {"causal": hla3, "paper": hla3_paper}  # the causal triple sum, and the paper's printed recurrence


def random_state(variant, N, H, K, V, dtype=torch.float64, seed=1):
    gen = torch.Generator().manual_seed(seed)
    cls, shapes = (HLA3State, ((K, K), (K, V), (K, V))) if variant == "causal" else (
        HLA3PaperState, ((K, K), (K, K), (K, V), (K, V)))
    return cls(*(0.5 * torch.randn(N, H, *s, generator=gen, dtype=dtype) for s in shapes))


def hla3_inputs(B, T, H, K, V, *, variant, dtype=torch.float64, with_state=True, seed=0):
    state = partial(random_state, variant) if with_state else None
    return unit_key_inputs(B, T, H, K, V, state=state, dtype=dtype, seed=seed)


CHUNK_SHAPES = [
    pytest.param((2, 21, 2, 6, 4, 8), id="B2-T21-H2-K6-V4-C8"),
    pytest.param((1, 32, 2, 4, 7, 32), id="B1-T32-H2-K4-V7-C32"),
    pytest.param((1, 1, 1, 3, 2, 64), id="B1-T1-H1-K3-V2-C64"),
]


def _op(variant, mode, **fixed):
    """hla3 or hla3_paper in one mode; the chunk form with chunk_size 8."""
    if mode == "chunk":
        return partial(OPS[variant], mode=mode, chunk_size=8, **fixed)
    return partial(OPS[variant], mode=mode, **fixed)


@pytest.mark.parametrize("with_state", STATES)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", CHUNK_SHAPES)
@pytest.mark.parametrize("variant", VARIANTS)
def test_forms_match_reference_with_grads(variant, shape, dtype, with_state):
    B, T, H, K, V, C = shape
    inputs = hla3_inputs(B, T, H, K, V, variant=variant, dtype=dtype, with_state=with_state)
    assert_forms_agree(OPS[variant], inputs, chunk_size=C)


@given(
    **QKV_SHAPES,
    with_state=st.booleans(),
    variant=st.sampled_from(VARIANTS),
)
def test_forms_match_reference_property(B, T, H, K, V, chunk_size, with_state, variant):
    """Random shapes, float64: recurrent == reference and chunk == reference (outputs, state, every gradient)."""
    T = min(T, 24) if variant == "paper" else T  # the paper variant's reference is O(T^4)
    inputs = hla3_inputs(B, T, H, K, V, variant=variant, with_state=with_state)
    assert_forms_agree(OPS[variant], inputs, chunk_size=chunk_size)


@pytest.mark.parametrize("chunk_size", [1, 16, 64])
def test_chunk_size_does_not_change_the_result(chunk_size):
    inputs = hla3_inputs(1, 50, 2, 5, 3, variant="causal")
    expected = run_with_grads(partial(hla3, mode="chunk", chunk_size=8), inputs)
    actual = run_with_grads(partial(hla3, mode="chunk", chunk_size=chunk_size), inputs)
    assert_all_close(actual, expected, f"C={chunk_size} vs C=8")


def test_chunk_padding_tokens_are_neutral():
    """T = 5, C = 8: three zero tokens pad the chunk; S, P, F and the outputs equal those of C = 1 (no padding)."""
    inputs = hla3_inputs(2, 5, 2, 4, 3, variant="causal")
    padded = run_with_grads(partial(hla3, mode="chunk", chunk_size=8), inputs)
    assert_all_close(padded, run_with_grads(partial(hla3, mode="chunk", chunk_size=1), inputs), "C=8 vs C=1")


def test_step_by_step_decoding_equals_the_parallel_forward():
    tokens = hla3_inputs(1, 40, 2, 5, 4, variant="causal")
    initial_state = tokens.pop("initial_state")
    assert_decoding_equals_full(partial(hla3, mode="chunk"), tokens, prefill=23, initial_state=initial_state)


@pytest.mark.parametrize("with_state", STATES)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("variant", VARIANTS)
def test_recurrent_equals_reference_with_grads(variant, shape, dtype, with_state):
    inputs = hla3_inputs(*shape, variant=variant, dtype=dtype, with_state=with_state)
    expected = run_with_grads(partial(OPS[variant], mode="reference"), inputs)
    actual = run_with_grads(partial(OPS[variant], mode="recurrent"), inputs)
    assert_all_close(actual, expected, f"{variant}: recurrent vs reference")


VARIANT_MODES = [(variant, mode) for variant in VARIANTS for mode in MODES]


@pytest.mark.parametrize(("variant", "mode"), VARIANT_MODES)
def test_split_and_carry_equals_one_call(variant, mode):
    tokens = hla3_inputs(2, 19, 2, 4, 3, variant=variant, with_state=False)
    assert_split_equals_one_call(_op(variant, mode), tokens, [1, 4, 9, 17])


@pytest.mark.parametrize(("variant", "mode"), VARIANT_MODES)
def test_cu_seqlens_equals_per_sequence_calls_with_grads(variant, mode):
    lengths = [3, 0, 11, 1]
    tokens = hla3_inputs(1, sum(lengths), 2, 3, 2, variant=variant, with_state=False)
    state = random_state(variant, len(lengths), 2, 3, 2)
    assert_cu_seqlens_equals_per_sequence(_op(variant, mode), tokens, lengths, state, f"{variant}: ")


def _triple_sum(q, k, v, keep):
    """Literal o_t = sum over (i, u, j) with keep(t, i, u, j) of (q_t.k_i)(q_u.k_i)(q_u.k_j) v_j, one head, 0-based."""
    T = q.shape[0]
    A = q @ k.T
    o = torch.zeros(T, v.shape[-1], dtype=q.dtype)
    for t, i, u, j in itertools.product(range(T), repeat=4):
        if keep(t, i, u, j):
            o[t] += A[t, i] * A[u, i] * A[u, j] * v[j]
    return o


def _causal(t, i, u, j):
    return u <= t and i <= u and j <= u


def _paper(t, i, u, j):
    m = max(i, u, j)
    return m <= t and (i == m) + (u == m) + (j == m) >= 2


def _one_head(T=6, K=3, V=2, seed=3):
    q, k, v = random_qkv(1, T, 1, K, V, seed=seed)
    return q, k, v, q[0, :, 0], k[0, :, 0], v[0, :, 0]


@pytest.mark.parametrize("mode", MODES)
def test_causal_variant_is_the_natural_causal_triple_sum(mode):
    q, k, v, qh, kh, vh = _one_head()
    o, _ = hla3(q, k, v, scale=1.0, mode=mode, chunk_size=4)
    assert_close(o[0, :, 0], _triple_sum(qh, kh, vh, _causal), "causal vs literal triple sum")
    W = (qh @ kh.T).tril()
    assert_close(o[0, :, 0], ((W @ W.T).tril() @ W) @ vh, "causal vs ((W W^T) ⊙ L) W V")


@pytest.mark.parametrize("mode", MODES)
def test_paper_recurrence_is_the_repeated_max_triple_sum_not_the_causal_operator(mode):
    """Erratum 5: the printed masked kernel sums the triples whose maximum index is attained at least twice; it is
    neither the causal third order nor ((W W^T W) ⊙ L) V."""
    q, k, v, qh, kh, vh = _one_head()
    o, _ = hla3_paper(q, k, v, scale=1.0, mode=mode, chunk_size=4)
    o = o[0, :, 0]
    assert_close(o, _triple_sum(qh, kh, vh, _paper), "paper vs repeated-max triple sum")
    causal = _triple_sum(qh, kh, vh, _causal)
    W = (qh @ kh.T).tril()
    assert rel_rms(o[1:], causal[1:]) > 1e-2, "the paper recurrence should differ from the causal definition"
    assert rel_rms(o[1:], ((W @ W.T @ W).tril() @ vh)[1:]) > 1e-2
    assert_close(o[:1], causal[:1], "t = 1: the only triple (1, 1, 1) is in both sums")


def test_unmasked_identity_at_the_last_token():
    """HLA sec. 7: q_t^T S^K_t S^Q_t P_t is row t of the unmasked (A A^T A) V over tokens <= t; at t = T the paper's
    output plus q_T^T G_T is that row."""
    q, k, v, qh, kh, vh = _one_head(T=7)
    o, state = hla3_paper(q, k, v, scale=1.0, output_final_state=True)
    A = qh @ kh.T
    full = (A @ A.T @ A @ vh)[-1]
    SK, SQ, P, G = (s[0, 0] for s in state)
    assert_close(qh[-1] @ SK @ SQ @ P, full, "q^T S^K S^Q P vs (A A^T A V)_T")
    assert_close(o[0, -1, 0] + qh[-1] @ G, full, "o_T + q_T^T G_T vs (A A^T A V)_T")
    assert_close(SK, kh.T @ kh, "S^K")
    assert_close(SQ, qh.T @ qh, "S^Q")


@pytest.mark.parametrize("variant", VARIANTS)
def test_zero_length_sequence_keeps_the_state(variant):
    q, k, v = random_qkv(1, 0, 2, 4, 3)
    state = random_state(variant, 1, 2, 4, 3)
    for mode in MODES:
        o, final = OPS[variant](q, k, v, initial_state=state, output_final_state=True, mode=mode)
        assert o.shape == (1, 0, 2, 3)
        for a, b in zip(final, state, strict=True):
            assert torch.equal(a, b)


@pytest.mark.parametrize("variant", VARIANTS)
def test_default_mode_is_chunk_and_state_is_dropped_unless_asked(variant):
    q, k, v = random_qkv(1, 5, 1, 3, 2)
    o, state = OPS[variant](q, k, v)
    assert state is None
    torch.testing.assert_close(o, OPS[variant](q, k, v, mode="chunk")[0], rtol=0, atol=0)


def _bad_inputs():
    B, T, H, K, V = 2, 5, 2, 3, 4
    q, k, v = random_qkv(B, T, H, K, V, dtype=torch.float32)
    good = {"q": q, "k": k, "v": v}
    causal_state = random_state("causal", B, H, K, V, dtype=torch.float32)
    paper_state = random_state("paper", B, H, K, V, dtype=torch.float32)
    return good, {
        "chunk_size-chunk-mode": ({"mode": "chunk", "chunk_size": 12}, "chunk_size"),
        "unknown-mode": ({"mode": "parallel"}, "mode"),
        "q-rank": ({"q": q[0]}, "q"),
        "k-shape": ({"k": k[:, :, :, :2]}, "k"),
        "v-dtype": ({"v": v.double()}, "v"),
        "v-batch": ({"v": v[:1]}, "v"),
        "scale": ({"scale": "1"}, "scale"),
        "chunk_size": ({"chunk_size": 3}, "chunk_size"),
        "state-type": ({"initial_state": paper_state}, "initial_state"),
        "state-shape": ({"initial_state": causal_state._replace(S=causal_state.S[:1])}, "initial_state.S"),
        "state-tensor": ({"initial_state": causal_state.P}, "initial_state"),
        "cu_seqlens-batch": ({"cu_seqlens": torch.tensor([0, 5])}, "cu_seqlens"),
        "cu_seqlens-end": ({"q": q[:1], "k": k[:1], "v": v[:1], "cu_seqlens": torch.tensor([0, 4])}, "cu_seqlens"),
    }


@pytest.mark.parametrize("case", list(_bad_inputs()[1]))
def test_bad_input_raises_value_error_naming_the_argument(case):
    good, cases = _bad_inputs()
    override, name = cases[case]
    with pytest.raises(ValueError, match=name):
        hla3(**{**good, **override})


def test_paper_op_takes_its_own_state_type():
    good, _ = _bad_inputs()
    B, H, K, V = 2, 2, 3, 4
    with pytest.raises(ValueError, match="initial_state"):
        hla3_paper(**good, initial_state=random_state("causal", B, H, K, V, dtype=torch.float32))
