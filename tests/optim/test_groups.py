"""param_groups: hidden 2-D weights to the Muon family (Nested Learning, arXiv:2512.24695, Sec. 4.2 eq. 42,
Sec. 7.2 Algorithm 1), embeddings / head / norms / biases to AdamW."""

import pytest
import torch

from regmem.models import LM, LMConfig
from regmem.optim import M3, MuonMemory, param_groups


def _lm(tie):
    torch.manual_seed(0)
    return LM(LMConfig(vocab_size=32, d_model=16, n_layers=2, n_heads=2, tie_embeddings=tie))


def _names(model, group):
    ids = {id(p) for p in group["params"]}
    return {name for name, p in model.named_parameters() if id(p) in ids}


@pytest.mark.parametrize("tie", [True, False], ids=["tied", "untied"])
def test_every_parameter_in_exactly_one_group_with_embeddings_norms_biases_in_adamw(tie):
    model = _lm(tie)
    muon, adamw = param_groups(model, muon_lr=0.02, adamw_lr=3e-4, adamw_weight_decay=0.01)
    assert (muon["name"], muon["lr"], adamw["name"], adamw["lr"], adamw["weight_decay"]) == \
        ("muon", 0.02, "adamw", 3e-4, 0.01)
    muon_ids, adamw_ids = [id(p) for p in muon["params"]], [id(p) for p in adamw["params"]]
    assert len(set(muon_ids)) == len(muon_ids) and len(set(adamw_ids)) == len(adamw_ids)
    assert not set(muon_ids) & set(adamw_ids)
    assert set(muon_ids) | set(adamw_ids) == {id(p) for p in model.parameters()}
    adamw_names, muon_names = _names(model, adamw), _names(model, muon)
    assert "embed.weight" in adamw_names and (tie or "head.weight" in adamw_names)
    for name, p in model.named_parameters():
        if p.ndim != 2 or "norm" in name or name.endswith("bias"):
            assert name in adamw_names, name
    assert all(p.ndim == 2 for p in muon["params"])
    assert {"blocks.0.ffn.gate_up.weight", "blocks.1.ffn.down.weight", "blocks.0.mixer.q_proj.weight"} <= muon_names


def test_exclude_forces_names_and_module_prefixes_into_adamw():
    model = _lm(False)
    muon, adamw = param_groups(model, muon_lr=0.02, adamw_lr=3e-4,
                               exclude=["blocks.1.ffn", "blocks.0.mixer.q_proj.weight"])
    adamw_names = _names(model, adamw)
    assert {"blocks.1.ffn.gate_up.weight", "blocks.1.ffn.down.weight", "blocks.0.mixer.q_proj.weight"} <= adamw_names
    assert "blocks.0.ffn.gate_up.weight" in _names(model, muon)
    with pytest.raises(ValueError, match="exclude"):
        param_groups(model, muon_lr=0.02, adamw_lr=3e-4, exclude=["blocks.9"])


def test_untied_head_detected_by_vocab_width_and_frozen_params_left_out():
    model = torch.nn.Sequential(torch.nn.Embedding(11, 6), torch.nn.Linear(6, 8), torch.nn.LayerNorm(8),
                                torch.nn.Linear(8, 11))
    model[1].weight.requires_grad_(False)
    muon, adamw = param_groups(model, muon_lr=0.02, adamw_lr=1e-3)
    assert _names(model, muon) == set()
    assert _names(model, adamw) == {"0.weight", "1.bias", "2.weight", "2.bias", "3.weight", "3.bias"}


@pytest.mark.parametrize("opt_cls", [MuonMemory, M3], ids=["MuonMemory", "M3"])
def test_groups_drive_a_training_step(opt_cls):
    model = _lm(True)
    muon, adamw = param_groups(model, muon_lr=0.02, adamw_lr=1e-3)
    optimizers = [opt_cls([muon]), torch.optim.AdamW([adamw])]
    before = {name: p.detach().clone() for name, p in model.named_parameters()}
    tokens = torch.randint(0, 32, (2, 8), generator=torch.Generator().manual_seed(1))
    logits = model(tokens[:, :-1])
    torch.nn.functional.cross_entropy(logits.flatten(0, 1), tokens[:, 1:].flatten()).backward()
    for opt in optimizers:
        opt.step()
    changed = {name for name, p in model.named_parameters() if not torch.equal(p, before[name])}
    assert {"embed.weight", "blocks.0.ffn.down.weight", "norm.weight"} <= changed
