"""titans-pytorch's `NeuralMemory` (github.com/lucidrains/titans-pytorch, `neural_memory.py`, written against release
0.5.5) -> regmem's `NeuralMemory` layer (regmem/layers/neural_memory.py, whose docstring writes out the function).

The upstream module at its defaults (`batch_size=None`, `momentum=True` of order 1, `pre_rmsnorm=True`,
`post_rmsnorm=False`, `qk_rmsnorm=False`, `mem_model_norm_add_residual=True`, the `MemoryMLP` memory,
`per_head_learned_parameters=True`, no activation on q, k, v) has the parameters

    store_norm.weight, retrieve_norm.weight [dim]                       the RMSNorms in front of storing and reading
    to_queries.weight, to_keys.weight, to_values.weight [H d, dim]      bias-free projections
    to_adaptive_step.0.{weight [H, dim], bias [H]}                      the token's step logit
    to_momentum.0.{weight, bias}, to_decay_factor.0.{weight, bias}      the chunk's momentum and decay logits
    retrieve_gate.0.weight [H, dim], combine_heads.weight [dim, H d]    with heads > 1 only
    memory_model_parameters.0 [H, d]                                     the memory's LayerNorm gain offset γ
    memory_model_parameters.{1..depth} [H, d, e], ..., [H, e, d]        the memory MLP's initial weights per head
    memory_model.norm.gamma, memory_model.model.weights.*                un-repeated templates, unused by its forward

Constructor options that the state dict does not hold are the converter's arguments: `chunk_size` (an int: one
chunk size for storing and reading) and `max_lr` (`default_step_transform_max_lr`, 1.0). Options that change the
function are not expressible: those that add keys (`post_rmsnorm`, `qk_rmsnorm`, `per_parameter_lr_modulation`,
`attn_pool_chunks`, `learned_momentum_combine`, `accept_weight_residual`, `gated_transition`) are refused as unknown
keys, those that drop or reshape one (`momentum=False`, a momentum order above 1, `num_kv_per_token > 1`,
`per_head_learned_parameters=False`) as a missing key or a wrong shape; `batch_size` and
`store_with_lookahead_value` leave the weights unchanged, so they are the caller's to rule out.
"""

from __future__ import annotations

import re

from regmem.interop.common import check_keys, check_shapes, load_exact
from regmem.layers.neural_memory import NeuralMemory

UPSTREAM = "titans_pytorch.NeuralMemory"
REQUIRED = {"store_norm.weight", "retrieve_norm.weight", "to_queries.weight", "to_keys.weight", "to_values.weight",
            "to_adaptive_step.0.weight", "to_adaptive_step.0.bias", "to_momentum.0.weight", "to_momentum.0.bias",
            "to_decay_factor.0.weight", "to_decay_factor.0.bias", "memory_model.norm.gamma"}
MULTIHEAD = {"retrieve_gate.0.weight", "combine_heads.weight"}


def from_titans_pytorch_neural_memory(state_dict: dict, *, chunk_size: int, max_lr: float = 1.0) -> NeuralMemory:
    """A `NeuralMemory` layer equal to titans-pytorch's `NeuralMemory(dim, heads=H, dim_head=d, chunk_size=C)` at its
    other defaults with weights `state_dict` (module docstring); the layer is cast to the weights' dtype."""
    if isinstance(chunk_size, bool) or not isinstance(chunk_size, int) or chunk_size < 1:
        raise ValueError(f"chunk_size must be a positive int (upstream's store and retrieve chunk size), got "
                         f"{chunk_size!r}")
    memory = sorted((k for k in state_dict if re.fullmatch(r"memory_model_parameters\.\d+", k)),
                    key=lambda k: int(k.rsplit(".", 1)[1]))
    if len(memory) < 2 or memory != [f"memory_model_parameters.{i}" for i in range(len(memory))]:
        raise ValueError(f"state_dict must hold {UPSTREAM}'s memory_model_parameters.0 (the gain) and .1, .2, ... "
                         f"(the MLP), got {memory}")
    heads = state_dict["to_adaptive_step.0.weight"].shape[0] if "to_adaptive_step.0.weight" in state_dict else 0
    depth = len(memory) - 1
    templates = {f"memory_model.model.weights.{i}" for i in range(depth)}
    check_keys(state_dict, REQUIRED | set(memory) | templates | (MULTIHEAD if heads > 1 else set()), set(),
               UPSTREAM)
    gain, layers = state_dict[memory[0]], [state_dict[k] for k in memory[1:]]
    if gain.ndim != 2 or any(w.ndim != 3 for w in layers):
        raise ValueError(f"{UPSTREAM}: memory_model_parameters must be per head ([H, d] and [H, rows, columns]: "
                         f"per_head_learned_parameters=True), got shapes {[list(state_dict[k].shape) for k in memory]}")
    dim, (_, head_dim) = state_dict["store_norm.weight"].shape[0], gain.shape
    hidden = layers[0].shape[-1]
    dims = (head_dim, *(hidden,) * (depth - 1), head_dim)
    inner = heads * head_dim
    expected = {"retrieve_norm.weight": (dim,), "store_norm.weight": (dim,), memory[0]: (heads, head_dim),
                **{f"to_{p}.weight": (inner, dim) for p in ("queries", "keys", "values")},
                **{f"to_{p}.0.weight": (heads, dim) for p in ("adaptive_step", "momentum", "decay_factor")},
                **{f"to_{p}.0.bias": (heads,) for p in ("adaptive_step", "momentum", "decay_factor")},
                **{k: (heads, a, b) for k, a, b in zip(memory[1:], dims[:-1], dims[1:], strict=True)},
                "memory_model.norm.gamma": (head_dim,),  # the un-repeated templates: checked, not used
                **{f"memory_model.model.weights.{i}": (a, b) for i, (a, b) in enumerate(zip(dims[:-1], dims[1:],
                                                                                             strict=True))}}
    if heads > 1:
        expected |= {"retrieve_gate.0.weight": (heads, dim), "combine_heads.weight": (dim, inner)}
    check_shapes(state_dict, expected, UPSTREAM)
    layer = NeuralMemory(dim, heads, head_dim, chunk_size=chunk_size, depth=depth, hidden_dim=hidden,
                         max_lr=max_lr).to(gain.dtype)
    tensors = {"store_norm.weight": state_dict["store_norm.weight"],
               "retrieve_norm.weight": state_dict["retrieve_norm.weight"],
               "q_proj.weight": state_dict["to_queries.weight"], "k_proj.weight": state_dict["to_keys.weight"],
               "v_proj.weight": state_dict["to_values.weight"], "memory_gain": gain,
               **{f"memory_weights.{i}": w for i, w in enumerate(layers)}}
    for ours, theirs in (("step_proj", "to_adaptive_step"), ("momentum_proj", "to_momentum"),
                         ("decay_proj", "to_decay_factor")):
        tensors |= {f"{ours}.weight": state_dict[f"{theirs}.0.weight"], f"{ours}.bias": state_dict[f"{theirs}.0.bias"]}
    if heads > 1:
        tensors |= {"gate_proj.weight": state_dict["retrieve_gate.0.weight"],
                    "o_proj.weight": state_dict["combine_heads.weight"]}
    return load_exact(layer, {name: t.to(gain.dtype) for name, t in tensors.items()})


__all__ = ["UPSTREAM", "from_titans_pytorch_neural_memory"]

