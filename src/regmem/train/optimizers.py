"""The optimisers `regmem train --optimizer NAME` builds (`TrainConfig.optimizer`).

"adamw" is nanoGPT's recipe (decay on >= 2-D parameters only). The others are Nested Learning's optimisers read as
associative memories (arXiv:2512.24695, Sec. 4; `regmem.optim`). The Muon family ("muon", "m3") acts on 2-D
hidden weights only, so those runs split the model the usual Muon way (`regmem.optim.param_groups`: embeddings, the
output head, norms and biases go to AdamW) and step both halves as one (`regmem.optim.Combined`).
The momentum-family ones ("delta_momentum", "dmgd", "dgd") step every parameter. Every one takes the run's `lr` and
`weight_decay`; the lr a memory optimiser wants differs from AdamW's, so tune it (`regmem compare` does).
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from regmem.train.config import OptimizerName, TrainConfig


def _decayed_groups(params: list[torch.nn.Parameter], weight_decay: float) -> list[dict]:
    groups = [{"params": [p for p in params if p.dim() >= 2], "weight_decay": weight_decay},
              {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0}]
    return [g for g in groups if g["params"]]


def adamw(model: torch.nn.Module, config: TrainConfig) -> torch.optim.AdamW:
    """AdamW with weight decay on >= 2-D parameters (matrices, embeddings) only; norms and biases are not decayed
    (nanoGPT's configure_optimizers). With `mlp_lr_scale` != 1 the MLPs' parameters (`model.mlp_parameters()`, an
    LM's every FFN and CMS) form groups
    of their own at lr * mlp_lr_scale: measured on MQAR (quick preset, one Gated DeltaNet layer + SwiGLU, lr 0.03,
    seed 0, benchmarks/README.md) the FFN at the mixer's lr drowned it (0.116; 0.985 without the FFN), at 0.1 x
    its lr it did not (0.992)."""
    params = [p for p in model.parameters() if p.requires_grad]
    if config.mlp_lr_scale == 1:
        return torch.optim.AdamW(_decayed_groups(params, config.weight_decay), lr=config.lr, betas=config.betas)
    if not callable(getattr(model, "mlp_parameters", None)):
        raise ValueError(f"mlp_lr_scale={config.mlp_lr_scale} needs a model that names its MLPs' parameters "
                         f"(mlp_parameters(), as regmem's LM does); {type(model).__name__} does not")
    mlp = {id(p) for p in model.mlp_parameters()}
    groups = _decayed_groups([p for p in params if id(p) not in mlp], config.weight_decay)
    groups += [{**group, "lr": config.lr * config.mlp_lr_scale}
               for group in _decayed_groups([p for p in params if id(p) in mlp], config.weight_decay)]
    return torch.optim.AdamW(groups, lr=config.lr, betas=config.betas)


def _muon_family(make: Callable[[list, TrainConfig], torch.optim.Optimizer]):
    def build(model: torch.nn.Module, config: TrainConfig):
        from regmem.optim import Combined, param_groups

        hidden, rest = param_groups(model, muon_lr=config.lr, adamw_lr=config.lr)
        rest_opt = torch.optim.AdamW(_decayed_groups(rest["params"], config.weight_decay), lr=config.lr,
                                     betas=config.betas)
        return Combined([make(hidden["params"], config), rest_opt]) if hidden["params"] else rest_opt
    return build


def _muon(params: list, config: TrainConfig) -> torch.optim.Optimizer:
    """Muon as `regmem.optim.MuonMemory`, which equals `torch.optim.Muon` bit for bit with `ns_dtype=torch.bfloat16`;
    here Newton-Schulz runs in the parameters' dtype (`ns_dtype=None`), because torch's bfloat16 cast costs ~10 s a
    step for a 3.5M-weight model on a CPU without bfloat16 units (benchmarks/README.md). "match_rms_adamw" scales
    the orthogonalised update to AdamW's RMS, so one lr serves both halves."""
    from regmem.optim import MuonMemory

    return MuonMemory(params, lr=config.lr, weight_decay=config.weight_decay, adjust_lr_fn="match_rms_adamw",
                      ns_dtype=None)


def _m3(params: list, config: TrainConfig) -> torch.optim.Optimizer:
    from regmem.optim import M3

    return M3(params, lr=config.lr, weight_decay=config.weight_decay)


def delta_momentum(model: torch.nn.Module, config: TrainConfig) -> torch.optim.Optimizer:
    """Element-wise delta momentum (eqs. 48-49) on every parameter, coupled decay on >= 2-D ones."""
    from regmem.optim import DeltaMomentum

    params = [p for p in model.parameters() if p.requires_grad]
    return DeltaMomentum(_decayed_groups(params, config.weight_decay), lr=config.lr, momentum=config.betas[0])


def dmgd(model: torch.nn.Module, config: TrainConfig) -> torch.optim.Optimizer:
    """Deep momentum GD (eq. 50): each tensor's momentum is a small MLP memory with its own inner step."""
    from regmem.optim import DeepMomentum

    params = [p for p in model.parameters() if p.requires_grad]
    return DeepMomentum(params, lr=config.lr, momentum=config.betas[0])


def dgd(model: torch.nn.Module, config: TrainConfig) -> torch.optim.Optimizer:
    """Delta gradient descent (eqs. 54-57) on every nn.Linear weight, whose inputs it records by forward hooks
    (training passes only); the other parameters take SGD steps."""
    from regmem.optim import DGD

    params = [p for p in model.parameters() if p.requires_grad]
    optimizer = DGD(params, lr=config.lr)
    tracked = set()
    for module in model.modules():
        if isinstance(module, torch.nn.Linear) and module.weight.requires_grad and id(module.weight) not in tracked:
            optimizer.track_inputs(module)
            tracked.add(id(module.weight))
    return optimizer


OPTIMIZERS: dict[OptimizerName, Callable[[torch.nn.Module, TrainConfig], object]] = {
    "adamw": adamw,
    "muon": _muon_family(_muon),
    "m3": _muon_family(_m3),
    "delta_momentum": delta_momentum,
    "dmgd": dmgd,
    "dgd": dgd,
}


def build_optimizer(model: torch.nn.Module, config: TrainConfig):
    """The optimiser `config.optimizer` names, over the model's trainable parameters."""
    return OPTIMIZERS[config.optimizer](model, config)
