"""regmem's own Triton kernels (backend="triton") against the torch forms they replace.

Without a GPU the kernels run under Triton's CPU interpreter (TRITON_INTERPRET=1, set by tests/conftest.py before
anything imports triton); on a GPU they run compiled, on CUDA tensors. Either way they must equal the
torch form: outputs, final states and every gradient (float64 to 1e-10, float32 to relative RMS 1e-4, as every
forms test), with cached pairs, key masks, packed sequences, and tile edges (T, L, D, F not multiples of the tiles).

- local_linear_attn: the streamed moments (`TritonMoments` against `CausalMoments`) and the whole op.
- deltaformer: the erase pass (`TritonErase`) through the whole op, with G erase vectors, learnt erase weights,
  gates, a cache and a key mask, at the kernels' tile and at a smaller one (more chunks per call).

The interpreter runs a kernel at about a second per call at these sizes, so the shapes stay small. What it cannot
see (shared memory, the dtypes a compiled kernel gives its arguments) is checked by compiling every kernel for sm_90
(tests/ops/sm90_compile.py; Triton's CUDA backend needs no GPU to compile).
"""

import os
import subprocess
import sys
from functools import partial
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from helpers import assert_all_close, assert_close, kv_cache_inputs, rel_rms, run_with_grads
from regmem.ops import KUState, KVState, deltaformer, local_linear_attn
from regmem.ops.common import backends
from regmem.ops.deltaformer import triton_backend as deltaformer_triton
from regmem.ops.nonparametric import triton_backend
from regmem.ops.nonparametric.chunk import CausalMoments

GPU = torch.cuda.is_available()
DEVICE = "cuda" if GPU else "cpu"
DTYPES = [pytest.param(torch.float64, id="f64"), pytest.param(torch.float32, id="f32")]
RIDGE = {torch.float64: 1e-3, torch.float32: 0.1}  # as tests/ops/test_local_linear_attn.py


if not GPU:  # tests/conftest.py switches the interpreter on before anything imports triton
    assert backends.triton_interpreting(), "TRITON_INTERPRET=1 must be set before triton is imported"


def _on_device(inputs: dict) -> dict:
    return {n: (x.to(DEVICE) if isinstance(x, torch.Tensor) else type(x)(*(s.to(DEVICE) for s in x))
                if isinstance(x, tuple) else x) for n, x in inputs.items()}


def _moments_inputs(B, H, T, S, D, F, *, dtype, masked, seed=0):
    gen = torch.Generator().manual_seed(seed)
    L = S + T
    q, k, X = (torch.randn(*shape, generator=gen, dtype=torch.float64).to(dtype)
               for shape in ((B, H, T, D), (B, H, L, D), (B, H, L, F)))
    key_mask = torch.rand(B, L, generator=gen) > 0.3 if masked else None
    return q, k, X, key_mask


def _moments_with_grads(fn, q, k, X, scale, offset, key_mask):
    leaves = [x.to(DEVICE).requires_grad_() for x in (q, k, X)]
    mask = None if key_mask is None else key_mask.to(DEVICE)
    out = fn(*leaves, scale, offset, 16, mask)
    cotangent = torch.randn(out.shape, generator=torch.Generator().manual_seed(3), dtype=out.dtype).to(DEVICE)
    grads = torch.autograd.grad((out * cotangent).sum(), leaves)
    return {"moments": out.detach(), **{f"grad_{n}": g for n, g in zip("qkX", grads, strict=True)}}


# --- compiled for a GPU ----------------------------------------------------------------------------------------

HOPPER_SHARED_BYTES = 232448  # the shared memory one block may use on an H100 / H200 (sm_90)


def test_every_kernel_compiles_for_hopper_within_its_shared_memory():
    """Each kernel, float32 and float64, with the compile-time arguments its launch passes: compiled for sm_90 in a
    process without TRITON_INTERPRET (under it the kernels are interpreter objects). With Triton's default three
    pipeline stages the float64 moments at a key tile of 256 needed 238 KB and failed to launch on a GPU."""
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    script = Path(__file__).with_name("sm90_compile.py")
    run = subprocess.run([sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=1200)
    lines = [line for line in run.stdout.splitlines() if line.startswith(("OK ", "FAIL "))]
    assert run.returncode == 0 and len(lines) == 20, run.stdout + run.stderr[-3000:]
    failed = [line for line in lines if line.startswith("FAIL ")]
    assert not failed, "\n".join(failed)
    over = [line for line in lines if int(line.split()[-1]) > HOPPER_SHARED_BYTES]
    assert not over, f"over {HOPPER_SHARED_BYTES} bytes of shared memory: {over}"


# --- the moments kernels --------------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("masked", [False, True], ids=["all-pairs", "key-mask"])
@pytest.mark.parametrize("shape", [
    pytest.param((2, 2, 37, 0, 5, 70), id="B2-H2-T37-S0-D5-F70"),  # T, D, F off the tiles
    pytest.param((1, 3, 20, 13, 16, 33), id="B1-H3-T20-S13-D16-F33"),  # cached pairs, one query tile
    pytest.param((1, 1, 70, 5, 3, 130), id="B1-H1-T70-S5-D3-F130"),  # three query tiles, three F tiles
])
def test_moments_kernels_equal_causal_moments(shape, masked, dtype):
    B, H, T, S, D, F = shape
    q, k, X, key_mask = _moments_inputs(B, H, T, S, D, F, dtype=dtype, masked=masked)
    from regmem.ops.nonparametric.triton_moments import TritonMoments

    actual = _moments_with_grads(TritonMoments.apply, q, k, X, 0.4, S, key_mask)
    expected = _moments_with_grads(CausalMoments.apply, q, k, X, 0.4, S, key_mask)
    assert_all_close(actual, expected, f"{shape}")


def test_moments_kernels_read_nothing_outside_their_tensors():
    """Every tensor's storage runs on into NaN: a load the kernels fail to mask (a tile past T, L, D or F) reads
    NaN and spreads it, where the torch form stays finite."""
    B, H, T, S, D, F = 1, 2, 21, 3, 5, 37
    q, k, X, key_mask = _moments_inputs(B, H, T, S, D, F, dtype=torch.float64, masked=True)

    def poisoned(x):  # on the device: `.to(DEVICE)` of a view would copy the view alone, without the NaN tail
        storage = torch.full((x.numel() + 4096,), float("nan"), dtype=x.dtype, device=DEVICE)
        storage[:x.numel()] = x.flatten().to(DEVICE)
        return storage[:x.numel()].view(x.shape)

    from regmem.ops.nonparametric.triton_moments import TritonMoments

    actual = _moments_with_grads(TritonMoments.apply, *(poisoned(x) for x in (q, k, X)), 0.4, S, key_mask)
    expected = _moments_with_grads(CausalMoments.apply, q, k, X, 0.4, S, key_mask)
    assert_all_close(actual, expected, "NaN past the tensors")


# --- the op on its Triton backend ------------------------------------------------------------------------------

KERNELS = {"exp": {}, "gauss-B4": {"bandwidth": 4.0}, "qknorm": {"qk_norm": True}}


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("kernel", list(KERNELS))
def test_local_linear_triton_equals_torch_with_grads(kernel, dtype):
    op = partial(local_linear_attn, ridge=RIDGE[dtype], chunk_size=16, **KERNELS[kernel])
    inputs = _on_device(kv_cache_inputs(2, 37, 2, 6, 5, 4, dtype=dtype))
    assert_all_close(run_with_grads(partial(op, backend="triton"), inputs),
                     run_with_grads(partial(op, backend="torch"), inputs), f"triton vs torch, {kernel}")


@given(B=st.integers(1, 2), T=st.integers(1, 40), H=st.integers(1, 2), K=st.integers(1, 6), V=st.integers(1, 6),
       S=st.sampled_from([0, 3]), kernel=st.sampled_from(list(KERNELS)), masked=st.booleans())
def test_local_linear_triton_equals_torch_property(B, T, H, K, V, S, kernel, masked):
    inputs = _on_device(kv_cache_inputs(B, T, H, K, V, S))
    if masked:
        inputs["key_mask"] = (torch.rand(B, S + T, generator=torch.Generator().manual_seed(T)) > 0.3).to(DEVICE)
    op = partial(local_linear_attn, chunk_size=16, **KERNELS[kernel])
    assert_all_close(run_with_grads(partial(op, backend="triton"), inputs),
                     run_with_grads(partial(op, backend="torch"), inputs), "triton vs torch")


def test_local_linear_triton_heads_a_group_at_a_time_equal_torch(monkeypatch):
    """Past FIT_BYTES (forced here) the kernels run per group of heads under activation checkpointing."""
    from regmem.ops.nonparametric import chunk

    monkeypatch.setattr(chunk, "FIT_BYTES", 1)  # one head at a time
    inputs = _on_device(kv_cache_inputs(1, 20, 3, 4, 3, 2))
    op = partial(local_linear_attn, ridge=RIDGE[torch.float64], chunk_size=16)
    assert_all_close(run_with_grads(partial(op, backend="triton"), inputs),
                     run_with_grads(partial(op, backend="torch"), inputs), "triton vs torch, one head at a time")


def test_local_linear_triton_packed_sequences_equal_torch():
    q, k, v = (x.to(DEVICE) for x in kv_cache_inputs(1, 30, 2, 4, 3, 0).values())
    cu_seqlens = torch.tensor([0, 5, 5, 17, 30], device=DEVICE)
    actual, _ = local_linear_attn(q, k, v, cu_seqlens=cu_seqlens, backend="triton")
    expected, _ = local_linear_attn(q, k, v, cu_seqlens=cu_seqlens, backend="torch")
    assert_close(actual, expected, "o, packed")


def test_local_linear_triton_half_precision_input_computes_in_float32():
    inputs = kv_cache_inputs(1, 24, 2, 4, 3, 0, dtype=torch.bfloat16)
    q, k, v = (x.to(DEVICE) for x in inputs.values())
    actual, _ = local_linear_attn(q, k, v, ridge=0.1, backend="triton")
    expected, _ = local_linear_attn(q, k, v, ridge=0.1, backend="torch")
    assert actual.dtype == torch.bfloat16
    assert rel_rms(actual, expected) < 1e-2  # both round a float32 result to bfloat16


# --- deltaformer on its Triton backend -----------------------------------------------------------------------


def _deltaformer_inputs(B, T, H, G, K, V, S, *, dtype, masked, erase_weights, seed=0) -> dict:
    gen = torch.Generator().manual_seed(seed)

    def draw(*shape, uniform=False):
        x = torch.rand(*shape, generator=gen, dtype=torch.float64) if uniform else torch.randn(
            *shape, generator=gen, dtype=torch.float64)
        return x.to(dtype).to(DEVICE)

    inputs = {"q": draw(B, T, H, K), "k": draw(B, T, H, K), "v": draw(B, T, H, V), "w": draw(B, T, H, G, K),
              "alpha": draw(B, T, H, uniform=True), "beta": draw(B, T, H, uniform=True)}
    if S:
        inputs["initial_state"] = KUState(draw(B, S, H, K), draw(B, S, H, V))
    if masked:
        inputs["key_mask"] = (torch.rand(B, S + T, generator=gen) > 0.3).to(DEVICE)
    if erase_weights:
        inputs["erase_weights"] = draw(H, G, uniform=True)
    return inputs


DELTAFORMER_CASES = [
    pytest.param((2, 37, 2, 1, 5, 6, 0, False, False), id="B2-T37-H2-G1-K5-V6"),
    pytest.param((1, 40, 2, 2, 6, 5, 7, True, True), id="B1-T40-H2-G2-K6-V5-S7-masked-weights"),
]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("case", DELTAFORMER_CASES)
def test_deltaformer_triton_equals_torch_with_grads(case, dtype):
    *shape, masked, weights = case
    inputs = _deltaformer_inputs(*shape, dtype=dtype, masked=masked, erase_weights=weights)
    op = partial(deltaformer, chunk_size=16)
    assert_all_close(run_with_grads(partial(op, backend="triton"), inputs),
                     run_with_grads(partial(op, backend="torch"), inputs), f"triton vs torch, {case}")


@pytest.mark.parametrize("read_kernel", ["softmax", "linear"])
def test_deltaformer_triton_small_tiles_equal_torch(monkeypatch, read_kernel):
    """Tiles of 16 rows: five chunks in order, and the adjoint's five in reverse, across a cache and a mask; and
    value tiles of 16, so V = 20 takes two programs per (batch, head)."""
    from regmem.ops.deltaformer import triton_kernels

    monkeypatch.setattr(triton_kernels, "BLOCK", 16)
    monkeypatch.setattr(triton_kernels, "VALUE_TILE", 16)
    inputs = _deltaformer_inputs(1, 70, 1, 2, 4, 20, 5, dtype=torch.float64, masked=True, erase_weights=True)
    op = partial(deltaformer, chunk_size=8, read_kernel=read_kernel)
    assert_all_close(run_with_grads(partial(op, backend="triton"), inputs),
                     run_with_grads(partial(op, backend="torch"), inputs), "triton vs torch, tiles of 16")


def test_deltaformer_triton_packed_sequences_equal_torch():
    inputs = _deltaformer_inputs(1, 30, 2, 1, 4, 3, 0, dtype=torch.float64, masked=False, erase_weights=False)
    cu_seqlens = torch.tensor([0, 5, 5, 17, 30], device=DEVICE)
    actual, _ = deltaformer(**inputs, cu_seqlens=cu_seqlens, backend="triton")
    expected, _ = deltaformer(**inputs, cu_seqlens=cu_seqlens, backend="torch")
    assert_close(actual, expected, "o, packed")


def test_erase_kernels_read_nothing_outside_their_tensors():
    """As the moments' test: inputs whose storage runs on into NaN give the result of clean copies."""
    from regmem.ops.deltaformer.triton_kernels import TritonErase

    B, H, G, T, S, K, V = 1, 2, 2, 21, 3, 5, 3
    gen = torch.Generator().manual_seed(0)
    shapes = [(B, H, S + T, K), (B, H, G, T, K), (B, H, T, V), (B, H, T), (B, H, T), (H, G), (B, H, S, V)]
    clean = [torch.rand(*shape, generator=gen, dtype=torch.float64).to(DEVICE) for shape in shapes]

    def poisoned(x):
        storage = torch.full((x.numel() + 4096,), float("nan"), dtype=x.dtype, device=x.device)
        storage[:x.numel()] = x.flatten()
        return storage[:x.numel()].view(x.shape)

    key_mask = (torch.rand(B, S + T, generator=gen) > 0.3).to(DEVICE)

    def erase_with_grads(tensors):
        leaves = [x.detach().requires_grad_() for x in tensors]  # detach shares the storage: the NaN stays
        u_all = TritonErase.apply(*leaves, 0.5, key_mask)
        grads = torch.autograd.grad(u_all.sum(), leaves)
        return {"u": u_all.detach(), **{f"grad{i}": g for i, g in enumerate(grads)}}

    expected = erase_with_grads([x.clone() for x in clean])
    assert_all_close(erase_with_grads([poisoned(x) for x in clean]), expected, "NaN past the tensors")


@pytest.mark.parametrize("op,state", [(local_linear_attn, KVState), (deltaformer, KUState)],
                         ids=["local_linear_attn", "deltaformer"])
def test_no_new_tokens_keep_the_cache_and_its_gradient(op, state):
    gen = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, 0, 2, d, generator=gen).to(DEVICE) for d in (4, 4, 3))
    cache = state(torch.randn(1, 3, 2, 4, generator=gen).to(DEVICE), torch.randn(1, 3, 2, 3, generator=gen).to(DEVICE))
    results = []
    for backend in ("triton", "torch"):
        leaves = state(*(x.clone().requires_grad_() for x in cache))
        o, final = op(q, k, v, initial_state=leaves, output_final_state=True, backend=backend)
        grads = torch.autograd.grad(sum((x * (i + 1)).sum() for i, x in enumerate(final)), list(leaves))
        results.append({"o": o.detach(), **{f"state.{f}": x.detach() for f, x in zip(final._fields, final,
                                                                                      strict=True)},
                        **{f"grad_cache.{f}": g for f, g in zip(final._fields, grads, strict=True)}})
    assert results[0]["o"].shape == (1, 0, 2, 3)
    assert_all_close(results[0], results[1], "T = 0")


# --- choice and errors -----------------------------------------------------------------------------------------


def test_auto_runs_triton_only_on_cuda_in_a_dtype_it_takes():
    def tokens(is_cuda, dtype):
        return {"q": SimpleNamespace(is_cuda=is_cuda, dtype=dtype)}

    assert backends.triton_usable(tokens(True, torch.float32)) == (True, None)
    assert backends.triton_usable(tokens(True, torch.bfloat16)) == (True, None)
    assert backends.triton_usable(tokens(True, torch.float64)) == (False, None)
    assert backends.triton_usable(tokens(False, torch.float32)) == (False, None)


@pytest.mark.skipif(GPU, reason="on a GPU backend='auto' runs the kernels; this checks the CPU choice")
def test_auto_on_cpu_never_touches_triton(monkeypatch):
    def refuse(module):
        raise AssertionError(f"backend='auto' imported {module} on a CPU call")

    monkeypatch.setattr(triton_backend, "triton_module", refuse)
    monkeypatch.setattr(deltaformer_triton, "triton_module", refuse)
    q, k, v = kv_cache_inputs(1, 12, 2, 4, 3, 0, dtype=torch.float32).values()
    assert torch.equal(local_linear_attn(q, k, v)[0], local_linear_attn(q, k, v, backend="torch")[0])
    assert torch.equal(deltaformer(q, k, v)[0], deltaformer(q, k, v, backend="torch")[0])


@pytest.mark.skipif(GPU, reason="a GPU runs the kernels on CUDA tensors; this checks the CPU refusal")
def test_triton_backend_on_cpu_without_the_interpreter_raises(monkeypatch):
    monkeypatch.setenv("TRITON_INTERPRET", "0")
    q, k, v = kv_cache_inputs(1, 8, 1, 4, 3, 0, dtype=torch.float32).values()
    for op in (local_linear_attn, deltaformer):
        with pytest.raises(ValueError, match="backend='triton' needs CUDA tensors"):
            op(q, k, v, backend="triton")


@pytest.mark.parametrize("op", [local_linear_attn, deltaformer])
@pytest.mark.parametrize("mode", ["reference", "recurrent"])
def test_triton_backend_has_the_chunk_form_only(op, mode):
    q, k, v = kv_cache_inputs(1, 8, 1, 4, 3, 0, dtype=torch.float32).values()
    with pytest.raises(ValueError, match="backend='triton' provides the chunk form only"):
        op(q, k, v, backend="triton", mode=mode)


def test_deltaformer_triton_refuses_float64_values_wider_than_its_tiles():
    inputs = _deltaformer_inputs(1, 4, 1, 1, 4, 129, 0, dtype=torch.float64, masked=False, erase_weights=False)
    with pytest.raises(ValueError, match="V <= 128 in float64"):
        deltaformer(**inputs, backend="triton")


def test_deltaformer_auto_runs_torch_for_an_erase_kernel_the_kernels_lack(monkeypatch):
    """A non-softmax erase kernel marks the call torch-only; named, the Triton backend refuses it by name."""
    def refuse(module):
        raise AssertionError(f"backend='auto' imported {module}")

    inputs = _deltaformer_inputs(1, 8, 1, 1, 4, 3, 0, dtype=torch.float32, masked=False, erase_weights=False)
    monkeypatch.setattr(deltaformer_triton, "triton_module", refuse)
    o_auto, _ = deltaformer(**inputs, erase_kernel="exp")
    o_torch, _ = deltaformer(**inputs, erase_kernel="exp", backend="torch")
    assert torch.equal(o_auto, o_torch)
    with pytest.raises(ValueError, match="erase_kernel='softmax' only"):
        deltaformer(**inputs, erase_kernel="exp", backend="triton")
