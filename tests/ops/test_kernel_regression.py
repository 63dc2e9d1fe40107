"""kernel_regression, the exact kernel ridge regression memory of *Test-time regression* (arXiv:2501.12352,
Sec. 4 Vignette 4, eqs. 42-47): reference (per-prefix solves) == recurrent (growing
Cholesky) == chunk (one Cholesky) with every gradient, KV-cache carrying, decoding, varlen packing, interpolation,
the k(K, K) ~ I limit (unnormalised softmax attention), dual == primal ridge regression, and validation.

Shapes: q, k: [B, T, H, K]; v: [B, T, H, V]; cache KVState(k [B, S, H, K], v [B, S, H, V]).
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
    assert_packed_equals_per_sequence,
    assert_split_equals_one_call,
    kv_cache_inputs,
    nonparametric_bad_inputs,
    random_qkv,
    rel_rms,
    run_with_grads,
)
from regmem.ops import KVState, kernel_regression, softmax_attn


def _poly2(a, b):
    """A positive semi-definite callable kernel: (1 + a.b / K)^2, Gram [..., n, m]."""
    return (1 + a @ b.transpose(-1, -2) / a.shape[-1]) ** 2


KERNELS = {
    "exp": {"kernel": "exp"},
    "exp-scale0.2": {"kernel": "exp", "scale": 0.2},
    "gaussian-B4": {"kernel": "gaussian", "bandwidth": 4.0},
    "linear": {"kernel": "linear"},
    "callable-poly2": {"kernel": _poly2},
}
DTYPES = [pytest.param(torch.float64, id="f64"), pytest.param(torch.float32, id="f32")]
# float32 runs use ridge 0.1: float32 factorisations lose ~1e-7 * cond(Gram + ridge I), and with ridge 1e-3 a
# rank-deficient Gram (linear kernel, P > K) has cond ~ 1e5; ridge 0.1 keeps cond ~ 1e3. float64 uses the default.
RIDGE = {torch.float64: 1e-3, torch.float32: 0.1}
SHAPES = [  # (B, T, H, K, V, S)
    pytest.param((2, 13, 2, 5, 3, 0), id="B2-T13-H2-K5-V3-S0"),
    pytest.param((1, 11, 2, 4, 6, 5), id="B1-T11-H2-K4-V6-S5"),
    pytest.param((2, 1, 1, 3, 2, 3), id="B2-T1-H1-K3-V2-S3"),
]




@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("kernel", list(KERNELS))
def test_forms_match_reference_with_grads(kernel, shape, dtype):
    op = partial(kernel_regression, ridge=RIDGE[dtype], **KERNELS[kernel])
    assert_forms_agree(op, kv_cache_inputs(*shape, dtype), chunk_size=16)


@given(B=st.integers(1, 2), T=st.integers(1, 12), H=st.integers(1, 2), K=st.integers(1, 6), V=st.integers(1, 6),
       S=st.integers(0, 4), kernel=st.sampled_from(list(KERNELS)))
def test_chunk_and_recurrent_match_reference_property(B, T, H, K, V, S, kernel):
    inputs = kv_cache_inputs(B, T, H, K, V, S, torch.float64)
    op = partial(kernel_regression, **KERNELS[kernel])
    expected = run_with_grads(partial(op, mode="reference"), inputs)
    assert_all_close(run_with_grads(partial(op, mode="chunk"), inputs), expected, "chunk vs reference")
    assert_all_close(run_with_grads(partial(op, mode="recurrent"), inputs), expected, "recurrent vs reference")


@pytest.mark.parametrize("mode", ["reference", "recurrent", "chunk"])
def test_split_and_carry_cache_equals_one_call(mode):
    tokens = kv_cache_inputs(2, 17, 2, 4, 3, 0, torch.float64)
    op = partial(kernel_regression, kernel="gaussian", bandwidth=3.0, mode=mode)
    assert_split_equals_one_call(op, tokens, cuts=[1, 6, 12])


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("prefill", [0, 5])
def test_decoding_token_by_token_equals_one_call(prefill, dtype):
    inputs = kv_cache_inputs(2, 12, 2, 4, 3, 3, dtype)
    state = inputs.pop("initial_state")
    op = partial(kernel_regression, ridge=RIDGE[dtype])
    assert_decoding_equals_full(op, inputs, prefill=prefill, initial_state=state)


@pytest.mark.parametrize("mode", ["reference", "recurrent", "chunk"])
@pytest.mark.parametrize("kernel", ["exp", "linear"])
def test_cu_seqlens_equals_per_sequence_calls(kernel, mode):
    op = partial(kernel_regression, mode=mode, **KERNELS[kernel])
    assert_packed_equals_per_sequence(op, [0, 1, 8, 8, 19], T=19)


@pytest.mark.parametrize("mode", ["reference", "recurrent", "chunk"])
def test_T15_exact_kernel_regression_interpolates_the_stored_pairs(mode):
    """ridge -> 0 with distinct keys: m_t(k_i) = v_i for every i <= t (eq. 43 with k(K, K) invertible)."""
    B, S, H, K, V, ridge = 2, 9, 2, 3, 4, 1e-10
    k, v = random_qkv(B, 2 * S, H, K, V)[1:]
    op = partial(kernel_regression, kernel="gaussian", bandwidth=2.0, ridge=ridge, mode=mode)
    # q = k: o_t = m_t(k_t) = v_t
    assert (op(k, k, v)[0] - v).abs().max() < 1e3 * ridge
    # a cache of S pairs, then S new pairs whose queries are the cached keys: o_j = m_{S+j}(k_j) = v_j
    cache = KVState(k[:, :S], v[:, :S])
    o = op(k[:, :S], k[:, S:], v[:, S:], initial_state=cache)[0]
    # the error is ridge * (G + ridge I)^{-1} v, below ridge ||v|| / lambda_min(G); lambda_min(G) > 1e-2 here
    assert (o - v[:, :S]).abs().max() < 1e3 * ridge


def test_T15_unnormalised_softmax_attention_is_softmax_times_its_normaliser():
    """The k(K, K) = I approximation (eqs. 44-47): y_t = sum_{i<=t} v_i exp(k_i.q_t / sqrt(K)) = Z_t o_t^softmax."""
    B, T, H, K, V = 2, 15, 2, 8, 3
    q, k, v = random_qkv(B, T, H, K, V)
    s = torch.exp(torch.einsum("bthk,bihk->bthi", q, k) / math.sqrt(K))  # [B, T, H, T]
    s = s * torch.ones(T, T, dtype=s.dtype).tril().view(1, T, 1, T)  # i <= t
    unnormalised = torch.einsum("bthi,bihv->bthv", s, v)
    Z = s.sum(-1, keepdim=True)  # [B, T, H, 1]
    assert_close(Z * softmax_attn(q, k, v)[0], unnormalised, "Z * softmax_attn")


@pytest.mark.parametrize("mode", ["reference", "recurrent", "chunk"])
def test_T15_kernel_regression_tends_to_unnormalised_softmax_attention_as_the_gram_is_dropped(mode):
    """ridge * (k(K, K) + ridge I)^{-1} -> I as ridge -> inf, so ridge * o_t -> sum_i v_i exp(k_i.q_t / sqrt(K))."""
    B, T, H, K, V, ridge = 1, 12, 2, 8, 3, 1e9
    q, k, v = random_qkv(B, T, H, K, V)
    s = torch.exp(torch.einsum("bthk,bihk->bthi", q, k) / math.sqrt(K))  # [B, T, H, T]
    s = s * torch.ones(T, T, dtype=s.dtype).tril().view(1, T, 1, T)  # i <= t
    unnormalised = torch.einsum("bthi,bihv->bthv", s, v)
    o = kernel_regression(q, k, v, kernel="exp", ridge=ridge, mode=mode)[0]
    # Neumann series: the relative remainder is O(||k(K, K)|| / ridge) ~ 1e-7 for these inputs
    assert rel_rms(ridge * o, unnormalised) < 1e-6


@pytest.mark.parametrize("mode", ["reference", "recurrent", "chunk"])
def test_linear_kernel_is_ridge_regression_dual_equals_primal(mode):
    """V_p^T (K_p K_p^T + lambda I)^{-1} K_p q = q^T (K_p^T K_p + lambda I)^{-1} K_p^T V_p for every prefix p."""
    B, T, H, K, V, S, ridge = 2, 14, 2, 4, 3, 3, 0.05
    inputs = kv_cache_inputs(B, T, H, K, V, S, torch.float64)
    o = kernel_regression(**inputs, kernel="linear", ridge=ridge, mode=mode)[0]
    keys = torch.cat([inputs["initial_state"].k, inputs["k"]], dim=1).transpose(1, 2)  # [B, H, S + T, K]
    values = torch.cat([inputs["initial_state"].v, inputs["v"]], dim=1).transpose(1, 2)  # [B, H, S + T, V]
    for t in range(T):
        Kp, Vp = keys[:, :, :S + t + 1], values[:, :, :S + t + 1]
        M = torch.linalg.solve(Kp.transpose(-1, -2) @ Kp + ridge * torch.eye(K, dtype=Kp.dtype),
                               Kp.transpose(-1, -2) @ Vp)  # [B, H, K, V], the primal solution
        assert_close(o[:, t], torch.einsum("bhk,bhkv->bhv", inputs["q"][:, t], M), f"t={t}")


B, T, H, K, V = 2, 6, 2, 4, 3
BAD = {
    **nonparametric_bad_inputs(B, T, H, K, V, key_mask=False),
    "unknown kernel": ({"kernel": "laplace"}, "kernel"),
    "gaussian without bandwidth": ({"kernel": "gaussian"}, "bandwidth"),
    "negative bandwidth": ({"kernel": "gaussian", "bandwidth": -1.0}, "bandwidth"),
    "bandwidth with exp": ({"bandwidth": 2.0}, "bandwidth"),
    "scale and bandwidth": ({"kernel": "gaussian", "scale": 0.5, "bandwidth": 2.0}, "scale"),
    "scale with linear": ({"kernel": "linear", "scale": 0.5}, "scale"),
    "scale a tensor": ({"scale": torch.tensor(1.0)}, "scale"),
    "negative ridge": ({"ridge": -1e-3}, "ridge"),
    "zero ridge": ({"ridge": 0.0}, "ridge"),
    "callable wrong Gram shape": ({"kernel": lambda a, b: (a @ b.transpose(-1, -2)).sum(-1)}, "kernel"),
}


@pytest.mark.parametrize("case", list(BAD))
def test_bad_input_raises_value_error_naming_the_argument(case):
    override, name = BAD[case]
    args = dict(zip("qkv", random_qkv(B, T, H, K, V, dtype=torch.float32), strict=True))
    args.update(override)
    with pytest.raises(ValueError, match=name):
        kernel_regression(args.pop("q"), args.pop("k"), args.pop("v"), **args)
