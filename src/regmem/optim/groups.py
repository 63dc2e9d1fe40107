"""Split a model's parameters the way Muon practice does: hidden 2-D weight matrices to a Muon-family optimiser
(`MuonMemory`, `M3`; the Newton-Schulz read-out of Behrouz et al., *Nested Learning: The Illusion of Deep Learning
Architectures*, arXiv:2512.24695, Sec. 4.2 eq. 42 and Sec. 7.2 Algorithm 1), everything else to AdamW.

A parameter goes to the AdamW group when any of these holds (checked in this order):
  1. its name (as in `model.named_parameters()`) is in `exclude`, or starts with an entry of `exclude` + ".";
  2. it is not 2-D (biases, norm weights, scalars, conv kernels);
  3. it belongs to an `nn.Embedding` (the input embedding, also when tied to the output head);
  4. it is the weight of an `nn.Linear` whose out_features equals some embedding's num_embeddings (the vocabulary
     head, tied or not). A hidden Linear that happens to have the vocabulary's width is caught by this rule too.
Everything else -- 2-D weights of hidden layers -- goes to the Muon group. Each trainable parameter appears in
exactly one group (tied parameters are listed by `named_parameters()` once); frozen ones (requires_grad=False) in
none.
"""

from __future__ import annotations

from collections.abc import Iterable

import torch
from torch import nn


def _is_excluded(name: str, exclude: tuple[str, ...]) -> bool:
    return any(name == e or name.startswith(e + ".") for e in exclude)


def _embedding_like(model: nn.Module) -> set[int]:
    """ids of parameters of nn.Embedding modules and of vocabulary-head Linear weights (module docstring 3-4)."""
    embeddings = [m for m in model.modules() if isinstance(m, nn.Embedding)]
    vocab_sizes = {m.num_embeddings for m in embeddings}
    found = {id(p) for m in embeddings for p in m.parameters()}
    for module in model.modules():
        if isinstance(module, nn.Linear) and module.out_features in vocab_sizes:
            found.add(id(module.weight))
    return found


def param_groups(
    model: nn.Module,
    *,
    muon_lr: float,
    adamw_lr: float,
    muon_weight_decay: float = 0.0,
    adamw_weight_decay: float = 0.0,
    exclude: Iterable[str] = (),
) -> list[dict]:
    """[muon_group, adamw_group]: dicts with "params", "lr", "weight_decay" and "name" ("muon" / "adamw").

    Give the first to `MuonMemory`/`M3`/`torch.optim.Muon`, the second to `torch.optim.AdamW`, e.g.
    `muon, adamw = param_groups(model, muon_lr=0.02, adamw_lr=3e-4)`; `MuonMemory([muon])`, `AdamW([adamw])`.
    `exclude`: parameter names or module-name prefixes forced into the AdamW group. Either group may be empty
    (torch.optim refuses an empty parameter list, so drop it before constructing). See the module docstring.
    """
    exclude = tuple(exclude)
    names = {name for name, _ in model.named_parameters()}
    unknown = [e for e in exclude if not any(_is_excluded(n, (e,)) for n in names)]
    if unknown:
        raise ValueError(f"exclude names no parameter of the model: {unknown}")
    embedding_like = _embedding_like(model)
    muon: list[torch.Tensor] = []
    adamw: list[torch.Tensor] = []
    for name, p in model.named_parameters():
        if not p.requires_grad:
            continue
        hidden_matrix = p.ndim == 2 and id(p) not in embedding_like and not _is_excluded(name, exclude)
        (muon if hidden_matrix else adamw).append(p)
    return [
        {"params": muon, "lr": muon_lr, "weight_decay": muon_weight_decay, "name": "muon"},
        {"params": adamw, "lr": adamw_lr, "weight_decay": adamw_weight_decay, "name": "adamw"},
    ]
