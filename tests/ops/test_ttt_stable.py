"""The engine's proximal step rule cannot diverge (regmem/ops/ttt/model.py `layer_steps`; issue: self-modifying
Titans' memories blew up on large inputs): every inner model, with and without DGD and momentum, fed keys and values
of norm 10-100 with eta = 1 for 1000 tokens keeps its weights bounded; the printed explicit rule does not."""

import pytest
import torch
import torch.nn.functional as F

from regmem.ops import InnerModel, TTTState, ttt

MEMORIES = {
    "linear": InnerModel(),  # every linear memory (delta rule, Titans' linear memory, eq. 88's DGD)
    "mlp": InnerModel((8,), "gelu"),  # Titans' deep memory
    "residual_mlp": InnerModel((8,), "silu", residual=True),  # Nested Learning eq. 89 (self-modifying Titans, Hope)
    "deep": InnerModel((8, 8), "silu"),
    "ttt_linear": InnerModel((), bias=True, residual=True, layer_norm=True),
    "ttt_mlp": InnerModel((8,), "gelu", bias=True, residual=True, layer_norm=True),
}
T, K, BOUND = 1000, 8, 200.0


def _run(model, dgd, momentum, step_rule, mini_batch=1):
    gen = torch.Generator().manual_seed(0)
    k = F.normalize(torch.randn(1, T, 2, K, generator=gen, dtype=torch.float64), dim=-1)
    k = k * (10 + 90 * torch.rand(1, T, 2, 1, generator=gen, dtype=torch.float64))
    v = F.normalize(torch.randn(1, T, 2, K, generator=gen, dtype=torch.float64), dim=-1)
    v = v * (10 + 90 * torch.rand(1, T, 2, 1, generator=gen, dtype=torch.float64))
    init = model.init(2, K, K, generator=torch.Generator().manual_seed(1), dtype=torch.float64).unsqueeze(0)
    P = init.shape[-1]
    state = TTTState(init, init.new_zeros(1, 2, P if momentum else 0), init, init.new_zeros(1, 2))
    log_mu = torch.full((1, T, 2), -0.1, dtype=torch.float64) if momentum else None  # mu = 0.9
    ln = {"ln_weight": torch.ones(2, K, dtype=torch.float64), "ln_bias": torch.zeros(2, K, dtype=torch.float64)} \
        if model.layer_norm else {}
    _, state = ttt(k, k, v, torch.ones(1, T, 2, dtype=torch.float64), None, log_mu, model=model, dgd=dgd,
                   step_rule=step_rule, mini_batch=mini_batch, initial_state=state, output_final_state=True,
                   chunk_size=16, **ln)
    return state.params.abs().max()


@pytest.mark.parametrize("momentum", [False, True], ids=["plain", "momentum"])
@pytest.mark.parametrize("dgd", [False, True], ids=["gd", "dgd"])
@pytest.mark.parametrize("name", list(MEMORIES))
def test_proximal_rule_keeps_every_memory_bounded_on_large_inputs(name, dgd, momentum):
    assert _run(MEMORIES[name], dgd, momentum, "proximal") < BOUND


@pytest.mark.parametrize("name", ["linear", "residual_mlp", "deep"])
def test_explicit_rule_diverges_on_the_same_stream(name):
    """The printed rule expands once eta ||x||^2 > 2: the test above can fail."""
    largest = _run(MEMORIES[name], True, False, "explicit")
    assert not torch.isfinite(largest) or largest > 1e6


def test_proximal_rule_is_bounded_with_mini_batches():
    """Gradients frozen at the mini-batch start (16 tokens) and DGD on the current weights: still bounded."""
    assert _run(MEMORIES["residual_mlp"], True, True, "proximal", mini_batch=16) < BOUND
