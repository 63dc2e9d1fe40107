"""fla (flash-linear-attention, written against 0.6.0; 0.5.2's keys are the same) -> regmem's GatedDeltaNet, DeltaNet
and GLA.

What the three fla layers compute, and where regmem's layers meet them (docs/interop.md has the key tables):
- q, k, v are projections, each through a causal depthwise conv of width `conv_size` followed by silu (regmem's
  `short_conv`, same tap order); fla's `conv_bias=True` is regmem's `short_conv_bias`. Without a conv fla's
  GatedDeltaNet and DeltaNet still apply silu to q, k, v, which regmem's `short_conv=0` does not: refused.
- GatedDeltaNet: beta = sigmoid(b_proj x) (x2 with allow_neg_eigval), g = -exp(A_log) softplus(a_proj x + dt_bias),
  q and k L2-normalised per head, scale head_dim^-1/2, then RMSNorm(o) w ⊙ silu(g_proj x) with one norm weight for all
  heads (or RMSNorm alone without the gate), o_proj. fla's b_proj has no bias: regmem's is set to zero.
  With `num_v_heads > num_heads` each q/k head serves several value heads; regmem groups k with v instead, so the
  q/k rows (and conv channels) are repeated per value head, which is exact.
- DeltaNet: the same without the decay; fla's default has no output gate. `use_beta=False` (beta = 1) is a b_proj of
  zeros with bias 100 (sigmoid(100) is 1 in float32 and float64). Only qk_activation "silu" with qk_norm "l2"
  (the defaults) has a regmem counterpart.
- GatedLinearAttention: gk = logsigmoid(W_2 W_1 x + b) / gate_logit_normalizer per key channel; no conv by default
  (regmem's short_conv=0), no q/k norm; the output norm is `g_norm_swish_gate` (fused) or `g_norm`. With
  num_kv_heads < num_heads fla's gate has a row per kv head, regmem's per query head: repeated.
- The L2 norm's epsilon: fla divides by sqrt(sum x^2 + 1e-6), regmem by max(|x|, 1e-6), a relative difference of
  5e-7 at |x| = 1 (the outputs agree to ~1e-6, not to round-off; tests/interop/test_fla.py shows both).
"""

from __future__ import annotations

import torch

from regmem.interop.common import check_keys, load_exact
from regmem.layers.deltanet import DeltaNet, GatedDeltaNet
from regmem.layers.gla import GLA

CONVS = ("q_conv1d", "k_conv1d", "v_conv1d")
BETA_ONE_LOGIT = 100.0  # sigmoid(100) rounds to 1 in float32 and float64: fla's use_beta=False


def _repeat_heads(w: torch.Tensor, heads: int, times: int) -> torch.Tensor:
    """[heads * d, ...] -> [heads * times * d, ...]: each head's rows repeated `times` times in place."""
    return w if times == 1 else w.unflatten(0, (heads, -1)).repeat_interleave(times, 0).flatten(0, 1)


def _conv_keys(state_dict: dict, upstream: str, *, required: bool) -> tuple[set[str], bool]:
    """The conv keys present (all three weights, biases all or none); whether they have biases."""
    weights = {f"{c}.weight" for c in CONVS}
    biases = {f"{c}.bias" for c in CONVS}
    has = weights & set(state_dict)
    if has and has != weights:
        raise ValueError(f"state_dict has {sorted(has)} but not all of {sorted(weights)}")
    if required and not has:
        raise ValueError(f"{upstream} without short convolutions (use_short_conv=False) applies silu to q, k, v; "
                         "regmem's short_conv=0 applies none: not convertible")
    with_bias = biases & set(state_dict)
    if with_bias and with_bias != biases:
        raise ValueError(f"state_dict has {sorted(with_bias)} but not all of {sorted(biases)}")
    return has | with_bias, bool(with_bias)


def _value_ratio(key_dim: int, value_dim: int) -> float:
    """expand_v such that int(key_dim * expand_v) == value_dim (regmem's MemoryMixer truncates)."""
    return (value_dim + 0.5) / key_dim


def _conv_and_output(state_dict: dict, tensors: dict, q_rows) -> None:
    """The conv weights (q and k through `q_rows`), the gate and output norm into `tensors`."""
    for i, name in enumerate(CONVS):
        for part in ("weight", "bias"):
            key = f"{name}.{part}"
            if key in state_dict:
                value = state_dict[key]
                tensors[f"convs.{i}.conv.{part}"] = q_rows(value) if i < 2 else value
    if "g_proj.weight" in state_dict:
        tensors["g_proj.weight"] = state_dict["g_proj.weight"]


def from_fla_gated_deltanet(state_dict: dict, *, num_heads: int, allow_neg_eigval: bool = False,
                            norm_eps: float = 1e-5, chunk_size: int = 64) -> GatedDeltaNet:
    """regmem's GatedDeltaNet equal to `fla.layers.GatedDeltaNet(num_heads=num_heads, ...)` with these weights (the
    other sizes, num_v_heads, use_gate and conv_bias are read from the state dict)."""
    upstream = "fla.layers.GatedDeltaNet"
    conv, conv_bias = _conv_keys(state_dict, upstream, required=True)
    gate = {"g_proj.weight"} if "g_proj.weight" in state_dict else set()
    base = {"q_proj.weight", "k_proj.weight", "v_proj.weight", "a_proj.weight", "b_proj.weight", "A_log", "dt_bias",
            "o_norm.weight", "o_proj.weight"}
    check_keys(state_dict, base | conv | gate, set(), upstream)
    value_heads = state_dict["A_log"].shape[0]
    if value_heads % num_heads:
        raise ValueError(f"num_heads {num_heads} must divide the {value_heads} value heads (A_log)")
    d_model = state_dict["q_proj.weight"].shape[1]
    key_dim = state_dict["q_proj.weight"].shape[0] // num_heads
    value_dim = state_dict["v_proj.weight"].shape[0] // value_heads
    layer = GatedDeltaNet(d_model, value_heads, head_dim=key_dim, expand_v=_value_ratio(key_dim, value_dim),
                          allow_neg_eigval=allow_neg_eigval, qk_norm=True, short_conv=state_dict["q_conv1d.weight"]
                          .shape[-1], output_gate=bool(gate), norm_eps=norm_eps, chunk_size=chunk_size,
                          short_conv_bias=conv_bias)
    times = value_heads // num_heads

    def q_rows(w):
        return _repeat_heads(w, num_heads, times)

    tensors = {"q_proj.weight": q_rows(state_dict["q_proj.weight"]),
               "k_proj.weight": q_rows(state_dict["k_proj.weight"]), "v_proj.weight": state_dict["v_proj.weight"],
               "a_proj.weight": state_dict["a_proj.weight"],
               "b_proj.weight": state_dict["b_proj.weight"], "b_proj.bias": torch.zeros(value_heads),
               "A_log": state_dict["A_log"], "dt_bias": state_dict["dt_bias"],
               "o_proj.weight": state_dict["o_proj.weight"],
               ("o_norm.norm.weight" if gate else "o_norm.weight"): state_dict["o_norm.weight"]}
    _conv_and_output(state_dict, tensors, q_rows)
    return load_exact(layer, {k: v.detach().float() for k, v in tensors.items()})


def from_fla_deltanet(state_dict: dict, *, num_heads: int, allow_neg_eigval: bool = False,
                      qk_activation: str = "silu", qk_norm: str = "l2", norm_eps: float = 1e-5,
                      chunk_size: int = 64) -> DeltaNet:
    """regmem's DeltaNet equal to `fla.layers.DeltaNet(num_heads=num_heads, ...)` with these weights (use_beta,
    use_gate, conv_bias read from the state dict); only qk_activation "silu" and qk_norm "l2" convert."""
    upstream = "fla.layers.DeltaNet"
    if qk_activation != "silu" or qk_norm != "l2":
        raise ValueError(f"{upstream} with qk_activation {qk_activation!r} and qk_norm {qk_norm!r}: regmem's DeltaNet "
                         "has silu after the conv and an L2 norm only (qk_activation 'silu', qk_norm 'l2')")
    conv, conv_bias = _conv_keys(state_dict, upstream, required=True)
    optional = {k for k in ("g_proj.weight", "b_proj.weight") if k in state_dict}
    base = {"q_proj.weight", "k_proj.weight", "v_proj.weight", "o_norm.weight", "o_proj.weight"}
    check_keys(state_dict, base | conv | optional, set(), upstream)
    d_model = state_dict["q_proj.weight"].shape[1]
    key_dim = state_dict["q_proj.weight"].shape[0] // num_heads
    value_dim = state_dict["v_proj.weight"].shape[0] // num_heads
    gate = "g_proj.weight" in state_dict
    layer = DeltaNet(d_model, num_heads, head_dim=key_dim, expand_v=_value_ratio(key_dim, value_dim),
                     allow_neg_eigval=allow_neg_eigval, qk_norm=True,
                     short_conv=state_dict["q_conv1d.weight"].shape[-1], output_gate=gate, norm_eps=norm_eps,
                     chunk_size=chunk_size, short_conv_bias=conv_bias)
    tensors = {k: state_dict[k] for k in ("q_proj.weight", "k_proj.weight", "v_proj.weight", "o_proj.weight")}
    if "b_proj.weight" in state_dict:
        tensors["b_proj.weight"], tensors["b_proj.bias"] = state_dict["b_proj.weight"], torch.zeros(num_heads)
    else:  # use_beta=False: beta = 1
        tensors["b_proj.weight"] = torch.zeros(num_heads, d_model)
        tensors["b_proj.bias"] = torch.full((num_heads,), BETA_ONE_LOGIT)
    tensors["o_norm.norm.weight" if gate else "o_norm.weight"] = state_dict["o_norm.weight"]
    _conv_and_output(state_dict, tensors, lambda w: w)
    return load_exact(layer, {k: v.detach().float() for k, v in tensors.items()})


def from_fla_gla(state_dict: dict, *, num_heads: int, gate_logit_normalizer: float = 16, norm_eps: float = 1e-5,
                 feature_map: str | None = None, clamp_min: float | None = None, gate_fn: str = "swish",
                 chunk_size: int = 64) -> GLA:
    """regmem's GLA equal to `fla.layers.GatedLinearAttention(num_heads=num_heads, ...)` with these weights
    (num_kv_heads, the low rank, use_short_conv, use_output_gate and the norm's name read from the state dict)."""
    upstream = "fla.layers.GatedLinearAttention"
    if feature_map is not None or clamp_min is not None or gate_fn not in ("swish", "silu"):
        raise ValueError(f"{upstream} with feature_map {feature_map!r}, clamp_min {clamp_min!r} or gate_fn "
                         f"{gate_fn!r}: regmem's GLA has no feature map, no clamp and a silu gate")
    conv, conv_bias = _conv_keys(state_dict, upstream, required=False)
    norms = [k for k in ("g_norm_swish_gate.weight", "g_norm.weight") if k in state_dict]
    optional = {k for k in ("g_proj.weight",) if k in state_dict}
    base = {"q_proj.weight", "k_proj.weight", "v_proj.weight", "gk_proj.0.weight", "gk_proj.1.weight",
            "gk_proj.1.bias", "o_proj.weight"}
    check_keys(state_dict, base | conv | optional | set(norms), set(), upstream)
    d_model = state_dict["q_proj.weight"].shape[1]
    key_dim = state_dict["q_proj.weight"].shape[0] // num_heads
    kv_heads = state_dict["k_proj.weight"].shape[0] // key_dim
    value_dim = state_dict["v_proj.weight"].shape[0] // kv_heads
    gate = "g_proj.weight" in state_dict
    layer = GLA(d_model, num_heads, head_dim=key_dim, expand_v=_value_ratio(key_dim, value_dim), n_kv_heads=kv_heads,
                short_conv=state_dict["q_conv1d.weight"].shape[-1] if conv else 0, qk_norm=False, output_gate=gate,
                norm_eps=norm_eps, gate_low_rank_dim=state_dict["gk_proj.0.weight"].shape[0],
                gate_logit_normalizer=float(gate_logit_normalizer), chunk_size=chunk_size, short_conv_bias=conv_bias)
    times = num_heads // kv_heads
    tensors = {k: state_dict[k] for k in ("q_proj.weight", "k_proj.weight", "v_proj.weight", "o_proj.weight",
                                          "gk_proj.0.weight")}
    tensors["gk_proj.1.weight"] = _repeat_heads(state_dict["gk_proj.1.weight"], kv_heads, times)
    tensors["gk_proj.1.bias"] = _repeat_heads(state_dict["gk_proj.1.bias"], kv_heads, times)
    norm = state_dict[norms[0]] if norms else torch.ones(value_dim)  # elementwise_affine=False: no weight
    tensors["o_norm.norm.weight" if gate else "o_norm.weight"] = norm
    _conv_and_output(state_dict, tensors, lambda w: w)
    return load_exact(layer, {k: v.detach().float() for k, v in tensors.items()})
