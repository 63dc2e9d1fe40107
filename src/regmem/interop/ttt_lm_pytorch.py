"""Official TTT (github.com/test-time-training/ttt-lm-pytorch, `ttt.py`, written against commit 6990c68) -> regmem's
`TTTLinear` and `TTTMLP`.

The upstream layer (`TTTBase`, Sun et al., arXiv:2407.04620, Sec. 2.7 and App. A) has the parameters

    q_proj.weight, k_proj.weight, v_proj.weight, o_proj.weight [W, W]    (no biases; W = hidden_size = H * D)
    learnable_ttt_lr_weight [H, W, 1], learnable_ttt_lr_bias [H, 1]       the inner step's gate per head
    learnable_token_idx [C]                                               the learnt offset of the 1/(i + 1) factors
    ttt_norm_weight, ttt_norm_bias [H, D]                                 the inner model's LayerNorm affine
    post_norm.weight, post_norm.bias [W]                                  one LayerNorm over all heads (eps 1e-6)
    W1 [H, D, D], b1 [H, 1, D]                   (TTT-Linear)             the initial inner model per head
    W1 [H, D, 4D], b1 [H, 1, 4D], W2 [H, 4D, D], b2 [H, 1, D] (TTT-MLP)
    g_proj.weight [W, W]                         with use_gate=True

and computes, per head and mini-batch of C tokens (t mod C = i): q and k rotated by RoPE at position i (pairs of
neighbouring channels, `permute_qk` around a half-split rotation), the inner model f(z) = z + LN(g(z)) fitted to
(k_j, v_j) by ½‖f(k_j) − v_j‖² with every gradient at the mini-batch's start, step eta_ij = c_i base_lr
sigmoid(x_j w + b) / D with c_i = max(1/(i + 1) + token_offset_i, 0); output i is f(q_i) with the parameters
after the gradients j <= i of its mini-batch, post_norm over all heads, ⊙ gelu_tanh(g_proj x) with use_gate, o_proj.
TTT-MLP's g is a two-layer MLP with the tanh-approximated GELU.

regmem's options for the same function: `short_conv=0`, `qk_norm=False`, `position_step=True` (the c_i,
`position_bias` = learnable_token_idx), `inner_lr = base_lr / D`, `rotary=True` (positions within the mini-batch),
`output_norm="layer"`, `norm_eps=1e-6`, `gate_activation="gelu_tanh"`, `output_gate=use_gate`, TTT-MLP's
`activation="gelu_tanh"`; the initial weights and biases are packed per head as the inner model's flat parameters
(each bias the last row of its weight). Refused: `share_qk=True` (one projection and two convolutions: the
`conv_q`/`conv_k` keys) and a mini-batch whose last factor c_{C-1} is below 1e-6 (regmem keeps the state moving by
1e-6 of a step there; upstream's stops). The block around the layer (`pre_conv`, the norms and the residual of
`Block`) is the language model's, not the layer's, and is not converted.
"""

from __future__ import annotations

import torch

from regmem.interop.common import check_keys, check_shapes, load_exact
from regmem.layers.deep_memory import TTTMLP, TTTLinear

UPSTREAM_LINEAR, UPSTREAM_MLP = "ttt_lm_pytorch.TTTLinear", "ttt_lm_pytorch.TTTMLP"
COMMON = {"q_proj.weight", "k_proj.weight", "v_proj.weight", "o_proj.weight", "learnable_ttt_lr_weight",
          "learnable_ttt_lr_bias", "learnable_token_idx", "ttt_norm_weight", "ttt_norm_bias", "post_norm.weight",
          "post_norm.bias"}
SHARE_QK = {"conv_q.weight", "conv_q.bias", "conv_k.weight", "conv_k.bias"}
POST_NORM_EPS = 1e-6  # TTTBase's post_norm; the inner LayerNorm's 1e-6 is regmem's too (ops/ttt/model.py)


def _convert(state_dict: dict, weights: list[str], upstream: str, *, ttt_base_lr: float, rope_theta: float,
             chunk_size: int | None):
    """The layer's sizes from the shapes, the common tensors under regmem's names, and the layer's options."""
    if SHARE_QK & set(state_dict):
        raise ValueError(f"{upstream} with share_qk=True (conv_q, conv_k) has no regmem counterpart")
    check_keys(state_dict, COMMON | set(weights), {"g_proj.weight"}, upstream)
    heads, width = state_dict["learnable_ttt_lr_weight"].shape[:2]
    if width % heads:
        raise ValueError(f"learnable_ttt_lr_weight: hidden size {width} is not a multiple of {heads} heads")
    head_dim, mini_batch = width // heads, state_dict["learnable_token_idx"].shape[0]
    gate = "g_proj.weight" in state_dict
    square = {f"{p}.weight": (width, width) for p in ("q_proj", "k_proj", "v_proj", "o_proj")}
    check_shapes(state_dict, {**square, "learnable_ttt_lr_weight": (heads, width, 1),
                               "learnable_ttt_lr_bias": (heads, 1), "ttt_norm_weight": (heads, head_dim),
                               "ttt_norm_bias": (heads, head_dim), "post_norm.weight": (width,),
                               "post_norm.bias": (width,), **({"g_proj.weight": (width, width)} if gate else {})},
                  upstream)
    offsets = state_dict["learnable_token_idx"].double()
    last = 1.0 / mini_batch + float(offsets[-1])
    if not last >= 1e-6:
        raise ValueError(f"learnable_token_idx: the last factor 1/C + offset is {last:.3g} < 1e-6, where "
                         f"upstream's state stops moving and regmem's moves by 1e-6 of a step")
    options = dict(head_dim=head_dim, short_conv=0, qk_norm=False, position_step=True, mini_batch=mini_batch,
                   inner_lr=ttt_base_lr / head_dim, rotary=True, rope_base=rope_theta, output_norm="layer",
                   norm_eps=POST_NORM_EPS, gate_activation="gelu_tanh", output_gate=gate,
                   chunk_size=min(chunk_size or mini_batch, mini_batch))
    tensors = {name: state_dict[name] for name in square}
    tensors |= {"gate_proj.weight": state_dict["learnable_ttt_lr_weight"][..., 0],
                "gate_bias": state_dict["learnable_ttt_lr_bias"][:, 0],
                "position_bias": state_dict["learnable_token_idx"], "ln_weight": state_dict["ttt_norm_weight"],
                "ln_bias": state_dict["ttt_norm_bias"], "o_norm.weight": state_dict["post_norm.weight"],
                "o_norm.bias": state_dict["post_norm.bias"]}
    if gate:
        tensors["g_proj.weight"] = state_dict["g_proj.weight"]
    return heads, width, options, tensors


def _load(layer, state_dict: dict, tensors: dict, depth: int):
    """Packs the inner model's initial weights per head as its flat parameters (each weight with its bias as the
    last row: ops/ttt/model.py) and copies everything in the state dict's dtype (float64 gives a float64 layer)."""
    layers = [torch.cat([state_dict[f"W{i}"], state_dict[f"b{i}"]], dim=-2) for i in range(1, depth + 1)]
    tensors = {**tensors, "memory_init": torch.cat([w.flatten(-2) for w in layers], dim=-1)}
    dtype = state_dict["W1"].dtype
    return load_exact(layer.to(dtype), {k: v.detach().to(dtype) for k, v in tensors.items()})


def from_ttt_lm_pytorch_linear(state_dict: dict, *, ttt_base_lr: float = 1.0, rope_theta: float = 10000.0,
                               chunk_size: int | None = None) -> TTTLinear:
    """The regmem `TTTLinear` whose forward equals official TTT's `TTTLinear` with these weights (module docstring);
    `ttt_base_lr` and `rope_theta` are TTTConfig's (not in the state dict)."""
    heads, width, options, tensors = _convert(state_dict, ["W1", "b1"], UPSTREAM_LINEAR, ttt_base_lr=ttt_base_lr,
                                              rope_theta=rope_theta, chunk_size=chunk_size)
    D = width // heads
    check_shapes(state_dict, {"W1": (heads, D, D), "b1": (heads, 1, D)}, UPSTREAM_LINEAR)
    return _load(TTTLinear(width, heads, **options), state_dict, tensors, depth=1)


def from_ttt_lm_pytorch_mlp(state_dict: dict, *, ttt_base_lr: float = 1.0, rope_theta: float = 10000.0,
                            chunk_size: int | None = None) -> TTTMLP:
    """The regmem `TTTMLP` whose forward equals official TTT's `TTTMLP` with these weights (module docstring)."""
    heads, width, options, tensors = _convert(state_dict, ["W1", "b1", "W2", "b2"], UPSTREAM_MLP,
                                              ttt_base_lr=ttt_base_lr, rope_theta=rope_theta, chunk_size=chunk_size)
    D = width // heads
    hidden = state_dict["W1"].shape[-1]
    if hidden % D:
        raise ValueError(f"W1: the hidden width {hidden} is not a multiple of the head dim {D}")
    check_shapes(state_dict, {"W1": (heads, D, hidden), "b1": (heads, 1, hidden), "W2": (heads, hidden, D),
                               "b2": (heads, 1, D)}, UPSTREAM_MLP)
    layer = TTTMLP(width, heads, expand=hidden // D, activation="gelu_tanh", **options)
    return _load(layer, state_dict, tensors, depth=2)
