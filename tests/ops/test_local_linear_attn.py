"""local_linear_attn and local_polynomial: *Test-time regression* (arXiv:2501.12352), Sec. 4
Vignette 4, eqs. (48)-(54).

- reference == recurrent == chunk (outputs, final KVState, every gradient) for the exponential kernel, the
  Gaussian kernel and QK-norm. float64 to 1e-10. float32 to relative RMS 1e-4 on N(0, 1) data with ridge = 0.1:
  the error of every form grows like eps * cond(C_kk + ridge I), and at the default ridge 1e-3 with t <= K the
  float32 *reference* (an uncentred (1 + K)-dim system) is itself ~3e-4 off float64 (the chunk form ~6e-5).
- split + carried KVState, token-by-token decoding and cu_seqlens all equal one call.
- eq. (52) == eq. (54) == the centred closed form; affine maps reproduced (p = 1), constants only
  (p = 0); p = 2 reproduces quadratic maps.
- the chunk form never allocates a [T, T, K] tensor.

Legend: B batch, T time, H heads, K key dim, V value dim, S cached pairs, C chunk size.
"""

from functools import partial

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given
from hypothesis import strategies as st
from torch.profiler import ProfilerActivity, profile

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
    rel_rms,
    run_with_grads,
)
from regmem.ops import local_linear_attn, local_polynomial

KERNELS = {
    "exp": {},
    "exp-scale0.5": {"scale": 0.5},
    "gauss-B4": {"bandwidth": 4.0},
    "qknorm": {"qk_norm": True},
    "qknorm-gauss-B0.5": {"qk_norm": True, "bandwidth": 0.5},
}
SHAPES = [
    pytest.param((2, 37, 2, 6, 5, 4, 16), id="B2-T37-H2-K6-V5-S4-C16"),
    pytest.param((1, 64, 2, 8, 3, 0, 32), id="B1-T64-H2-K8-V3-S0-C32"),
    pytest.param((1, 1, 1, 4, 3, 3, 64), id="B1-T1-H1-K4-V3-S3-C64"),
]
DTYPES = [pytest.param(torch.float64, id="f64"), pytest.param(torch.float32, id="f32")]
RIDGE = {torch.float64: 1e-3, torch.float32: 0.1}  # float32: a well-conditioned C_kk + ridge I (module docstring)


def _gen(seed):
    return torch.Generator().manual_seed(seed)




# --- forms agree ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("kernel", list(KERNELS))
@pytest.mark.parametrize("shape", SHAPES)
def test_forms_match_reference_with_grads(shape, kernel, dtype):
    *dims, C = shape
    op = partial(local_linear_attn, ridge=RIDGE[dtype], **KERNELS[kernel])
    assert_forms_agree(op, kv_cache_inputs(*dims, dtype=dtype), chunk_size=C)


@given(
    B=st.integers(1, 2), T=st.integers(1, 40), H=st.integers(1, 2), K=st.integers(1, 6), V=st.integers(1, 6),
    S=st.sampled_from([0, 3]), chunk_size=st.sampled_from([8, 16, 32]), kernel=st.sampled_from(list(KERNELS)),
)
def test_forms_match_reference_property(B, T, H, K, V, S, chunk_size, kernel):
    assert_forms_agree(partial(local_linear_attn, **KERNELS[kernel]), kv_cache_inputs(B, T, H, K, V, S),
                       chunk_size=chunk_size)


def test_chunk_size_does_not_change_the_result():
    inputs = kv_cache_inputs(2, 50, 2, 5, 4, 3)
    expected = run_with_grads(partial(local_linear_attn, chunk_size=64), inputs)
    for C in (1, 8, 16):
        assert_all_close(run_with_grads(partial(local_linear_attn, chunk_size=C), inputs), expected, f"C={C}")


# --- state, decoding, varlen ---------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", ["reference", "recurrent", "chunk"])
def test_split_and_carried_state_equal_one_call(mode):
    inputs = kv_cache_inputs(2, 30, 2, 4, 3, 0)
    assert_split_equals_one_call(partial(local_linear_attn, mode=mode, chunk_size=8), inputs, cuts=[1, 9, 17])


@pytest.mark.parametrize("prefill", [0, 7])
def test_decoding_token_by_token_equals_one_call(prefill):
    inputs = kv_cache_inputs(2, 20, 2, 4, 3, 2)
    cache = inputs.pop("initial_state")
    assert_decoding_equals_full(partial(local_linear_attn, bandwidth=3.0), inputs, prefill=prefill,
                                initial_state=cache, chunk_size=8)


@pytest.mark.parametrize("mode", ["reference", "recurrent", "chunk"])
def test_cu_seqlens_equals_one_call_per_sequence(mode):
    op = partial(local_linear_attn, mode=mode, chunk_size=8, qk_norm=True)
    assert_packed_equals_per_sequence(op, [0, 5, 5, 17, 30], T=30)


# --- key_mask: masked pairs leave every regression but their own query's ---------------------------------------


@pytest.mark.parametrize("mode", ["reference", "recurrent", "chunk"])
def test_all_true_key_mask_equals_no_key_mask(mode):
    inputs = kv_cache_inputs(2, 11, 2, 4, 3, 5, torch.float64)
    op = partial(local_linear_attn, mode=mode, chunk_size=8)
    expected = run_with_grads(op, inputs)
    all_true = torch.ones(2, 5 + 11, dtype=torch.bool)  # [B, S + T]
    assert_all_close(run_with_grads(op, {**inputs, "key_mask": all_true}), expected, "all-True key_mask")


@pytest.mark.parametrize("mode", ["reference", "recurrent", "chunk"])
def test_masked_pairs_equal_removed_pairs_with_grads(mode):
    op = partial(local_linear_attn, mode=mode, chunk_size=8)
    assert_masked_pairs_equal_removed(op)


@pytest.mark.parametrize("kernel", ["exp", "qknorm"])
@pytest.mark.parametrize("shape", [pytest.param((2, 23, 2, 4, 3, 0), id="B2-T23-H2-K4-V3-S0"),
                                   pytest.param((2, 17, 2, 4, 3, 6), id="B2-T17-H2-K4-V3-S6")])
def test_forms_agree_with_a_random_key_mask(shape, kernel):
    B, T, *_, S = shape
    inputs = kv_cache_inputs(*shape, torch.float64)
    inputs["key_mask"] = torch.rand(B, S + T, generator=torch.Generator().manual_seed(7)) > 0.3  # [B, S + T]
    assert_forms_agree(partial(local_linear_attn, **KERNELS[kernel]), inputs, chunk_size=8)


# --- eq. 52 == eq. 54 == the centred closed form --------------------------------------------------------------


def _weighted_least_squares(q, k, v, t, ridge, scale):
    """Eq. (52) for query t of batch 0, head 0, written out: rows [1, (k_i - q_t)^T], W = diag(softmax weights).
    Returns (M0 [V], M1 [V, K], w [t + 1], d [t + 1, K])."""
    qt, ks, vs = q[0, t, 0], k[0, :t + 1, 0], v[0, :t + 1, 0]
    w = torch.softmax(scale * ks @ qt, dim=0)  # [t + 1]
    d = ks - qt  # [t + 1, K]
    X = torch.cat([torch.ones(t + 1, 1, dtype=q.dtype), d], dim=1)  # [t + 1, 1 + K]
    penalty = torch.diag(torch.tensor([0.0] + [ridge] * d.shape[1], dtype=q.dtype))
    M = torch.linalg.solve(X.T @ (w[:, None] * X) + penalty, X.T @ (w[:, None] * vs))  # [1 + K, V]
    return M[0], M[1:].T, w, d


@pytest.mark.parametrize("ridge", [1e-3, 0.5])
def test_t18_eq52_equals_eq54_equals_centred_closed_form(ridge):
    q, k, v = random_qkv(1, 12, 1, 4, 3, seed=5)
    scale = 4 ** -0.5
    o_chunk, _ = local_linear_attn(q, k, v, ridge=ridge, chunk_size=4)
    o_reference, _ = local_linear_attn(q, k, v, ridge=ridge, mode="reference")
    for t in range(12):
        M0, M1, w, d = _weighted_least_squares(q, k, v, t, ridge, scale)
        v_bar, d_bar = w @ v[0, :t + 1, 0], w @ d  # [V], [K]
        assert_close(v_bar - M1 @ d_bar, M0, f"eq. 54 at t={t}")
        assert_close(o_reference[0, t, 0], M0, f"reference (eq. 52) at t={t}")
        assert_close(o_chunk[0, t, 0], M0, f"chunk (centred closed form) at t={t}")


# --- what each degree reproduces exactly -------------------------------------------------------------------------


def _affine_data(B=2, T=40, H=2, K=5, V=3):
    q, k, _ = random_qkv(B, T, H, K, V, seed=11)
    g = _gen(12)
    A, c = torch.randn(H, V, K, generator=g, dtype=torch.float64), torch.randn(H, V, generator=g, dtype=torch.float64)
    return q, k, A, c


@pytest.mark.parametrize("mode", ["reference", "recurrent", "chunk"])
def test_t19_local_linear_reproduces_affine_maps(mode):
    q, k, A, c = _affine_data()
    K = q.shape[-1]
    v = torch.einsum("hvk,bthk->bthv", A, k) + c  # v_i = A k_i + c
    o, _ = local_linear_attn(q, k, v, ridge=1e-12, scale=0.3, mode=mode, chunk_size=16)
    # the residual is the ridge bias A ridge (C_kk + ridge I)^{-1} (q - k_bar) = O(ridge), here ~2e-10
    expected = torch.einsum("hvk,bthk->bthv", A, q) + c
    torch.testing.assert_close(o[:, K + 1:], expected[:, K + 1:], rtol=0, atol=1e-9)


def test_t19_softmax_does_not_reproduce_affine_maps_but_reproduces_constants():
    q, k, A, c = _affine_data()
    v = torch.einsum("hvk,bthk->bthv", A, k) + c
    o = local_polynomial.reference(q, k, v, degree=0, scale=0.3)[0]
    error = (o - (torch.einsum("hvk,bthk->bthv", A, q) + c))[:, 6:].abs().max()
    assert error > 1.0, f"softmax attention reproduced an affine map (max error {error:.3g})"
    constant = c.expand_as(v)
    torch.testing.assert_close(local_polynomial.reference(q, k, constant, degree=0)[0], constant, rtol=0, atol=1e-12)
    torch.testing.assert_close(local_linear_attn(q, k, constant)[0], constant, rtol=0, atol=1e-12)


def test_qk_norm_regresses_in_the_normalised_key_space():
    q, k, A, c = _affine_data()
    v = torch.einsum("hvk,bthk->bthv", A, F.normalize(k, dim=-1)) + c  # affine in k / ||k||
    o, _ = local_linear_attn(q, k, v, ridge=1e-12, qk_norm=True, scale=1.0)
    expected = torch.einsum("hvk,bthk->bthv", A, F.normalize(q, dim=-1)) + c
    torch.testing.assert_close(o[:, 6:], expected[:, 6:], rtol=0, atol=1e-8)


# --- local_polynomial: degrees 0, 1, 2 ------------------------------------------------------------------


def test_degree0_is_softmax_attention_and_gaussian_nadaraya_watson():
    q, k, v = random_qkv(2, 25, 2, 4, 3, seed=3)
    to_bhtd = partial(torch.movedim, source=1, destination=2)  # [B, T, H, D] -> [B, H, T, D]
    sdpa = F.scaled_dot_product_attention(to_bhtd(q), to_bhtd(k), to_bhtd(v), is_causal=True, scale=0.7)
    assert_close(local_polynomial.reference(q, k, v, degree=0, scale=0.7)[0], sdpa.transpose(1, 2), "exp kernel")
    # exp(-||k_i - q_t||^2 / B) normalised over i <= t, written out
    sq_dist = (q.unsqueeze(2) - k.unsqueeze(1)).pow(2).sum(-1)  # [B, T, T, H]
    causal = torch.ones(25, 25, dtype=torch.bool).tril()[None, :, :, None]
    s = torch.exp(-sq_dist / 3.0) * causal  # [B, T, T, H]
    nw = torch.einsum("btih,bihv->bthv", s, v) / s.sum(2).unsqueeze(-1)
    assert_close(local_polynomial.reference(q, k, v, degree=0, bandwidth=3.0)[0], nw, "Gaussian kernel")


@pytest.mark.parametrize("kernel", ["exp", "gauss-B4", "qknorm"])
def test_degree1_is_local_linear_attn(kernel):
    q, k, v = random_qkv(2, 25, 2, 4, 3, seed=4)
    expected, _ = local_linear_attn(q, k, v, mode="chunk", chunk_size=8, ridge=0.01, **KERNELS[kernel])
    assert_close(local_polynomial.reference(q, k, v, degree=1, ridge=0.01, **KERNELS[kernel])[0], expected, "o")


def test_degree2_reproduces_quadratic_maps_and_degree1_does_not():
    B, T, H, K, V = 2, 40, 2, 3, 2  # 1 + 3 + 6 = 10 design columns
    q, k, _ = random_qkv(B, T, H, K, V, seed=6)
    g = _gen(7)
    Q, A = torch.randn(H, V, K, K, generator=g, dtype=torch.float64), torch.randn(H, V, K, generator=g,
                                                                                   dtype=torch.float64)

    def f(x):  # [B, T, H, K] -> [B, T, H, V], a quadratic map
        return torch.einsum("hvxy,bthx,bthy->bthv", Q, x, x) + torch.einsum("hvk,bthk->bthv", A, x) + 1.0

    o2 = local_polynomial.reference(q, k, f(k), degree=2, ridge=1e-14, scale=0.3)[0]
    torch.testing.assert_close(o2[:, 20:], f(q)[:, 20:], rtol=0, atol=1e-9)  # residual O(ridge)
    o1 = local_polynomial.reference(q, k, f(k), degree=1, ridge=1e-14, scale=0.3)[0]
    assert (o1 - f(q))[:, 20:].abs().max() > 1.0


# --- bounded memory --------------------------------------------------------------------------------------------


def test_chunk_form_never_allocates_a_T_by_T_by_K_tensor():
    T, K, V = 1024, 16, 2
    q, k, v = (torch.randn(1, T, 1, D, generator=_gen(D)) for D in (K, K, V))
    with torch.no_grad(), profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        local_linear_attn(q, k, v, chunk_size=64)
    largest = max(event.cpu_memory_usage for event in prof.events())
    # the largest intermediates are the pair features [T, F] (F = 1 + K + K(K + 1)/2 + V + V K) and one block's
    # [C, T] logits, each below 1 MiB here; a [T, T, K] float32 tensor would be 64 MiB
    assert largest < T * T * K * 4 / 32, f"largest allocation {largest} bytes"


def test_chunk_form_runs_at_length_4096_without_grad():
    T, K = 4096, 32  # a [T, T, K] float32 tensor would be 2 GiB
    q, k, v = (torch.randn(1, T, 1, D, generator=_gen(D)) for D in (K, K, 1))
    with torch.no_grad():
        o, _ = local_linear_attn(q, k, v)
    assert o.shape == (1, T, 1, 1) and torch.isfinite(o).all()


def test_training_saves_no_T_by_T_tensor():
    T, K, V = 1024, 4, 1
    q, k, v = (torch.randn(1, T, 1, D, generator=_gen(D), requires_grad=True) for D in (K, K, V))
    saved = []
    with torch.autograd.graph.saved_tensors_hooks(lambda x: saved.append(x.numel()) or x, lambda x: x):
        o, _ = local_linear_attn(q, k, v, chunk_size=32)
    # the backward recomputes each block's weights: autograd holds O(T F + T K^2) (F = 20; ~135 T elements in
    # all), where saving the weights would hold T (T + 1) / 2
    assert sum(saved) < T * T / 4, f"autograd saved {sum(saved)} elements"
    o.sum().backward()
    assert all(torch.isfinite(x.grad).all() for x in (q, k, v))


@pytest.mark.parametrize("heads_per_group", [1, 3])
def test_heads_fitted_a_group_at_a_time_equal_all_at_once(monkeypatch, heads_per_group):
    """Past FIT_BYTES the heads go through the fit a group at a time under activation checkpointing (groups of 1,
    and of 3 then 1 of 4 heads): same outputs, states and gradients, and autograd keeps only the group's inputs."""
    from regmem.ops.nonparametric import chunk

    B, T, H, K, V, S = 2, 37, 4, 5, 3, 4
    inputs = {**kv_cache_inputs(B, T, H, K, V, S), "key_mask": torch.rand(B, S + T, generator=_gen(5)) > 0.3}
    op = partial(local_linear_attn, ridge=1e-3, chunk_size=16)
    expected = run_with_grads(op, inputs)
    per_head = B * (T + S + T) * (1 + K + K * (K + 1) // 2 + V + V * K) * 8
    monkeypatch.setattr(chunk, "FIT_BYTES", heads_per_group * per_head)
    assert_all_close(run_with_grads(op, inputs), expected, f"groups of {heads_per_group} heads")

    q, k, v = (x.detach().clone().requires_grad_() for x in random_qkv(1, 256, 4, 8, 8))
    saved = []
    with torch.autograd.graph.saved_tensors_hooks(lambda x: saved.append(x.numel()) or x, lambda x: x):
        local_linear_attn(q, k, v, chunk_size=32)
    F_width = 1 + 8 + 36 + 8 + 64
    assert sum(saved) < 256 * 4 * F_width  # below one [T, F] tensor of all heads: the moments are not kept


def test_float32_chunk_stays_accurate_for_keys_far_from_the_origin():
    q, k, v = (x + 10.0 for x in random_qkv(1, 256, 2, 16, 16, seed=8))  # mean 10, spread 1: E[kk^T] cancels
    expected, _ = local_linear_attn(q, k, v, chunk_size=64)
    actual, _ = local_linear_attn(q.float(), k.float(), v.float(), chunk_size=64)
    error = rel_rms(actual, expected)
    assert error < 5e-4, f"float32 relative RMS error {error:.3g} (uncentred moments give ~1e-2)"


def test_half_precision_inputs_compute_in_float32_and_return_their_dtype():
    q, k, v = random_qkv(1, 20, 2, 4, 3, seed=9)
    o, state = local_linear_attn(q.bfloat16(), k.bfloat16(), v.bfloat16(), output_final_state=True)
    assert o.dtype == torch.bfloat16 and state.k.dtype == torch.float32
    expected, _ = local_linear_attn(*(x.bfloat16().float() for x in (q, k, v)))
    torch.testing.assert_close(o.float(), expected, rtol=0, atol=2e-2)  # one bfloat16 rounding of the output


# --- validation ---------------------------------------------------------------------------------------------------

B, T, H, K, V = 2, 6, 2, 4, 3


def _call(op=local_linear_attn, **override):
    args = {**kv_cache_inputs(B, T, H, K, V, 0, dtype=torch.float32), **override}
    return op(**args)


BAD = {
    **nonparametric_bad_inputs(B, T, H, K, V, key_mask=True),
    "ridge zero": ({"ridge": 0.0}, "ridge"),
    "ridge negative": ({"ridge": -1e-3}, "ridge"),
    "ridge a tensor": ({"ridge": torch.tensor(1e-3)}, "ridge"),
    "ridge nan": ({"ridge": float("nan")}, "ridge"),
    "scale and bandwidth": ({"scale": 1.0, "bandwidth": 2.0}, "bandwidth"),
    "bandwidth zero": ({"bandwidth": 0.0}, "bandwidth"),
    "qk_norm not a bool": ({"qk_norm": 1}, "qk_norm"),
}


@pytest.mark.parametrize("case", list(BAD))
def test_bad_input_raises_value_error_naming_the_argument(case):
    override, name = BAD[case]
    with pytest.raises(ValueError, match=name):
        _call(**override)


BAD_POLYNOMIAL = {
    "degree 3": ({"degree": 3}, "degree"),
    "degree -1": ({"degree": -1}, "degree"),
    "degree a bool": ({"degree": True}, "degree"),
    "degree 2 with K > 16": ({"q": torch.randn(B, T, H, 17), "k": torch.randn(B, T, H, 17)}, "K must be <= 16"),
    "ridge zero": ({"ridge": 0}, "ridge"),
    "scale and bandwidth": ({"scale": 1.0, "bandwidth": 2.0}, "bandwidth"),
    "k mismatched K": ({"k": torch.randn(B, T, H, K + 1)}, "k"),
}


@pytest.mark.parametrize("case", list(BAD_POLYNOMIAL))
def test_local_polynomial_bad_input_raises_value_error_naming_the_argument(case):
    override, name = BAD_POLYNOMIAL[case]
    with pytest.raises(ValueError, match=name):
        _call(local_polynomial.reference, **override)


def test_local_polynomial_solves_with_two_threads():
    """The fit's system is symmetric positive definite and is solved by Cholesky: an LU solve of this batch ([1, 4,
    64, 153, 153]) returned invalid pivots with 2 MKL threads and raised (it broke `regmem showcase`)."""
    from regmem.ops.examples import example_of

    _, example = example_of("local_polynomial")
    tokens, options, state = example.make(1, 64, 4, 16, 16, torch.float32, torch.Generator().manual_seed(0))
    threads = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        with torch.no_grad():
            o, _ = local_polynomial(**tokens, **options, initial_state=state, mode="chunk")
    finally:
        torch.set_num_threads(threads)
    assert torch.isfinite(o).all()


def test_the_solve_reads_its_status_only_where_values_are_checked():
    """centred_solve runs torch.linalg.solve_ex (no host sync on a GPU) and raises on a singular system only under
    value checks: moments with C_kk = -ridge (K = 1) make C_kk + ridge I exactly singular."""
    from regmem.ops import value_checks
    from regmem.ops.nonparametric.chunk import centred_solve

    ridge = 0.5
    moments = torch.tensor([[1.0, 0.0, -ridge, 2.0, 3.0]], dtype=torch.float64)  # m0, k_bar, E[kk], v_bar, E[vk]
    q = torch.ones(1, 1, dtype=torch.float64)
    with value_checks(True), pytest.raises(ValueError, match="singular"):
        centred_solve(moments, q, 1, 1, ridge)
    with value_checks(False):
        centred_solve(moments, q, 1, 1, ridge)  # the status is never read: no error, whatever the values
    fine = torch.tensor([[1.0, 0.0, 1.0, 2.0, 3.0]], dtype=torch.float64)  # C_kk = 1: o = 2 + 3 * 1 / 1.5
    torch.testing.assert_close(centred_solve(fine, q, 1, 1, ridge), torch.tensor([[4.0]], dtype=torch.float64))
