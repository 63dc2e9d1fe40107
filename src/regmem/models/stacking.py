"""Ad-hoc level stacking: Nested Learning, arXiv:2512.24695, Sec. 7.3 -- a CMS initialised from a trained model.

`stack_levels(model, chunk_sizes, lr)` turns every SwiGLU FFN of a trained regmem LM into a Continuum Memory System
(regmem.nested.CMS) whose levels start from that FFN, then lets the levels learn in context (eq. 71). How k levels
are formed from one trained MLP is left open by the paper; here the first level is the trained FFN itself and each
further level (`extra`) is either a copy whose output projection starts at zero ("zero": it adds nothing until it
has learnt something in context, so with lr = 0 the stacked model *is* the trained one) or a plain copy ("copy":
the same MLP applied k times, a different function from the start).

With lr = 0 the outputs equal the trained model's exactly; with lr > 0 they still do until the fastest level's first
chunk ends (updates only act after a boundary).
"""

from __future__ import annotations

import dataclasses
from typing import Literal, get_args

import torch

from regmem.models.ffn import SwiGLU, SwiGLUConfig
from regmem.models.lm import LM
from regmem.nested import CMSConfig
from regmem.nested.cms import Objective, StepRule, Variant

Extra = Literal["zero", "copy"]  # how the levels after the first start (module docstring)


def stack_levels(model: LM, chunk_sizes: tuple[int, ...], lr: float | tuple[float, ...] = CMSConfig.lr, *,
                 variant: Variant = CMSConfig.variant, objective: Objective = CMSConfig.objective,
                 step_rule: StepRule = CMSConfig.step_rule, extra: Extra = "zero") -> LM:
    """A new LM: `model`'s weights, every SwiGLU FFN replaced by a CMS seeded from it (module docstring). lr,
    variant, objective and step_rule are CMSConfig's fields (and defaults); the levels are as wide as the SwiGLU."""
    if not isinstance(model.config.ffn, SwiGLUConfig):
        raise ValueError(f"model must have SwiGLU FFNs to stack levels from, got ffn={model.config.ffn!r}")
    if extra not in get_args(Extra):
        raise ValueError(f"extra must be one of {get_args(Extra)}, got {extra!r}")
    cms = CMSConfig(chunk_sizes=tuple(chunk_sizes), lr=lr, hidden=model.config.ffn.hidden(model.config.d_model),
                    variant=variant, objective=objective, step_rule=step_rule)
    config = dataclasses.replace(model.config, ffn=cms)
    reference = next(model.parameters())
    stacked = LM(config).to(device=reference.device, dtype=reference.dtype)
    own = {k: v for k, v in model.state_dict().items() if ".ffn." not in k and ".ffn_norm." not in k}
    missing = stacked.load_state_dict(own, strict=False).missing_keys
    if any(".ffn." not in key for key in missing):
        raise ValueError(f"model's weights do not fit the stacked model: missing {missing}")
    with torch.no_grad():
        for source, target in zip(model.blocks, stacked.blocks, strict=True):
            _seed_cms(source.ffn, source.ffn_norm, target.ffn, extra)
    return stacked


def _seed_cms(ffn: SwiGLU, norm: torch.nn.RMSNorm, cms, extra: Extra) -> None:
    hidden = ffn.down.in_features
    gate, up = ffn.gate_up.weight[:hidden].T, ffn.gate_up.weight[hidden:].T  # [D, F] each
    for level in range(cms.config.levels):
        cms.gate[level].copy_(gate)
        cms.up[level].copy_(up)
        cms.norm_weight[level].copy_(norm.weight)
        if level == 0 or extra == "copy":
            cms.down[level].copy_(ffn.down.weight.T)
        else:
            cms.down[level].zero_()
        if cms.value is not None:
            cms.value[level].copy_(torch.eye(cms.d_model))
