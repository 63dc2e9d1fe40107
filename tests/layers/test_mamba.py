"""The Mamba layer (regmem/layers/mamba.py) on the selective scan's own chunk form computes what it computed when
its scan ran through gated linear attention with one head per channel (the path the chunk form replaced): outputs,
final state and every parameter's gradient, in float64 and float32, with an attention mask and with a state."""

import pytest
import torch

import regmem.layers.mamba
from helpers import DTYPES, assert_close
from regmem.layers import Mamba
from regmem.ops import gated_linear_attn
from regmem.ops.ssm import zoh_input_weight


def _scan_through_gla(x, delta, A, B, C, D, *, discretization, initial_state, output_final_state, mode, chunk_size):
    """The selective scan as GLA with q = C_t, k = Bbar_t, v = x_t and the diagonal log-gate delta_t A: [B, T, D]."""
    step = delta.unsqueeze(-1)  # [B, T, D, 1]
    weight = zoh_input_weight(step, A) if discretization == "zoh" else step
    k = weight * B.unsqueeze(2)  # [B, T, D, N]
    state = initial_state.unsqueeze(-1) if initial_state is not None else None  # [B, D, N, 1]
    y, h = gated_linear_attn(C.unsqueeze(2).expand_as(k), k, x.unsqueeze(-1), step * A, scale=1.0,
                             initial_state=state, output_final_state=True, mode=mode, chunk_size=chunk_size)
    return y[..., 0] + D * x, h[..., 0]


def _run(layer, x, mask, state):
    y, new_state = layer(x, state, attention_mask=mask)
    cotangent = torch.randn(y.shape, generator=torch.Generator().manual_seed(3), dtype=y.dtype)
    grads = torch.autograd.grad((y * cotangent).sum() + new_state.memory.sum(), list(layer.parameters()))
    return y.detach(), new_state.memory.detach(), grads


@pytest.mark.parametrize("discretization", ["zoh", "simple"])
@pytest.mark.parametrize("dtype", DTYPES)
def test_layer_equals_its_former_path_through_gated_linear_attention(dtype, discretization, monkeypatch):
    torch.manual_seed(0)
    layer = Mamba(16, state_size=4, chunk_size=8, discretization=discretization).to(dtype)
    x = torch.randn(2, 21, 16, dtype=dtype)
    mask = torch.ones(2, 21, dtype=torch.long)
    mask[1, :5] = 0  # left padding
    with torch.no_grad():
        _, state = layer(x[:, :6])  # a state to continue from
    ours = _run(layer, x[:, 6:], mask[:, 6:], state)
    monkeypatch.setattr(regmem.layers.mamba, "selective_scan", _scan_through_gla)
    former = _run(layer, x[:, 6:], mask[:, 6:], state)
    assert_close(ours[0], former[0], "y")
    assert_close(ours[1], former[1], "final state")
    for (name, _), grad, expected in zip(layer.named_parameters(), ours[2], former[2], strict=True):
        assert_close(grad, expected, f"grad {name}")
