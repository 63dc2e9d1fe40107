"""Weights from the public implementations: converters from their modules' state dicts into regmem layers with
equal outputs (docs/interop.md tables each mapping, its tolerance and the conventions that differ).

Each converter takes the upstream module's `state_dict()` (plain tensors: nothing of the upstream package is
imported, so none of them needs it installed) and its constructor options, reads the sizes from the tensors' shapes,
refuses a key it does not know or a missing one (ValueError naming them), and returns the regmem layer with the
options that make it compute the same function. `CONVERTERS` lists them by upstream name; `convert(name, ...)` calls
one.
"""

from __future__ import annotations

from regmem.interop.fla import from_fla_deltanet, from_fla_gated_deltanet, from_fla_gla
from regmem.interop.mamba_ssm import from_mamba_ssm_mamba, from_mamba_ssm_mamba2
from regmem.interop.titans_pytorch import from_titans_pytorch_neural_memory
from regmem.interop.ttt_lm_pytorch import from_ttt_lm_pytorch_linear, from_ttt_lm_pytorch_mlp

CONVERTERS = {
    "mamba_ssm.Mamba": from_mamba_ssm_mamba,
    "mamba_ssm.Mamba2": from_mamba_ssm_mamba2,
    "fla.layers.GatedDeltaNet": from_fla_gated_deltanet,
    "fla.layers.DeltaNet": from_fla_deltanet,
    "fla.layers.GatedLinearAttention": from_fla_gla,
    "ttt_lm_pytorch.TTTLinear": from_ttt_lm_pytorch_linear,
    "ttt_lm_pytorch.TTTMLP": from_ttt_lm_pytorch_mlp,
    "titans_pytorch.NeuralMemory": from_titans_pytorch_neural_memory,
}


def convert(upstream: str, state_dict: dict, **options):
    """The regmem layer equal to `upstream`'s module (a key of CONVERTERS) with weights `state_dict`."""
    if upstream not in CONVERTERS:
        raise ValueError(f"upstream must be one of {sorted(CONVERTERS)}, got {upstream!r}")
    return CONVERTERS[upstream](state_dict, **options)


__all__ = ["CONVERTERS", "convert", "from_fla_deltanet", "from_fla_gated_deltanet", "from_fla_gla",
           "from_mamba_ssm_mamba", "from_mamba_ssm_mamba2", "from_titans_pytorch_neural_memory",
           "from_ttt_lm_pytorch_linear", "from_ttt_lm_pytorch_mlp"]
