"""Why self-modifying Titans leaves eq. 88's DGD term off by default (regmem/layers/self_modifying.py).

Eq. 88 adds DGD's decay -eta k k^T to the gradient of the l2 loss, which already holds the term M k k^T. For a linear
memory and a unit key one write maps the recall M k to (1 - 2 rho) M k + rho v, so writing one pair again and again
converges to v / 2. Without the DGD term (plain GD, the default) and with DGD under the dot-product loss (eq. 56's
derivation, which makes it the delta rule) the recall converges to v.
"""

import pytest
import torch

from regmem.ops import InnerModel, ttt

K = 8


def _recall_after_writing_one_pair(dgd: bool, loss: str, step_rule: str, writes: int = 60):
    gen = torch.Generator().manual_seed(0)
    k = torch.nn.functional.normalize(torch.randn(1, 1, 1, K, generator=gen, dtype=torch.float64), dim=-1)
    v = torch.randn(1, 1, 1, K, generator=gen, dtype=torch.float64)
    k, v = k.expand(1, writes, 1, K), v.expand(1, writes, 1, K)
    beta = torch.full((1, writes, 1), 0.3, dtype=torch.float64)
    o, _ = ttt(k, k, v, beta, model=InnerModel(), loss=loss, dgd=dgd, step_rule=step_rule, mini_batch=1,
               mode="recurrent")
    return o[0, -1, 0], v[0, 0, 0]  # read with q = k after the last write


@pytest.mark.parametrize("step_rule", ["explicit", "proximal"])
def test_dgd_on_the_l2_loss_recalls_half_the_value(step_rule):
    recall, v = _recall_after_writing_one_pair(True, "l2", step_rule)
    torch.testing.assert_close(recall, v / 2)


@pytest.mark.parametrize(("dgd", "loss"), [(False, "l2"), (True, "dot")])
@pytest.mark.parametrize("step_rule", ["explicit", "proximal"])
def test_plain_gd_and_dgd_on_the_dot_loss_recall_the_value(dgd, loss, step_rule):
    recall, v = _recall_after_writing_one_pair(dgd, loss, step_rule)
    torch.testing.assert_close(recall, v)
