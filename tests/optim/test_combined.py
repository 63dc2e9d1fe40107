"""`Combined`: several optimisers over disjoint parameters act as one: the same trajectory as stepping each child,
the children's groups shared (a schedule reaches them), and a state_dict in torch's layout that resumes bit-exactly
through the trainer's checkpoint format."""

import copy

import pytest
import torch

from regmem.optim.combined import Combined
from regmem.train.checkpoint import flatten_optimizer_state, unflatten_optimizer_state


def _model():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.Tanh(), torch.nn.Linear(8, 3))


def _split(model):
    matrices = [p for p in model.parameters() if p.ndim == 2]
    rest = [p for p in model.parameters() if p.ndim != 2]
    return Combined([torch.optim.Muon(matrices, lr=0.02), torch.optim.AdamW(rest, lr=0.01)])


def _steps(model, opt, n, seed=1):
    gen = torch.Generator().manual_seed(seed)
    for _ in range(n):
        x, y = torch.randn(16, 6, generator=gen), torch.randn(16, 3, generator=gen)
        opt.zero_grad()
        torch.nn.functional.mse_loss(model(x), y).backward()
        opt.step()


def test_combined_steps_like_its_children():
    a, b = _model(), _model()
    _steps(a, _split(a), 5)
    mats = [p for p in b.parameters() if p.ndim == 2]
    rest = [p for p in b.parameters() if p.ndim != 2]
    muon, adamw = torch.optim.Muon(mats, lr=0.02), torch.optim.AdamW(rest, lr=0.01)
    gen = torch.Generator().manual_seed(1)
    for _ in range(5):
        x, y = torch.randn(16, 6, generator=gen), torch.randn(16, 3, generator=gen)
        muon.zero_grad()
        adamw.zero_grad()
        torch.nn.functional.mse_loss(b(x), y).backward()
        muon.step()
        adamw.step()
    for p, q in zip(a.parameters(), b.parameters(), strict=True):
        assert torch.equal(p, q)


def test_param_groups_are_the_childrens_dicts():
    model = _model()
    opt = _split(model)
    for group in opt.param_groups:
        group["lr"] = 0.5
    assert all(g["lr"] == 0.5 for child in opt.optimizers for g in child.param_groups)


def test_state_dict_resumes_bit_exactly_through_the_checkpoint_format():
    full = _model()
    _steps(full, _split(full), 6)
    head = _model()
    opt = _split(head)
    _steps(head, opt, 3)
    tensors, rest = flatten_optimizer_state(opt.state_dict())
    resumed = copy.deepcopy(head)
    opt2 = _split(resumed)
    opt2.load_state_dict(unflatten_optimizer_state(tensors, rest))
    gen_state = 3  # continue the same batch stream: steps 4-6 of seed 1
    gen = torch.Generator().manual_seed(1)
    for _ in range(gen_state):
        torch.randn(16, 6, generator=gen), torch.randn(16, 3, generator=gen)
    for _ in range(3):
        x, y = torch.randn(16, 6, generator=gen), torch.randn(16, 3, generator=gen)
        opt2.zero_grad()
        torch.nn.functional.mse_loss(resumed(x), y).backward()
        opt2.step()
    for p, q in zip(resumed.parameters(), full.parameters(), strict=True):
        assert torch.equal(p, q)


def test_closure_and_bad_inputs():
    model = _model()
    opt = _split(model)
    x, y = torch.randn(4, 6), torch.randn(4, 3)

    def closure():
        opt.zero_grad()
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        return loss
    assert torch.isfinite(opt.step(closure))
    with pytest.raises(ValueError, match="optimizers"):
        Combined([])
    with pytest.raises(ValueError, match="disjoint"):
        Combined([torch.optim.SGD(model.parameters(), lr=0.1), torch.optim.SGD(model.parameters(), lr=0.1)])
