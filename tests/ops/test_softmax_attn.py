"""softmax_attn, the local-constant (Nadaraya-Watson) regression memory of *Test-time regression*
(arXiv:2501.12352, Sec. 4 Vignette 4, eqs. 48-51): reference == recurrent == chunk (SDPA)
with every gradient, KV-cache carrying, decoding, varlen packing, the NW/QK-norm identities, and validation.

Shapes: q, k: [B, T, H, K]; v: [B, T, H, V]; cache KVState(k [B, S, H, K], v [B, S, H, V]); weights [B, H, T, T].
"""

import math
from functools import partial

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from helpers import (
    assert_all_close,
    assert_close,
    assert_decoding_equals_full,
    assert_forms_agree,
    assert_masked_pairs_equal_removed,
    assert_packed_equals_per_sequence,
    assert_split_equals_one_call,
    kv_cache_inputs,
    nonparametric_bad_inputs,
    random_qkv,
    run_with_grads,
)
from regmem.ops import KVState, attention_weights, softmax_attn

DTYPES = [pytest.param(torch.float64, id="f64"), pytest.param(torch.float32, id="f32")]
SHAPES = [  # (B, T, H, K, V, S)
    pytest.param((2, 23, 3, 8, 5, 0), id="B2-T23-H3-K8-V5-S0"),
    pytest.param((1, 17, 2, 4, 6, 7), id="B1-T17-H2-K4-V6-S7"),
    pytest.param((2, 1, 1, 3, 2, 4), id="B2-T1-H1-K3-V2-S4"),
]
KERNELS = {
    "exp": {},
    "exp-scale0.7": {"scale": 0.7},
    "gaussian-B3": {"bandwidth": 3.0},
    "qk_norm": {"qk_norm": True},
    "qk_norm-gaussian": {"qk_norm": True, "bandwidth": 0.5},
}




@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("kernel", list(KERNELS))
def test_forms_match_reference_with_grads(kernel, shape, dtype):
    assert_forms_agree(partial(softmax_attn, **KERNELS[kernel]), kv_cache_inputs(*shape, dtype), chunk_size=16)


@given(B=st.integers(1, 2), T=st.integers(1, 24), H=st.integers(1, 2), K=st.integers(1, 9), V=st.integers(1, 9),
       S=st.integers(0, 6), kernel=st.sampled_from(list(KERNELS)))
def test_chunk_and_recurrent_match_reference_property(B, T, H, K, V, S, kernel):
    inputs = kv_cache_inputs(B, T, H, K, V, S, torch.float64)
    op = partial(softmax_attn, **KERNELS[kernel])
    expected = run_with_grads(partial(op, mode="reference"), inputs)
    assert_all_close(run_with_grads(partial(op, mode="chunk"), inputs), expected, "chunk vs reference")
    assert_all_close(run_with_grads(partial(op, mode="recurrent"), inputs), expected, "recurrent vs reference")


def test_final_state_is_the_cache_followed_by_the_new_pairs():
    inputs = kv_cache_inputs(1, 5, 2, 3, 4, 3, torch.float64)
    _, state = softmax_attn(**inputs, output_final_state=True)
    assert_close(state.k, torch.cat([inputs["initial_state"].k, inputs["k"]], dim=1), "state.k")
    assert_close(state.v, torch.cat([inputs["initial_state"].v, inputs["v"]], dim=1), "state.v")


@pytest.mark.parametrize("mode", ["reference", "recurrent", "chunk"])
@pytest.mark.parametrize("kernel", ["exp", "gaussian-B3"])
def test_split_and_carry_cache_equals_one_call(kernel, mode):
    tokens = kv_cache_inputs(2, 29, 2, 6, 4, 0, torch.float64)
    assert_split_equals_one_call(partial(softmax_attn, mode=mode, **KERNELS[kernel]), tokens, cuts=[1, 9, 20])


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("prefill", [0, 7])
def test_decoding_token_by_token_equals_one_call(prefill, dtype):
    inputs = kv_cache_inputs(2, 15, 2, 5, 3, 4, dtype)
    state = inputs.pop("initial_state")
    assert_decoding_equals_full(partial(softmax_attn, qk_norm=True), inputs, prefill=prefill, initial_state=state)


@pytest.mark.parametrize("mode", ["reference", "recurrent", "chunk"])
@pytest.mark.parametrize("kernel", ["exp", "gaussian-B3"])
def test_cu_seqlens_equals_per_sequence_calls(kernel, mode):
    op = partial(softmax_attn, mode=mode, **KERNELS[kernel])
    assert_packed_equals_per_sequence(op, [0, 1, 13, 13, 31], T=31, V=5)


# --- key_mask: masked pairs leave every regression but their own query's ---------------------------------------


@pytest.mark.parametrize("mode", ["reference", "recurrent", "chunk"])
def test_all_true_key_mask_equals_no_key_mask(mode):
    inputs = kv_cache_inputs(2, 11, 2, 4, 3, 5, torch.float64)
    op = partial(softmax_attn, mode=mode)
    expected = run_with_grads(op, inputs)
    all_true = torch.ones(2, 5 + 11, dtype=torch.bool)  # [B, S + T]
    assert_all_close(run_with_grads(op, {**inputs, "key_mask": all_true}), expected, "all-True key_mask")


@pytest.mark.parametrize("mode", ["reference", "recurrent", "chunk"])
def test_masked_pairs_equal_removed_pairs_with_grads(mode):
    op = partial(softmax_attn, mode=mode)
    assert_masked_pairs_equal_removed(op)


@pytest.mark.parametrize("kernel", ["exp", "gaussian-B3"])
@pytest.mark.parametrize("shape", [pytest.param((2, 23, 2, 4, 3, 0), id="B2-T23-H2-K4-V3-S0"),
                                   pytest.param((2, 17, 2, 4, 3, 6), id="B2-T17-H2-K4-V3-S6")])
def test_forms_agree_with_a_random_key_mask(shape, kernel):
    B, T, *_, S = shape
    inputs = kv_cache_inputs(*shape, torch.float64)
    inputs["key_mask"] = torch.rand(B, S + T, generator=torch.Generator().manual_seed(7)) > 0.3  # [B, S + T]
    assert_forms_agree(partial(softmax_attn, **KERNELS[kernel]), inputs, chunk_size=16)


def _exp_weights(q, k, scale):
    """exp(scale k_i.q_t) built directly, causal: [B, H, T, T]."""
    s = torch.exp(scale * torch.einsum("bthk,bihk->bhti", q, k))
    return s.tril()


def test_T16_nadaraya_watson_is_softmax_attention_with_exp_similarity():
    q, k, v = random_qkv(2, 19, 3, 8, 4)
    s = _exp_weights(q, k, 8 ** -0.5)  # s(k_i, q_t) = exp(k_i.q_t / sqrt(K))
    nw = torch.einsum("bhti,bihv->bthv", s, v) / s.sum(-1).transpose(1, 2).unsqueeze(-1)  # eq. (50)
    for mode in ("reference", "recurrent", "chunk"):
        assert_close(softmax_attn(q, k, v, mode=mode)[0], nw, f"{mode} vs eq. (50)")
    assert_close(attention_weights(q, k), s / s.sum(-1, keepdim=True), "attention_weights")


def test_T16_nadaraya_watson_is_the_weighted_constant_regression_argmin():
    B, T, H, K, V = 1, 11, 2, 4, 3
    q, k, v = random_qkv(B, T, H, K, V)
    w = attention_weights(q, k)  # [B, H, T, T]
    o = softmax_attn(q, k, v)[0]
    for t in range(T):
        for h in range(H):
            sw = w[0, h, t, :t + 1].sqrt().unsqueeze(-1)  # [t + 1, 1]
            # argmin_m sum_i w_i ||v_i - m||^2: least squares with design sqrt(w_i) * 1 and targets sqrt(w_i) v_i
            m = torch.linalg.lstsq(sw, sw * v[0, :t + 1, h]).solution  # [1, V]
            assert_close(o[0, t, h], m[0], f"t={t} h={h}")


def _unit(x):
    return x / x.norm(dim=-1, keepdim=True)


@pytest.mark.parametrize("mode", ["reference", "recurrent", "chunk"])
def test_T17_unit_norm_keys_make_softmax_a_gaussian_kernel_regressor(mode):
    B, T, H, K, V = 2, 21, 2, 16, 4
    q, k, v = random_qkv(B, T, H, K, V)
    q = q * torch.rand(B, T, H, 1, dtype=q.dtype, generator=torch.Generator().manual_seed(3)) * 5  # any query norm
    k = _unit(k)
    softmax = softmax_attn(q, k, v, scale=1 / math.sqrt(K), mode=mode)[0]
    gaussian = softmax_attn(q, k, v, bandwidth=2 * math.sqrt(K), mode=mode)[0]  # eq. (51): B = 2 sqrt(K)
    assert_close(softmax, gaussian, "softmax(1/sqrt(K)) vs Gaussian(B=2 sqrt(K))")
    for tau in (0.3, 2.5):  # temperature tau <-> B = 2 tau
        assert_close(softmax_attn(q, k, v, scale=1 / tau, mode=mode)[0],
                     softmax_attn(q, k, v, bandwidth=2 * tau, mode=mode)[0], f"tau={tau}")


def test_T17_qk_norm_softmax_equals_gaussian_regression_on_normalised_inputs():
    B, T, H, K, V = 1, 17, 3, 8, 5
    q, k, v = random_qkv(B, T, H, K, V)
    qk_norm = softmax_attn(q, k, v, qk_norm=True)[0]
    assert_close(qk_norm, softmax_attn(_unit(q), _unit(k), v, bandwidth=2 * math.sqrt(K))[0], "QK-norm")


def test_T17_without_unit_norm_keys_softmax_is_not_the_gaussian_regressor():
    """The inner-product kernel is not a function of ||k - q|| ("not a proper local regressor", eq. 51)."""
    B, T, H, K, V = 1, 17, 2, 8, 4
    q, k, v = random_qkv(B, T, H, K, V)
    k = k * torch.linspace(0.2, 3.0, T, dtype=k.dtype).view(1, T, 1, 1)  # unequal key norms
    softmax = attention_weights(q, k, scale=1 / math.sqrt(K))
    gaussian = attention_weights(q, k, bandwidth=2 * math.sqrt(K))
    assert (softmax - gaussian).abs().max() > 0.1


def test_gaussian_bandwidth_is_exact_for_keys_of_any_norm():
    B, T, H, K, V, bandwidth = 2, 15, 2, 6, 3, 4.0
    q, k, v = random_qkv(B, T, H, K, V)
    k = k * torch.linspace(0.1, 4.0, T, dtype=k.dtype).view(1, T, 1, 1)
    sq_dist = (k.unsqueeze(1) - q.unsqueeze(2)).pow(2).sum(-1)  # [B, T, T, H]: ||k_i - q_t||^2 at [b, t, i, h]
    s = torch.exp(-sq_dist / bandwidth).permute(0, 3, 1, 2).tril()  # [B, H, T, T]
    w = s / s.sum(-1, keepdim=True)
    assert_close(attention_weights(q, k, bandwidth=bandwidth), w, "weights")
    expected = torch.einsum("bhti,bihv->bthv", w, v)
    for mode in ("reference", "recurrent", "chunk"):
        assert_close(softmax_attn(q, k, v, bandwidth=bandwidth, mode=mode)[0], expected, mode)


def test_chunk_size_does_not_change_the_result():
    inputs = kv_cache_inputs(1, 40, 2, 4, 4, 3, torch.float64)
    o16 = softmax_attn(**inputs, chunk_size=16)[0]
    assert_close(softmax_attn(**inputs, chunk_size=128)[0], o16, "o")


def test_low_precision_inputs_compute_in_float32():
    inputs = kv_cache_inputs(1, 9, 2, 8, 8, 2, torch.bfloat16)
    o, state = softmax_attn(**inputs, output_final_state=True)
    assert o.dtype == torch.bfloat16 and state.k.dtype == torch.float32
    expected = softmax_attn(**{n: KVState(*(s.float() for s in x)) if isinstance(x, KVState) else x.float()
                               for n, x in inputs.items()}, mode="reference")[0]
    assert (o.float() - expected).abs().max() < 2e-2  # bf16 rounding of the output only


B, T, H, K, V = 2, 6, 2, 4, 3
BAD = {
    **nonparametric_bad_inputs(B, T, H, K, V, key_mask=True),
    "scale and bandwidth": ({"scale": 0.5, "bandwidth": 2.0}, "bandwidth"),
    "negative bandwidth": ({"bandwidth": -1.0}, "bandwidth"),
    "zero bandwidth": ({"bandwidth": 0.0}, "bandwidth"),
    "scale a tensor": ({"scale": torch.tensor(1.0)}, "scale"),
    "qk_norm not a bool": ({"qk_norm": 1}, "qk_norm"),
}


@pytest.mark.parametrize("case", list(BAD))
def test_bad_input_raises_value_error_naming_the_argument(case):
    override, name = BAD[case]
    args = dict(zip("qkv", random_qkv(B, T, H, K, V, dtype=torch.float32), strict=True))
    args.update(override)
    with pytest.raises(ValueError, match=name):
        softmax_attn(args.pop("q"), args.pop("k"), args.pop("v"), **args)


def test_cu_seqlens_takes_no_state_and_attention_weights_validate():
    q, k, v = random_qkv(1, T, H, K, V)
    cache = KVState(torch.zeros(1, 2, H, K, dtype=q.dtype), torch.zeros(1, 2, H, V, dtype=q.dtype))
    with pytest.raises(ValueError, match="cu_seqlens"):
        softmax_attn(q, k, v, cu_seqlens=torch.tensor([0, 2, T]), initial_state=cache)
    with pytest.raises(ValueError, match="k must have shape"):
        attention_weights(q, k[:, :-1])
    with pytest.raises(ValueError, match="bandwidth"):
        attention_weights(q, k, scale=1.0, bandwidth=1.0)
