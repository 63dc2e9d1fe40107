"""Mamba-1's selective scan (regmem/ops/ssm; arXiv:2312.00752, Algorithm 2): equal to a literal loop with its own
discretisation, the zero-order hold and its A -> 0 limit, "simple" as ZOH's first-order term; its forms agree in
every gradient (A, D and the initial state included, which the op-wide tests do not vary); it equals gated linear
attention with one head per channel (the computation its chunk form replaced), and with a scalar gate per channel
when A is constant along the state; its chunk form never builds a [B, T, D, N] tensor. The op-wide contract (forms,
gradients of the per-token inputs, state passing, varlen, bf16) is in test_every_op.py."""

import math
from functools import partial

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from helpers import DTYPES, assert_all_close, assert_close, run_with_grads
from regmem.ops import gated_linear_attn, selective_scan
from regmem.ops.ssm import zoh_input_weight


def _inputs(B=2, T=9, D=3, N=4, seed=0, f=torch.float64):
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(B, T, D, generator=gen, dtype=f)
    delta = torch.rand(B, T, D, generator=gen, dtype=f)
    A = -3 * torch.rand(D, N, generator=gen, dtype=f)
    Bm, C = torch.randn(B, T, N, generator=gen, dtype=f), torch.randn(B, T, N, generator=gen, dtype=f)
    return x, delta, A, Bm, C, torch.randn(D, generator=gen, dtype=f)


def _literal(x, delta, A, Bm, C, D, h0, discretization):
    """Element by element: Abar = exp(delta a), Bbar = (exp(delta a) - 1) / a * b (zoh) or delta * b."""
    Bsz, T, Dch = x.shape
    N = A.shape[1]
    y = torch.zeros_like(x)
    h = h0.clone()
    for b in range(Bsz):
        for t in range(T):
            for d in range(Dch):
                for n in range(N):
                    dt, a = float(delta[b, t, d]), float(A[d, n])
                    if discretization == "simple":
                        weight = dt
                    else:
                        weight = dt if a == 0 else (math.exp(dt * a) - 1) / a
                    h[b, d, n] = math.exp(dt * a) * h[b, d, n] + weight * float(Bm[b, t, n]) * float(x[b, t, d])
                y[b, t, d] = float((C[b, t] * h[b, d]).sum()) + float(D[d]) * float(x[b, t, d])
    return y, h


@pytest.mark.parametrize("discretization", ["zoh", "simple"])
@pytest.mark.parametrize("mode", ["reference", "recurrent", "chunk"])
def test_equals_a_literal_loop(mode, discretization):
    x, delta, A, Bm, C, D = _inputs()
    A[1, 2] = 0.0  # the ZOH limit
    h0 = 0.5 * torch.randn(2, 3, 4, generator=torch.Generator().manual_seed(3), dtype=torch.float64)
    y, h = selective_scan(x, delta, A, Bm, C, D, discretization=discretization, mode=mode, initial_state=h0,
                          output_final_state=True, chunk_size=4)
    y_ref, h_ref = _literal(x, delta, A, Bm, C, D, h0, discretization)
    assert_close(y, y_ref, "y")
    assert_close(h, h_ref, "h_T")


def test_zoh_weight_is_smooth_through_its_limit():
    delta = torch.tensor([[0.7]], dtype=torch.float64)
    for a in (0.0, -1e-12, -1e-6, -1e-3):
        A = torch.tensor([[a]], dtype=torch.float64)
        expected = 0.7 if a == 0 else math.expm1(0.7 * a) / a
        assert abs(float(zoh_input_weight(delta, A)) - expected) < 1e-12
    A = torch.tensor([[0.0, -1e-5, -0.5]], dtype=torch.float64, requires_grad=True)
    d = torch.tensor([[0.3]], dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(zoh_input_weight, (d, A))


def test_simple_discretization_is_the_first_order_term_of_zoh():
    x, delta, A, Bm, C, D = _inputs()
    gaps = []
    for scale in (1e-2, 1e-3):
        y_zoh, _ = selective_scan(x, scale * delta, A, Bm, C, D)
        y_simple, _ = selective_scan(x, scale * delta, A, Bm, C, D, discretization="simple")
        gaps.append((y_zoh - y_simple).abs().max() / scale)
    assert gaps[1] < gaps[0] / 5, "the gap per unit step shrinks with the step: second order"


@pytest.mark.parametrize("mode", ["recurrent", "chunk"])
def test_a_decay_constant_along_the_state_is_gated_linear_attention_with_a_scalar_gate_per_channel(mode):
    """A[d, n] = a_d: each channel is a head of GLA with the scalar gate delta_t a_d (the SSD special case)."""
    x, delta, A, Bm, C, D = _inputs()
    A = A[:, :1].expand(-1, 4).contiguous()
    y, _ = selective_scan(x, delta, A, Bm, C, discretization="simple", mode=mode, chunk_size=4)
    k = delta.unsqueeze(-1) * Bm.unsqueeze(2)  # [B, T, D, N]
    q = C.unsqueeze(2).expand_as(k)
    expected, _ = gated_linear_attn(q, k, x.unsqueeze(-1), delta * A[:, 0], scale=1.0)
    assert_close(y, expected[..., 0], "y")


def _all_inputs(B, T, D, N, seed, dtype=torch.float64):
    """Every differentiable input by name, A with one exact 0 (the ZOH limit) and a state to start from."""
    x, delta, A, Bm, C, Dk = _inputs(B, T, D, N, seed=seed, f=dtype)
    A[0, 0] = 0.0
    h0 = 0.5 * torch.randn(B, D, N, generator=torch.Generator().manual_seed(seed + 1), dtype=dtype)
    return {"x": x, "delta": delta, "A": A, "B": Bm, "C": C, "D": Dk, "initial_state": h0}


@pytest.mark.parametrize("discretization", ["zoh", "simple"])
@pytest.mark.parametrize("dtype", DTYPES)
def test_forms_match_reference_with_the_gradient_of_every_input(dtype, discretization):
    """Outputs, final state and the gradients of x, delta, A, B, C, D and h_0 under random cotangents; T = 37 is not
    a multiple of the chunk size."""
    op = partial(selective_scan, discretization=discretization)
    inputs = _all_inputs(2, 37, 3, 4, seed=5, dtype=dtype)
    expected = run_with_grads(partial(op, mode="reference"), inputs)
    assert_all_close(run_with_grads(partial(op, mode="recurrent"), inputs), expected, "recurrent vs reference")
    for chunk_size in (1, 8, 64):
        chunk = partial(op, mode="chunk", chunk_size=chunk_size)
        assert_all_close(run_with_grads(chunk, inputs), expected, f"chunk {chunk_size} vs reference")


def _through_gla(x, delta, A, B, C, D, initial_state, output_final_state, discretization="zoh"):
    """The computation the chunk form replaced: GLA with one head per channel, q = C_t, k = Bbar_t, v = x_t and
    the diagonal log-gate delta_t A."""
    step = delta.unsqueeze(-1)  # [B, T, D, 1]
    weight = zoh_input_weight(step, A) if discretization == "zoh" else step
    k = weight * B.unsqueeze(2)  # [B, T, D, N]
    q = C.unsqueeze(2).expand_as(k)
    y, h = gated_linear_attn(q, k, x.unsqueeze(-1), step * A, scale=1.0, initial_state=initial_state.unsqueeze(-1),
                             output_final_state=True)
    return y[..., 0] + D * x, h[..., 0]


@pytest.mark.parametrize("discretization", ["zoh", "simple"])
def test_chunk_form_equals_the_gated_linear_attention_it_replaced(discretization):
    inputs = _all_inputs(2, 45, 5, 3, seed=11)
    expected = run_with_grads(partial(_through_gla, discretization=discretization), inputs)
    chunk = partial(selective_scan, mode="chunk", chunk_size=16, discretization=discretization)
    assert_all_close(run_with_grads(chunk, inputs), expected, "chunk vs GLA")


class _LargestTensor(torch.overrides.TorchFunctionMode):
    """Records the most elements of any tensor a torch function returns while the mode is on."""

    def __init__(self):
        super().__init__()
        self.largest = 0

    def __torch_function__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for t in out if isinstance(out, tuple) else (out,):
            if isinstance(t, torch.Tensor):
                self.largest = max(self.largest, t.numel())
        return out


@pytest.mark.parametrize("grad", [False, True], ids=["prefill", "fwd+bwd"])
def test_chunk_form_keeps_per_channel_state_tensors_to_one_chunk(grad):
    """T = 512 in chunks of 32 with N = 16: no tensor of the forward (or backward) pass reaches a quarter of a
    whole-sequence [B, T, D, N] tensor (a chunk's is a sixteenth, the inputs' [B, T, D] too)."""
    B, T, D, N, chunk_size = 1, 512, 8, 16, 32
    inputs = {name: t.requires_grad_(grad) for name, t in _all_inputs(B, T, D, N, seed=2).items()}
    with _LargestTensor() as watch, torch.set_grad_enabled(grad):
        y, h = selective_scan(**inputs, output_final_state=True, chunk_size=chunk_size)
        if grad:
            (y.sum() + h.sum()).backward()
    assert 0 < watch.largest < B * T * D * N // 4, f"largest tensor: {watch.largest} elements"


@settings(max_examples=20, deadline=None)
@given(B=st.integers(1, 2), T=st.integers(0, 21), D=st.integers(1, 4), N=st.integers(1, 5),
       chunk_size=st.sampled_from([1, 4, 16]), discretization=st.sampled_from(["zoh", "simple"]))
def test_forms_agree_over_shapes(B, T, D, N, chunk_size, discretization):
    x, delta, A, Bm, C, Dk = _inputs(B, T, D, N, seed=T + N)
    kw = {"discretization": discretization, "output_final_state": True}
    y_ref, h_ref = selective_scan(x, delta, A, Bm, C, Dk, mode="reference", **kw)
    for mode in ("recurrent", "chunk"):
        y, h = selective_scan(x, delta, A, Bm, C, Dk, mode=mode, chunk_size=chunk_size, **kw)
        assert_close(y, y_ref, f"{mode} y")
        assert_close(h, h_ref, f"{mode} h")


BAD = {
    "negative step": ({"delta": -torch.ones(1, 3, 2)}, "delta"),
    "unstable A": ({"A": torch.ones(2, 4)}, "A"),
    "A rows": ({"A": -torch.ones(3, 4)}, "A"),
    "B shape": ({"B": torch.randn(1, 3, 5)}, "B"),
    "C rank": ({"C": torch.randn(1, 3)}, "C"),
    "D shape": ({"D": torch.randn(3)}, "D"),
    "discretization": ({"discretization": "bilinear"}, "discretization"),
    "state shape": ({"initial_state": torch.zeros(1, 2, 5)}, "initial_state"),
}


@pytest.mark.parametrize("case", list(BAD))
def test_bad_input_raises_value_error_naming_it(case):
    override, name = BAD[case]
    args = {"x": torch.randn(1, 3, 2), "delta": torch.rand(1, 3, 2), "A": -torch.ones(2, 4),
            "B": torch.randn(1, 3, 4), "C": torch.randn(1, 3, 4)} | override
    with pytest.raises(ValueError, match=name):
        selective_scan(**args)
