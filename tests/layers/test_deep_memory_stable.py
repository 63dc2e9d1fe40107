"""The deep-memory mixers take the engine's step rule (regmem/layers/deep_memory.py): Titans-MLP with DGD at
mini-batch 1 and inner lr 1 blows its memory up under the printed explicit step while the output layer norm hides
it; the proximal step keeps it bounded. A bad step rule raises ValueError naming it."""

import pytest
import torch

from regmem.layers import build_mixer


def _largest_weight(step_rule):
    torch.manual_seed(0)
    mixer = build_mixer("titans_mlp", 64, 4, dgd=True, mini_batch=1, inner_lr=1.0, step_rule=step_rule)
    y, state = mixer(torch.randn(1, 64, 64))
    assert torch.isfinite(y).all()  # the layer norm on the memory's output hides the blow-up
    return state[-1].params.abs().max()


def test_the_proximal_rule_keeps_titans_dgd_memory_bounded_where_the_explicit_one_explodes():
    assert _largest_weight("explicit") > 1e6
    assert _largest_weight("proximal") < 10


def test_bad_step_rule_raises():
    with pytest.raises(ValueError, match="step_rule"):
        build_mixer("ttt_mlp", 64, 4, step_rule="implicit")
