"""The attn mixer ends in torch's SDPA rather than in the `softmax_attn` op (regmem/layers/attention.py says why);
here its attention equals the op's, with and without a cache, padding, grouped heads and QK-norm, so the op stays the
specification of what the layer computes."""

import pytest
import torch

from regmem.layers import SoftmaxAttention
from regmem.layers.base import repeat_heads
from regmem.ops import KVState, softmax_attn


@pytest.mark.parametrize("options", [{}, {"qk_norm": True}, {"n_kv_heads": 1}], ids=["plain", "qknorm", "gqa"])
@pytest.mark.parametrize("cached", [0, 5], ids=["nocache", "cache5"])
def test_the_layers_attention_equals_the_softmax_attn_op(options, cached):
    torch.manual_seed(0)
    layer = SoftmaxAttention(16, 2, **options).double()
    B, T, H, D = 2, 7, 2, 8
    H_kv = layer.n_kv_heads
    q = torch.randn(B, T, H, D, dtype=torch.float64)
    k, v = (torch.randn(B, cached + T, H_kv, D, dtype=torch.float64) for _ in range(2))
    key_mask = torch.ones(B, cached + T, dtype=torch.bool)
    key_mask[1, :3] = False  # a left-padded row
    with torch.no_grad():
        got = layer._attend(q, k, v, key_mask, cached, plain=False)
        q_op, k_op, scale = layer._scaled(q, k)
        k_op, v_op = repeat_heads(k_op, H), repeat_heads(v, H)
        cache = KVState(k_op[:, :cached], v_op[:, :cached]) if cached else None
        expected, _ = softmax_attn(q_op, k_op[:, cached:], v_op[:, cached:], scale=scale, initial_state=cache,
                                   key_mask=key_mask)
    torch.testing.assert_close(got, expected, rtol=1e-12, atol=1e-12)
