"""least_squares on regmem's Triton backend (solver="cg": both CG solves by the kernel of ops/regression/triton_cg.py)
against the torch chunk form: outputs, final states and every gradient (float64 to 1e-10, float32 to relative RMS
1e-4), with decay, a learnt ridge, an initial state, a feature map, packed sequences, bf16 inputs and T = 0.

Without a GPU the kernel runs under Triton's CPU interpreter (TRITON_INTERPRET=1, tests/conftest.py), about a second
per call at these sizes, so the shapes and step counts stay small. The kernel's chunk (64 tokens) differs from the
torch form's chunk_size here on purpose: the solve must not depend on how the tokens are blocked.
"""

from functools import partial

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from test_least_squares_forms import ls_inputs

from helpers import assert_all_close, assert_close, rel_rms, run_with_grads
from regmem.ops import least_squares
from regmem.ops.common import split_chunks
from regmem.ops.regression import cg
from regmem.ops.regression import triton_backend as ls_triton

GPU = torch.cuda.is_available()
DEVICE = "cuda" if GPU else "cpu"
DTYPES = [pytest.param(torch.float64, id="f64"), pytest.param(torch.float32, id="f32")]


def _on_device(inputs: dict) -> dict:
    return {n: (x.to(DEVICE) if isinstance(x, torch.Tensor) else type(x)(*(s.to(DEVICE) for s in x))
                if isinstance(x, tuple) else x) for n, x in inputs.items()}


def _agree(inputs: dict, label: str, **options) -> None:
    op = partial(least_squares.chunk, solver="cg", **options)
    assert_all_close(run_with_grads(partial(op, backend="triton"), inputs),
                     run_with_grads(partial(op, backend="torch"), inputs), label)


CASES = {  # (B, T, H, K, V, gate, ridge, with_state, cg_steps)
    "uniform-3steps": (2, 37, 2, 6, 5, None, "scalar", True, 3),
    "decay-perchannel-converged": (1, 70, 2, 12, 5, 1.0, "per_channel", True, 14),  # 2 solve chunks, F off its tile
    "decay-perhead-nostate-0steps": (2, 19, 1, 5, 3, 0.5, "per_head", False, 0),
}


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("case", list(CASES))
def test_least_squares_triton_equals_torch_with_grads(case, dtype):
    B, T, H, K, V, gate, ridge, with_state, steps = CASES[case]
    inputs = _on_device(ls_inputs(B, T, H, K, V, dtype=dtype, gate=gate, ridge=ridge, with_state=with_state))
    _agree(inputs, case, cg_steps=steps, chunk_size=16)


def test_least_squares_triton_with_a_feature_map_equals_torch():
    inputs = _on_device({**ls_inputs(1, 30, 2, 4, 3, gate=0.5), "feature_map": "elu_plus_one"})
    _agree(inputs, "elu_plus_one", cg_steps=4, chunk_size=32)


@given(B=st.integers(1, 2), T=st.integers(1, 40), H=st.integers(1, 2), K=st.integers(1, 9), V=st.integers(1, 4),
       gate=st.sampled_from([None, 0.5]), steps=st.integers(0, 3), chunk=st.sampled_from([8, 64]))
def test_least_squares_triton_equals_torch_property(B, T, H, K, V, gate, steps, chunk):
    inputs = _on_device(ls_inputs(B, T, H, K, V, gate=gate, ridge="per_channel", seed=T))
    _agree(inputs, "property", cg_steps=steps, chunk_size=chunk)


def test_least_squares_triton_packed_sequences_equal_torch():
    inputs = ls_inputs(1, 30, 2, 4, 3, gate=0.5, with_state=False)
    inputs = {**_on_device(inputs), "cu_seqlens": torch.tensor([0, 5, 5, 17, 30], device=DEVICE)}
    _agree(inputs, "packed", cg_steps=3)


def test_least_squares_triton_reads_a_hard_reset_as_torch_does():
    """A gate of -inf (retention 0) inside a chunk: the kernel reads the torch loop's own decay matrix, so it
    stays finite where a difference of chunk-local cumsums would give -inf - (-inf) = NaN."""
    inputs = _on_device(ls_inputs(1, 40, 2, 5, 3, gate=0.5, with_state=False))
    inputs["g"][0, 5, 0] = float("-inf")
    _agree(inputs, "hard reset", cg_steps=3, chunk_size=16)


def test_least_squares_triton_half_precision_input_computes_in_float32():
    inputs = _on_device(ls_inputs(1, 24, 2, 4, 3, dtype=torch.bfloat16, gate=0.5, with_state=False))
    actual, _ = least_squares(**inputs, solver="cg", cg_steps=4, backend="triton")
    expected, _ = least_squares(**inputs, solver="cg", cg_steps=4, backend="torch")
    assert actual.dtype == torch.bfloat16
    assert rel_rms(actual, expected) < 1e-2  # both round a float32 result to bfloat16


def test_least_squares_triton_with_no_new_tokens_keeps_the_state_and_its_gradient():
    inputs = _on_device(ls_inputs(1, 0, 2, 4, 3))
    results = []
    for backend in ("triton", "torch"):
        state = type(inputs["initial_state"])(*(x.clone().requires_grad_() for x in inputs["initial_state"]))
        o, final = least_squares(**{**inputs, "initial_state": state}, solver="cg", backend=backend,
                                 output_final_state=True)
        grads = torch.autograd.grad(final.R.sum() + 2 * final.S.sum(), list(state))
        results.append({"o": o.detach(), "R": final.R.detach(), "S": final.S.detach(), "dR": grads[0],
                        "dS": grads[1]})
    assert results[0]["o"].shape == (1, 0, 2, 3)
    assert_all_close(results[0], results[1], "T = 0")


def test_cg_kernel_reads_nothing_outside_its_tensors():
    """Every tensor's storage runs on into NaN: a load the kernel fails to mask (F off its tile, the diagonal of
    R_n) reads NaN and spreads it, where the torch loop stays finite."""
    inputs = ls_inputs(1, 50, 2, 11, 2, gate=0.5, ridge="per_channel")
    k, g, R_in, _ = cg.operator_pieces(inputs["k"], inputs["g"], inputs["initial_state"].R, 64)
    rhs = split_chunks(inputs["q"], 64)
    clean = [x.contiguous() for x in (rhs, k, g, R_in, inputs["ridge"])]

    def poisoned(x):
        storage = torch.full((x.numel() + 4096,), float("nan"), dtype=x.dtype, device=DEVICE)
        storage[:x.numel()] = x.flatten().to(DEVICE)
        return storage[:x.numel()].view(x.shape)

    from regmem.ops.regression.triton_cg import solve

    actual = solve(*(poisoned(x) for x in clean), 3)
    assert_close(actual.cpu(), cg.torch_solve(*clean, 3), "NaN past the tensors")


# --- choice and errors -----------------------------------------------------------------------------------------


def test_least_squares_auto_runs_torch_for_the_exact_solver_and_wide_features(monkeypatch):
    """The kernel solves by CG with F <= 128: "auto" runs the torch form otherwise, and a named backend="triton"
    refuses by name."""
    inputs = _on_device(ls_inputs(1, 8, 1, 4, 3, dtype=torch.float32))
    assert ls_triton.refuses({"solver": "cholesky"}) is not None and ls_triton.refuses({"solver": "cg"}) is None
    with pytest.raises(ValueError, match=r"solver='cg'\), got solver='cholesky'"):
        least_squares(**inputs, backend="triton")
    for bad, match in (({"solver": "cg", "cg_steps": -1}, "^cg_steps must"), ({"cg_steps": 5}, "^cg_steps applies"),
                       ({"solver": "lu"}, "^solver must")):  # the torch form's own checks, on either backend
        with pytest.raises(ValueError, match=match):
            least_squares(**inputs, **bad, backend="triton")
    wide = _on_device(ls_inputs(1, 4, 1, 129, 2, dtype=torch.float32))
    with pytest.raises(ValueError, match="F <= 128"):
        least_squares(**wide, solver="cg", cg_steps=1, backend="triton")
    cuda_like = {"q": torch.empty(1, 1, 1, 129, device="meta")}
    monkeypatch.setattr(ls_triton, "triton_usable", lambda tokens: (True, None))
    assert ls_triton.usable(cuda_like) == (False, None)
    assert ls_triton.usable({"q": torch.empty(1, 1, 1, 128, device="meta")}) == (True, None)


@pytest.mark.skipif(GPU, reason="on a GPU backend='auto' runs the kernel; this checks the CPU choice")
def test_least_squares_auto_on_cpu_never_touches_triton(monkeypatch):
    def refuse(module):
        raise AssertionError(f"backend='auto' imported {module} on a CPU call")

    monkeypatch.setattr(ls_triton, "triton_module", refuse)
    inputs = ls_inputs(1, 12, 2, 4, 3, dtype=torch.float32)
    auto, _ = least_squares(**inputs, solver="cg", cg_steps=3)
    assert torch.equal(auto, least_squares(**inputs, solver="cg", cg_steps=3, backend="torch")[0])


@pytest.mark.parametrize("mode", ["reference", "recurrent"])
def test_least_squares_triton_backend_has_the_chunk_form_only(mode):
    with pytest.raises(ValueError, match="backend='triton' provides the chunk form only"):
        least_squares(**ls_inputs(1, 8, 1, 4, 3), backend="triton", mode=mode)
