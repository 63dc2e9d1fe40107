"""mamba_ssm (github.com/state-spaces/mamba, written against 2.2.x; 2.3.2's modules are the same) -> regmem's `Mamba`
and `Mamba2` (`from_mamba_ssm_mamba2` below).

`mamba_ssm.modules.mamba_simple.Mamba` (Mamba-1) has the parameters

    in_proj.weight [2 D, d_model] (rows: x, then z)      conv1d.weight [D, 1, W], conv1d.bias [D] (conv_bias=True)
    x_proj.weight [R + 2 N, D] (rows: dt, B, C)          dt_proj.weight [D, R], dt_proj.bias [D]
    A_log [D, N] (A = -exp(A_log))                       D [D]              out_proj.weight [d_model, D]

(D = expand * d_model, R = dt_rank, N = d_state, W = d_conv; in_proj.bias and out_proj.bias with bias=True). Its
scan (`selective_scan_ref`, and the CUDA kernel) discretises A by zero-order hold, exp(delta A), and B by Euler,
Bbar = delta B: regmem's `discretization="simple"`. regmem's default is "zoh" for both (the Mamba paper's eq. 4, and
what every committed result trained with), so the converter sets "simple"; dt_proj's bias is regmem's `dt_bias`,
added before the softplus exactly as the kernel's `delta_bias`. Biases on in_proj/out_proj (bias=True) have no
regmem counterpart and are refused.
"""

from __future__ import annotations

from regmem.interop.common import check_keys, load_exact
from regmem.layers.mamba import Mamba
from regmem.layers.mamba2 import Mamba2

UPSTREAM = "mamba_ssm.Mamba"
REQUIRED = {"in_proj.weight", "conv1d.weight", "x_proj.weight", "dt_proj.weight", "dt_proj.bias", "A_log", "D",
            "out_proj.weight"}


def from_mamba_ssm_mamba(state_dict: dict, *, chunk_size: int = 64) -> Mamba:
    """The regmem `Mamba` whose forward equals mamba_ssm's `Mamba` with these weights (sizes read from the shapes;
    `conv1d.bias` optional, as conv_bias=False leaves it out)."""
    check_keys(state_dict, REQUIRED, {"conv1d.bias"}, UPSTREAM)
    d_inner, d_model = state_dict["out_proj.weight"].shape[1], state_dict["out_proj.weight"].shape[0]
    state_size = state_dict["A_log"].shape[1]
    dt_rank = state_dict["dt_proj.weight"].shape[1]
    width = state_dict["conv1d.weight"].shape[-1]
    if d_inner % d_model:
        raise ValueError(f"out_proj.weight: the inner width {d_inner} is not a multiple of d_model {d_model}")
    if state_dict["in_proj.weight"].shape != (2 * d_inner, d_model):
        raise ValueError(f"in_proj.weight must have shape [{2 * d_inner}, {d_model}], got "
                         f"{list(state_dict['in_proj.weight'].shape)}")
    layer = Mamba(d_model, 1, state_size=state_size, expand=d_inner // d_model, dt_rank=dt_rank, short_conv=width,
                  discretization="simple", chunk_size=chunk_size, conv_bias="conv1d.bias" in state_dict)
    tensors = {"in_proj.weight": state_dict["in_proj.weight"], "conv.conv.weight": state_dict["conv1d.weight"],
               "x_proj.weight": state_dict["x_proj.weight"], "dt_proj.weight": state_dict["dt_proj.weight"],
               "dt_bias": state_dict["dt_proj.bias"], "A_log": state_dict["A_log"], "D": state_dict["D"],
               "out_proj.weight": state_dict["out_proj.weight"]}
    if "conv1d.bias" in state_dict:
        tensors["conv.conv.bias"] = state_dict["conv1d.bias"]
    return load_exact(layer, {k: v.detach().float() for k, v in tensors.items()})


UPSTREAM2 = "mamba_ssm.Mamba2"
REQUIRED2 = {"in_proj.weight", "conv1d.weight", "dt_bias", "A_log", "D", "norm.weight", "out_proj.weight"}


def from_mamba_ssm_mamba2(state_dict: dict, *, ngroups: int = 1, norm_before_gate: bool = False,
                          chunk_size: int = 64) -> Mamba2:
    """The regmem `Mamba2` whose forward equals mamba_ssm's `Mamba2` (modules/mamba2.py) with these weights.

    mamba_ssm's keys: in_proj.weight [2 d_inner + 2 G N + H, d_model] (rows z, x, B, C, dt), conv1d.weight
    [d_inner + 2 G N, 1, W] (+ conv1d.bias), dt_bias, A_log and D [H], norm.weight [d_inner], out_proj.weight. Its
    scan matches regmem's (B and C shared by the heads of a group, dt x written, exp(dt A) decay, D skip); its
    gated RMSNorm normalises each group of d_inner / G channels with a weight per channel, gate first by default:
    regmem's `norm="group"`. `ngroups` and `norm_before_gate` are not in the state dict: give them as the module
    was built. Refused (no regmem counterpart): rmsnorm=False (no norm.weight), D_has_hdim=True (D [d_inner]),
    d_ssm < d_inner (an extra MLP branch: in_proj has more rows), bias=True; a dt_limit other than the default
    (0, inf) is not visible in the weights and is not applied."""
    check_keys(state_dict, REQUIRED2, {"conv1d.bias"}, UPSTREAM2)
    heads = state_dict["A_log"].shape[0]
    d_model, d_inner = state_dict["out_proj.weight"].shape
    conv_dim, width = state_dict["conv1d.weight"].shape[0], state_dict["conv1d.weight"].shape[-1]
    if state_dict["D"].shape != (heads,):
        raise ValueError(f"D must have shape [{heads}] (D_has_hdim=False), got {list(state_dict['D'].shape)}")
    if state_dict["norm.weight"].shape != (d_inner,):
        raise ValueError(f"norm.weight must have shape [{d_inner}], got {list(state_dict['norm.weight'].shape)}")
    if d_inner % heads or (conv_dim - d_inner) % (2 * ngroups) or heads % ngroups:
        raise ValueError(f"the shapes (d_inner {d_inner}, {heads} heads, conv width {conv_dim}) do not fit ngroups "
                         f"{ngroups}")
    state_size = (conv_dim - d_inner) // (2 * ngroups)
    rows = 2 * d_inner + 2 * ngroups * state_size + heads
    if state_dict["in_proj.weight"].shape != (rows, d_model):
        raise ValueError(f"in_proj.weight must have shape [{rows}, {d_model}] (d_ssm = d_inner), got "
                         f"{list(state_dict['in_proj.weight'].shape)}")
    layer = Mamba2(d_model, heads, head_dim=d_inner // heads, state_size=state_size, n_groups=ngroups,
                   short_conv=width, chunk_size=chunk_size, conv_bias="conv1d.bias" in state_dict, norm="group",
                   norm_before_gate=norm_before_gate)
    tensors = {"in_proj.weight": state_dict["in_proj.weight"], "conv.conv.weight": state_dict["conv1d.weight"],
               "dt_bias": state_dict["dt_bias"], "A_log": state_dict["A_log"], "D": state_dict["D"],
               "norm.weight": state_dict["norm.weight"], "out_proj.weight": state_dict["out_proj.weight"]}
    if "conv1d.bias" in state_dict:
        tensors["conv.conv.bias"] = state_dict["conv1d.bias"]
    return load_exact(layer, {k: v.detach().float() for k, v in tensors.items()})
