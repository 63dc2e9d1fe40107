"""backend="fla" (and "auto", which picks it on CUDA) against the torch chunk form, on a CUDA device with
flash-linear-attention installed. Without one they skip; tests/ops/test_backends.py covers the choice on CPU."""

import importlib.util

import pytest
import torch

from helpers import random_log_gate, random_qkv, rel_rms
from regmem.ops import delta_rule, gated_delta_rule, gated_linear_attn, linear_attn

needs_fla = pytest.mark.skipif(
    not torch.cuda.is_available() or importlib.util.find_spec("fla") is None,
    reason="backend='fla' needs a CUDA GPU and flash-linear-attention (pip install 'regmem[cuda]')",
)


def test_fla_backend_on_cpu_tensors_raises():
    q, k, v = random_qkv(1, 8, 1, 4, 4, dtype=torch.float32)
    with pytest.raises((ValueError, ImportError), match="CUDA|flash-linear-attention"):
        gated_linear_attn(q, k, v, torch.zeros(1, 8, 1), backend="fla")


@needs_fla
@pytest.mark.parametrize("gate", [None, "scalar", "diagonal"])
def test_fla_backend_matches_torch_chunk_form(gate):
    B, T, H, K, V = 2, 300, 4, 64, 64
    q, k, v = (x.float().cuda() for x in random_qkv(B, T, H, K, V))
    S0 = torch.randn(B, H, K, V, device="cuda")
    if gate is None:
        run = lambda backend: linear_attn(q, k, v, initial_state=S0, output_final_state=True,  # noqa: E731
                                          backend=backend)
    else:
        shape = (B, T, H) if gate == "scalar" else (B, T, H, K)
        g = random_log_gate(shape, 1.0, dtype=torch.float32).cuda()
        run = lambda backend: gated_linear_attn(q, k, v, g, initial_state=S0,  # noqa: E731
                                                output_final_state=True, backend=backend)
    (o_fla, S_fla), (o_torch, S_torch) = run("fla"), run("torch")
    assert rel_rms(o_fla, o_torch) < 1e-3  # fla computes in tf32/fp32 tiles
    assert rel_rms(S_fla, S_torch) < 1e-3


@needs_fla
@pytest.mark.parametrize("gate", [None, "scalar", "diagonal"])
def test_fla_backend_of_the_delta_rules_matches_torch_chunk_form_with_grads(gate):
    """Outputs, final state and every gradient, with beta up to 2 (negative eigenvalues) and an initial state."""
    B, T, H, K, V = 2, 300, 4, 64, 64
    q, k, v = (x.float().cuda() for x in random_qkv(B, T, H, K, V))
    k = torch.nn.functional.normalize(k, dim=-1)
    beta = 2 * torch.rand(B, T, H, device="cuda")
    g = None if gate is None else random_log_gate((B, T, H) if gate == "scalar" else (B, T, H, K), 1.0,
                                                  dtype=torch.float32).cuda()
    S0 = torch.randn(B, H, K, V, device="cuda")

    def run(backend):
        leaves = [x.clone().requires_grad_() for x in (q, k, v, beta, S0) + ((g,) if g is not None else ())]
        q_, k_, v_, beta_, S0_, *g_ = leaves
        if gate is None:
            o, S = delta_rule(q_, k_, v_, beta_, initial_state=S0_, output_final_state=True, backend=backend)
        else:
            o, S = gated_delta_rule(q_, k_, v_, g_[0], beta_, initial_state=S0_, output_final_state=True,
                                    backend=backend)
        (o.square().sum() + S.square().sum()).backward()
        return [o, S, *(x.grad for x in leaves)]

    for a, b in zip(run("fla"), run("torch"), strict=True):
        assert rel_rms(a, b) < 2e-3
    auto = run("auto")
    for a, b in zip(auto, run("fla"), strict=True):
        assert torch.equal(a, b)  # auto picked fla
