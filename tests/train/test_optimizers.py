"""`TrainConfig.optimizer` / `regmem train --optimizer`: every optimiser of regmem/train/optimizers.py trains a small
regmem LM, and a run interrupted after a checkpoint resumes bit-exactly (parameters and optimiser state) with each
of them; the Muon-family runs put 2-D hidden weights under the Muon-family optimiser and the rest under AdamW."""

from typing import get_args

import pytest
import torch

from regmem.models import LM, LMConfig
from regmem.optim import Combined
from regmem.train import TrainConfig, Trainer
from regmem.train.config import OptimizerName
from regmem.train.optimizers import OPTIMIZERS

VOCAB, T = 11, 8
gen = torch.Generator().manual_seed(0)
INPUTS = torch.randint(0, VOCAB, (64, T), generator=gen)
DATA = (INPUTS, INPUTS.roll(1, dims=1))


class Interrupted(RuntimeError):
    pass


class CrashingLM(torch.nn.Module):
    """A regmem LM whose `crash_at`-th forward call raises (None: never)."""

    def __init__(self, crash_at=None):
        super().__init__()
        torch.manual_seed(0)
        self.lm = LM(LMConfig(vocab_size=VOCAB, d_model=16, n_layers=1, n_heads=2, mixer="gla"))
        self.crash_at, self.calls = crash_at, 0

    def forward(self, inputs):
        self.calls += 1
        if self.crash_at is not None and self.calls == self.crash_at:
            raise Interrupted
        return self.lm(inputs)


def _config(name, out_dir):
    return TrainConfig(steps=8, batch_size=8, lr=0.01, optimizer=name, eval_every=8, checkpoint_every=4,
                       out_dir=str(out_dir), progress=False, warmup_steps=2)


def test_every_optimizer_name_has_a_builder():
    """TrainConfig validates `optimizer` against its Literal; the builders are keyed by exactly those names."""
    assert list(OPTIMIZERS) == list(get_args(OptimizerName))
    with pytest.raises(ValueError, match="optimizer"):
        TrainConfig(steps=1, batch_size=1, optimizer="nosuch")


@pytest.mark.parametrize("name", list(OPTIMIZERS))
def test_every_optimizer_trains_and_resumes_bit_exactly(name, tmp_path):
    straight = Trainer(CrashingLM(), _config(name, tmp_path / "straight"), DATA)
    losses = [r["loss"] for r in straight.fit()["history"]["train"]]
    assert all(torch.isfinite(torch.tensor(losses)))
    with pytest.raises(Interrupted):
        Trainer(CrashingLM(crash_at=6), _config(name, tmp_path / "split"), DATA).fit()
    resumed = Trainer(CrashingLM(), _config(name, tmp_path / "split"), DATA)
    result = resumed.fit(resume=True)
    assert result["start_step"] == 4
    for (key, expected), actual in zip(straight.module.state_dict().items(), resumed.module.state_dict().values(),
                                       strict=True):
        assert torch.equal(actual, expected), f"{name}: {key}"
    a, b = straight.optimizer.state_dict()["state"], resumed.optimizer.state_dict()["state"]
    assert a.keys() == b.keys()
    for index in a:
        for key, value in a[index].items():
            other = b[index][key]
            assert torch.equal(other, value) if isinstance(value, torch.Tensor) else other == value, (name, key)


@pytest.mark.parametrize("name", [n for n in OPTIMIZERS if n in ("muon", "m3")])
def test_muon_family_runs_split_hidden_weights_from_the_rest(name):
    model = CrashingLM()
    optimizer = Trainer(model, TrainConfig(steps=1, batch_size=8, optimizer=name, progress=False), DATA).optimizer
    assert isinstance(optimizer, Combined)
    hidden, *rest = optimizer.optimizers
    hidden_params = {id(p) for g in hidden.param_groups for p in g["params"]}
    assert all(p.ndim == 2 for g in hidden.param_groups for p in g["params"])
    assert id(model.lm.embed.weight) not in hidden_params  # the (tied) embedding and head go to AdamW
    counted = sum(len(g["params"]) for g in optimizer.param_groups)
    assert counted == len([p for p in model.parameters() if p.requires_grad])


def test_unknown_optimizer_is_a_value_error():
    with pytest.raises(ValueError, match="optimizer"):
        TrainConfig(steps=1, batch_size=1, optimizer="lion")


def test_mlp_lr_scale_gives_the_mlps_groups_of_their_own():
    """With mlp_lr_scale every block's FFN and the CMS inside a Hope mixer train at lr * mlp_lr_scale, everything
    else at lr, each parameter once; at 1 AdamW keeps nanoGPT's two groups."""
    from regmem.train.optimizers import adamw

    torch.manual_seed(0)
    lm = LM(LMConfig(vocab_size=VOCAB, d_model=16, n_layers=2, n_heads=2, mixer=("hope", "gla"), ffn="swiglu",
                     mixer_kwargs={"hope": {"cms_chunk_sizes": (2, 4)}}))
    expected = {id(p) for block in lm.blocks for p in block.ffn.parameters()}
    expected |= {id(p) for p in lm.blocks[0].mixer.cms.parameters()}
    assert {id(p) for p in lm.mlp_parameters()} == expected and len(expected) > 4
    optimizer = adamw(lm, TrainConfig(steps=1, batch_size=1, lr=0.01, mlp_lr_scale=0.1))
    slow = {id(p) for g in optimizer.param_groups if g["lr"] == pytest.approx(0.001) for p in g["params"]}
    fast = {id(p) for g in optimizer.param_groups if g["lr"] == 0.01 for p in g["params"]}
    assert slow == expected and not slow & fast
    assert len(slow) + len(fast) == sum(len(g["params"]) for g in optimizer.param_groups) == len(list(lm.parameters()))
    one = adamw(lm, TrainConfig(steps=1, batch_size=1, lr=0.01))
    assert len(one.param_groups) == 2 and all(g["lr"] == 0.01 for g in one.param_groups)
    with pytest.raises(ValueError, match="mlp_lr_scale"):  # a model that does not name its MLPs
        adamw(CrashingLM(), TrainConfig(steps=1, batch_size=1, lr=0.01, mlp_lr_scale=0.1))


def test_bad_mlp_lr_scale_is_a_value_error():
    for bad in (0, -0.1):
        with pytest.raises(ValueError, match="mlp_lr_scale"):
            TrainConfig(steps=1, batch_size=1, mlp_lr_scale=bad)
    with pytest.raises(ValueError, match="mlp_lr_scale"):  # it scales AdamW's lr
        TrainConfig(steps=1, batch_size=1, optimizer="muon", mlp_lr_scale=0.1)
