"""backend= of the ops: "auto" (the default) runs a library's kernel only where it can run the call and the torch
form everywhere else; a named backend runs or raises. fla itself needs a GPU (tests/ops/test_fla_backend.py);
here the choice is tested with stand-in backends and a stand-in fla package on CPU tensors."""

import sys
import types
import warnings

import pytest
import torch

from helpers import random_log_gate, random_qkv
from regmem.ops import delta_rule, gated_delta_rule, gated_linear_attn, linear_attn
from regmem.ops.common import Call, backends, op
from regmem.ops.common.backends import Backend, fla_usable
from regmem.ops.delta import fla_backend as delta_fla
from regmem.ops.delta.chunk import delta_chunk_core

B, T, H, K, V = 2, 24, 2, 8, 6


def _calls():
    q, k, v = random_qkv(B, T, H, K, V, dtype=torch.float32)
    k = torch.nn.functional.normalize(k, dim=-1)
    beta = torch.rand(B, T, H, generator=torch.Generator().manual_seed(1))
    g_scalar = random_log_gate((B, T, H), 1.0, dtype=torch.float32)
    g_diag = random_log_gate((B, T, H, K), 1.0, dtype=torch.float32)
    return {
        "linear_attn": lambda **kw: linear_attn(q, k, v, **kw),
        "gla_diagonal": lambda **kw: gated_linear_attn(q, k, v, g_diag, **kw),
        "delta_rule": lambda **kw: delta_rule(q, k, v, beta, **kw),
        "gated_delta_rule": lambda **kw: gated_delta_rule(q, k, v, g_scalar, beta, **kw),
        "gated_delta_rule_diagonal": lambda **kw: gated_delta_rule(q, k, v, g_diag, beta, **kw),
    }


@pytest.mark.parametrize("name", list(_calls()))
def test_auto_on_cpu_is_the_torch_form_bit_for_bit(name):
    call = _calls()[name]
    o_auto, S_auto = call(output_final_state=True)
    o_torch, S_torch = call(output_final_state=True, backend="torch")
    assert torch.equal(o_auto, o_torch) and torch.equal(S_auto, S_torch)


def test_fla_declines_cpu_and_float64_calls_silently():
    q = torch.zeros(1, 4, 1, 8)
    assert fla_usable({"q": q, "g": None}) == (False, None)
    assert fla_usable({"q": q.double(), "g": None}) == (False, None)


class _Tensor:
    """What fla_usable reads of a tensor, for a CUDA tensor on a CPU-only machine."""

    def __init__(self, requires_grad=True):
        self.is_cuda, self.dtype, self.requires_grad = True, torch.float32, requires_grad


def test_fla_is_chosen_on_cuda_and_its_gated_backward_refusal_gives_a_warning_naming_the_fix(monkeypatch):
    monkeypatch.setattr(backends, "_installed", lambda package: True)
    monkeypatch.setattr(backends, "_fla_refuses_gated_backward", lambda: True)
    assert fla_usable({"q": _Tensor(), "g": None}) == (True, None)  # ungated: fla's check does not apply
    usable, warning = fla_usable({"q": _Tensor(), "g": _Tensor()})
    assert not usable and "triton>=3.7.1" in warning
    with torch.no_grad():  # no backward, nothing to refuse
        assert fla_usable({"q": _Tensor(), "g": _Tensor()}) == (True, None)
    monkeypatch.setattr(backends, "_fla_refuses_gated_backward", lambda: False)
    assert fla_usable({"q": _Tensor(), "g": _Tensor()}) == (True, None)
    monkeypatch.setattr(backends, "_installed", lambda package: False)
    assert fla_usable({"q": _Tensor(), "g": None}) == (False, None)


def _toy_op(usable, library_core=None):
    """An op whose torch form returns v and whose library form returns 2 v (or runs library_core)."""
    def torch_core(v, *, initial_state):
        return v.clone(), v.sum(1)

    def torch_chunk_core(v, *, initial_state, chunk_size):
        return v.clone(), v.sum(1)

    def doubling_core(v, *, initial_state, chunk_size):
        return 2 * v, v.sum(1)

    forms = {"reference": torch_core, "recurrent": torch_core, "chunk": torch_chunk_core}

    @op(**forms, backends={"lib": Backend({"chunk": library_core or doubling_core}, lambda tokens: usable)})
    def toy(v, *, only_torch=False):
        """A toy op."""
        return Call({"v": v}, v.dtype, torch_only=only_torch)

    return toy


def test_auto_runs_the_first_usable_backend_unless_the_call_is_torch_only():
    v = torch.ones(1, 3, 1, 2)
    toy = _toy_op((True, None))
    assert torch.equal(toy(v)[0], 2 * v)  # auto picks the library
    assert torch.equal(toy(v, backend="torch")[0], v)
    assert torch.equal(toy(v, only_torch=True)[0], v)  # options the library lacks
    assert torch.equal(toy(v, mode="recurrent")[0], v)  # a form the library lacks


def test_auto_warns_once_when_a_backend_declines_with_a_reason(monkeypatch):
    monkeypatch.setattr(backends, "_WARNED", set())
    toy, v = _toy_op((False, "use the library next time")), torch.ones(1, 3, 1, 2)
    with pytest.warns(RuntimeWarning, match="use the library next time"):
        assert torch.equal(toy(v)[0], v)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        toy(v)  # the same reason again: no second warning


def test_a_failing_library_kernel_falls_back_under_auto_and_raises_when_named(monkeypatch):
    monkeypatch.setattr(backends, "_WARNED", set())

    def refusing(v, *, initial_state, chunk_size):
        raise RuntimeError("this GPU is not supported\nsecond line")

    toy, v = _toy_op((True, None), refusing), torch.ones(1, 3, 1, 2)
    with pytest.warns(RuntimeWarning, match="kernel failed \\(RuntimeError: this GPU is not supported\\)"):
        assert torch.equal(toy(v)[0], v)
    with pytest.raises(RuntimeError, match="not supported"):
        toy(v, backend="lib")


def test_bad_backend_names_and_forms_raise_value_errors():
    toy, v = _toy_op((True, None)), torch.ones(1, 3, 1, 2)
    with pytest.raises(ValueError, match=r"backend must be one of \('auto', 'torch', 'lib'\)"):
        toy(v, backend="cuda")
    with pytest.raises(ValueError, match="provides the chunk form only, got mode='recurrent'"):
        toy(v, backend="lib", mode="recurrent")
    with pytest.raises(ValueError, match="does not support normalize=True"):
        linear_attn(v, v, v, feature_map="relu", normalize=True, backend="fla")
    o, _ = linear_attn(v, v, v, feature_map="relu", normalize=True)  # auto: the torch form
    assert torch.isfinite(o).all()


@pytest.fixture
def stand_in_fla(monkeypatch):
    """fla.ops.{delta_rule, gated_delta_rule, kda} whose kernels record their keyword arguments and compute fla's
    recurrence (the same as regmem's, scale 1) with regmem's torch chunk form; check_cuda is lifted."""
    seen = []

    def kernel(name):
        def call(*, q, k, v, beta, scale, initial_state, output_final_state, g=None):
            seen.append((name, g is None or g.ndim, scale, output_final_state))
            o, S = delta_chunk_core(q * scale, k, v, g, beta, initial_state=initial_state, chunk_size=16)
            return o, (S if output_final_state else None)
        call.__name__ = name
        return call

    for parent in ("fla", "fla.ops"):
        monkeypatch.setitem(sys.modules, parent, types.ModuleType(parent))
    for module, name in [("delta_rule", "chunk_delta_rule"), ("gated_delta_rule", "chunk_gated_delta_rule"),
                         ("kda", "chunk_kda")]:
        monkeypatch.setitem(sys.modules, f"fla.ops.{module}", types.SimpleNamespace(**{name: kernel(name)}))
    monkeypatch.setattr(delta_fla, "check_cuda", lambda q: None)
    return seen


@pytest.mark.parametrize("gate", [None, "scalar", "diagonal"])
def test_the_delta_rules_fla_core_calls_the_matching_kernel_with_regmems_conventions(stand_in_fla, gate):
    q, k, v = random_qkv(B, T, H, K, V, dtype=torch.float32)
    k = torch.nn.functional.normalize(k, dim=-1)
    beta = 2 * torch.rand(B, T, H, generator=torch.Generator().manual_seed(2))  # up to 2: not squashed by fla
    g = None if gate is None else random_log_gate((B, T, H) if gate == "scalar" else (B, T, H, K), 1.0,
                                                  dtype=torch.float32)
    S0 = torch.randn(B, H, K, V)
    o, S = delta_fla.delta_fla_core(q, k, v, g, beta, initial_state=S0, chunk_size=64)
    o_ref, S_ref = delta_chunk_core(q, k, v, g, beta, initial_state=S0, chunk_size=64)
    torch.testing.assert_close(o, o_ref)
    torch.testing.assert_close(S, S_ref)
    expected = {None: ("chunk_delta_rule", True), "scalar": ("chunk_gated_delta_rule", 3),
                "diagonal": ("chunk_kda", 4)}[gate]
    assert stand_in_fla == [(*expected, 1.0, True)]  # q arrives scaled; the state always comes back
