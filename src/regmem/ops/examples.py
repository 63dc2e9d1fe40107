"""Valid example inputs for every op of `regmem.ops.OPS`, one entry per op, keyed by the op's name.

One registry drives the op-wide tests (`tests/ops/test_every_op.py`: the three forms agree, state passing, decoding,
varlen) and `regmem showcase`: an op added to `OPS` without an example here fails those tests, so no op can be
missed. The inputs are well conditioned so float32 comparisons measure the algorithm: L2-normalised keys (or keys of
norm ~1), step sizes in [0, 1], log gates in [-1, 0] with exact zeros, ridges >= 0.1.

`Example.make(B, T, H, K, V, dtype, gen)` returns `(tokens, options, initial_state)`: the per-token tensors
[B, T, H, ...] by the op's argument names (sliceable in time), the other arguments (a per-head decay [H], a ridge,
a kernel, ...), and a state of N = B sequences (None for the ops whose state is a KV cache, which grows with T).
The sizes and the dtype are the caller's, and the tensors are made on the generator's device (`torch.Generator(
device=...)`), so the tests, `regmem showcase` and the benchmarks (`regmem bench ops`, `regmem bench decode`: the
cases of regmem/lab/bench/cases.py) build their inputs here, at any size. `VARIANTS` adds labelled examples worth
showing on their own; `example_of(label)` finds the op and example of an op name or such a label.

Legend: B batch, T time, H heads, K key dim, V value dim.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal, get_args

import torch
import torch.nn.functional as F

from regmem.ops.gd import GDStats
from regmem.ops.hla import AHLAState, HLA2State, HLA3PaperState, HLA3State
from regmem.ops.linear_attn import NormalizedState
from regmem.ops.momentum_delta import MomentumState
from regmem.ops.omega import OmegaState
from regmem.ops.regression import LeastSquaresState
from regmem.ops.ttt import InnerModel, TTTState

Made = tuple[dict[str, torch.Tensor], dict[str, Any], Any]


@dataclass(frozen=True)
class Example:
    make: Callable[..., Made]  # (B, T, H, K, V, dtype, gen) -> (tokens, options, initial_state)
    max_len: int | None = None  # the longest T the reference form handles cheaply (None: any)
    max_fast_len: int | None = None  # the longest T the chunk and recurrent forms handle cheaply (None: any)
    max_key_dim: int | None = None  # the largest K the op takes (None: any)
    recipe: str | None = None  # the name of its point of the design space in `regmem.recipe`, if it has one


def _randn(gen, dtype, *shape):
    return torch.randn(*shape, generator=gen, dtype=torch.float64, device=gen.device).to(dtype)


def _rand(gen, dtype, *shape):
    return torch.rand(*shape, generator=gen, dtype=torch.float64, device=gen.device).to(dtype)


def _qkv(B, T, H, K, V, dtype, gen, *, unit_keys=True):
    q = _randn(gen, dtype, B, T, H, K)
    k = _randn(gen, torch.float64, B, T, H, K)
    k = (F.normalize(k, dim=-1) if unit_keys else k * K**-0.5).to(dtype)
    return {"q": q, "k": k, "v": _randn(gen, dtype, B, T, H, V)}


def _log_gate(gen, dtype, *shape):
    """Log retention in [-1, 0] with a quarter exact zeros (retention 1)."""
    g = -_rand(gen, torch.float64, *shape)
    keep = _rand(gen, torch.float64, *shape) >= 0.25
    return (g * keep).to(dtype)


def _kv_state(gen, dtype, B, H, K, V):
    return _randn(gen, dtype, B, H, K, V)


def _linear(B, T, H, K, V, dtype, gen) -> Made:
    return _qkv(B, T, H, K, V, dtype, gen), {}, _kv_state(gen, dtype, B, H, K, V)


def _linear_normalized(B, T, H, K, V, dtype, gen) -> Made:
    state = NormalizedState(_randn(gen, dtype, B, H, K, V).abs(), 1 + _rand(gen, dtype, B, H, K))
    return _qkv(B, T, H, K, V, dtype, gen), {"feature_map": "elu_plus_one", "normalize": True}, state


def _gated(B, T, H, K, V, dtype, gen) -> Made:
    tokens = {**_qkv(B, T, H, K, V, dtype, gen), "g": _log_gate(gen, dtype, B, T, H, K)}
    return tokens, {}, _kv_state(gen, dtype, B, H, K, V)


_DeltaGate = Literal["none", "scalar", "diagonal"]  # the log gate of a delta rule: none, [B, T, H] or [B, T, H, K]


def _delta(B, T, H, K, V, dtype, gen, *, gate: _DeltaGate = "none", extra=None) -> Made:
    if gate not in get_args(_DeltaGate):
        raise ValueError(f"gate must be one of {get_args(_DeltaGate)}, got {gate!r}")
    tokens = _qkv(B, T, H, K, V, dtype, gen)
    if gate != "none":
        tokens["g"] = _log_gate(gen, dtype, B, T, H, *((K,) if gate == "diagonal" else ()))
    extra = {"beta": _rand} if extra is None else extra
    tokens |= {name: make(gen, dtype, B, T, H) for name, make in extra.items()}
    return tokens, {}, _kv_state(gen, dtype, B, H, K, V)


def _half_rand(gen, dtype, *shape):
    return 0.5 * _rand(gen, dtype, *shape)


def _delta_product(B, T, H, K, V, dtype, gen, n_h=2) -> Made:
    k = F.normalize(_randn(gen, torch.float64, B, T, H, n_h, K), dim=-1).to(dtype)
    tokens = {"q": _randn(gen, dtype, B, T, H, K), "k": k, "v": _randn(gen, dtype, B, T, H, n_h, V),
              "beta": _rand(gen, dtype, B, T, H, n_h), "g": _log_gate(gen, dtype, B, T, H)}
    return tokens, {}, _kv_state(gen, dtype, B, H, K, V)


def _multistep(B, T, H, K, V, dtype, gen) -> Made:
    tokens = {**_qkv(B, T, H, K, V, dtype, gen), "betas": _rand(gen, dtype, B, T, H, 2)}
    return tokens, {}, _kv_state(gen, dtype, B, H, K, V)


def _momentum(B, T, H, K, V, dtype, gen) -> Made:
    tokens = {**_qkv(B, T, H, K, V, dtype, gen), "g": _log_gate(gen, dtype, B, T, H),
              "beta": _half_rand(gen, dtype, B, T, H), "log_mu": _log_gate(gen, dtype, B, T, H)}
    return tokens, {}, MomentumState(_kv_state(gen, dtype, B, H, K, V), _kv_state(gen, dtype, B, H, K, V))


def _oja(B, T, H, K, V, dtype, gen) -> Made:
    """Unit-norm values: Oja's transition S (alpha I - beta v v^T) acts on the value side (beta |v|^2 <= 1)."""
    tokens = _qkv(B, T, H, K, V, dtype, gen)
    tokens["v"] = F.normalize(tokens["v"].double(), dim=-1).to(dtype)
    tokens |= {"g": _log_gate(gen, dtype, B, T, H), "beta": _rand(gen, dtype, B, T, H)}
    return tokens, {}, _kv_state(gen, dtype, B, H, K, V)


def _omega(B, T, H, K, V, dtype, gen, window=3) -> Made:
    """Unit keys, window weights in [0, 1] and steps in [0, 0.3]: beta * sum of the window's weights <= 0.9."""
    tokens = {**_qkv(B, T, H, K, V, dtype, gen), "g": _log_gate(gen, dtype, B, T, H),
              "beta": 0.3 * _rand(gen, dtype, B, T, H), "gamma": _rand(gen, dtype, B, T, H)}
    cached = F.normalize(_randn(gen, torch.float64, B, H, window - 1, K), dim=-1).to(dtype)
    state = OmegaState(_kv_state(gen, dtype, B, H, K, V), cached, _randn(gen, dtype, B, H, window - 1, V),
                       _rand(gen, dtype, B, H, window - 1))
    return tokens, {"window": window}, state


def _gd(B, T, H, K, V, dtype, gen) -> Made:
    tokens = {**_qkv(B, T, H, K, V, dtype, gen), "beta": 0.3 * _rand(gen, dtype, B, T, H, 2)}
    X = _randn(gen, torch.float64, B, H, K, K)
    R = (X @ X.transpose(-1, -2) / K).to(dtype)  # symmetric PSD, like a real sum of k k^T
    return tokens, {}, GDStats(R, _kv_state(gen, dtype, B, H, K, V))


def _least_squares(B, T, H, K, V, dtype, gen) -> Made:
    tokens = {**_qkv(B, T, H, K, V, dtype, gen), "g": _log_gate(gen, dtype, B, T, H)}
    X = _randn(gen, torch.float64, B, H, K, K)
    R = (X @ X.transpose(-1, -2) / K).to(dtype)
    return tokens, {"ridge": 0.5}, LeastSquaresState(R, _kv_state(gen, dtype, B, H, K, V))


def _kv_cache(options):
    def make(B, T, H, K, V, dtype, gen) -> Made:
        return _qkv(B, T, H, K, V, dtype, gen), dict(options), None
    return make


def _deltaformer(B, T, H, K, V, dtype, gen) -> Made:
    """Two erase vectors per head (eq. 111, mixed by their mean), a value gate and an erase gate in [0, 1]."""
    tokens = {**_qkv(B, T, H, K, V, dtype, gen), "w": _randn(gen, dtype, B, T, H, 2, K),
              "alpha": 0.5 + _rand(gen, dtype, B, T, H), "beta": _rand(gen, dtype, B, T, H)}
    return tokens, {}, None


def _decay(gen, dtype, H):
    return -0.3 * _rand(gen, dtype, H)


def _hla2(B, T, H, K, V, dtype, gen) -> Made:
    tokens = _qkv(B, T, H, K, V, dtype, gen)
    state = HLA2State(*(0.3 * _randn(gen, dtype, B, H, *s) for s in ((K, K), (K, V), (K,), (K, V), (K,))))
    return tokens, {"g": _decay(gen, dtype, H)}, state


def _ahla(B, T, H, K, V, dtype, gen) -> Made:
    tokens = _qkv(B, T, H, K, V, dtype, gen)
    state = AHLAState(*(0.3 * _randn(gen, dtype, B, H, *s) for s in ((K, V), (K,), (K, V), (K,))))
    return tokens, {"g": _decay(gen, dtype, H)}, state


def _hla3(B, T, H, K, V, dtype, gen) -> Made:
    state = HLA3State(*(0.3 * _randn(gen, dtype, B, H, *s) for s in ((K, K), (K, V), (K, V))))
    return _qkv(B, T, H, K, V, dtype, gen), {}, state


def _hla3_paper(B, T, H, K, V, dtype, gen) -> Made:
    state = HLA3PaperState(*(0.3 * _randn(gen, dtype, B, H, *s) for s in ((K, K), (K, K), (K, V), (K, V))))
    return _qkv(B, T, H, K, V, dtype, gen), {}, state


def _ttt(model: InnerModel, *, momentum=True, square=False, read_scale=False, **options):
    """The engine with `model`; square: V = K (a residual inner model). The state has a random anchor and an offset
    in [0, 4): the forms' tests use mini-batches of 8 and 16, so the state continues a mini-batch midway."""
    def make(B, T, H, K, V, dtype, gen) -> Made:
        V = K if square else V
        tokens = {**_qkv(B, T, H, K, V, dtype, gen), "beta": _half_rand(gen, dtype, B, T, H),
                  "g": _log_gate(gen, dtype, B, T, H)}
        if momentum:
            tokens["log_mu"] = _log_gate(gen, dtype, B, T, H)
        P = model.num_params(K, V)
        params = 0.3 * _randn(gen, dtype, B, H, P)
        anchor = params + 0.1 * _randn(gen, dtype, B, H, P)
        mom = 0.1 * _randn(gen, dtype, B, H, P if momentum else 0)
        offset = torch.randint(0, 4, (B, H), generator=gen, device=gen.device).to(dtype)
        extra = {}
        if model.layer_norm:
            extra = {"ln_weight": 1 + 0.1 * _randn(gen, dtype, H, V), "ln_bias": 0.1 * _randn(gen, dtype, H, V)}
        if read_scale:  # official TTT's 1/(i + 1) over the last position's, for the default mini-batch of 16
            extra["read_scale"] = 16.0 / torch.arange(1, 17, dtype=dtype, device=gen.device)
        return tokens, {"model": model, **extra, **options}, TTTState(params, mom, anchor, offset)
    return make


def _selective_scan(B, T, H, K, V, dtype, gen) -> Made:
    """Mamba-1's scan with H channels and state size K (V unused): steps in [0, 1], A in [-4, 0] with one exact 0
    (the ZOH limit), B_t and C_t shared by the channels."""
    A = -4 * _rand(gen, dtype, H, K)
    A[0, 0] = 0.0
    tokens = {"x": _randn(gen, dtype, B, T, H), "delta": _rand(gen, dtype, B, T, H),
              "B": _randn(gen, dtype, B, T, K), "C": _randn(gen, dtype, B, T, K)}
    return tokens, {"A": A, "D": _randn(gen, dtype, H)}, 0.5 * _randn(gen, dtype, B, H, K)


EXAMPLES: dict[str, Example] = {
    "linear_attn": Example(_linear, recipe="linear_attn"),
    "gated_linear_attn": Example(_gated, recipe="gla"),
    "delta_rule": Example(_delta, recipe="deltanet"),
    "gated_delta_rule": Example(lambda *a: _delta(*a, gate="scalar"), recipe="gated_deltanet"),
    "longhorn": Example(lambda *a: _delta(*a, extra={"delta": _rand}), recipe="longhorn"),
    "nlms": Example(lambda *a: _delta(*a, extra={}), recipe="nlms"),
    "leaky_lms": Example(lambda *a: _delta(*a, extra={"beta": _half_rand, "lam": _half_rand}), recipe="leaky_lms"),
    "decoupled_gated_delta_rule": Example(lambda *a: _delta(*a, extra={"beta": _rand, "lam": _half_rand}),
                                          recipe="decoupled_gated_deltanet"),
    "delta_product": Example(_delta_product, recipe="delta_product"),
    "delta_rule_multistep": Example(_multistep),
    "momentum_delta_rule": Example(_momentum, recipe="titans_linear"),
    "oja_rule": Example(_oja),
    "omega_rule": Example(_omega),
    "multi_step_gd": Example(_gd, recipe="multi_step_gd"),
    "least_squares": Example(_least_squares, recipe="weighted_least_squares"),
    "softmax_attn": Example(_kv_cache({}), recipe="softmax_attn"),
    "local_linear_attn": Example(_kv_cache({"ridge": 0.1}), max_fast_len=512, recipe="local_linear_attn"),
    "local_polynomial": Example(_kv_cache({"degree": 2, "ridge": 0.1}), max_len=256, max_fast_len=512,
                                max_key_dim=16, recipe="local_polynomial"),  # C(K + 2, 2) columns per (query, pair)
    "kernel_regression": Example(_kv_cache({"kernel": "exp", "ridge": 0.1}), max_len=256, max_fast_len=1024,
                                 recipe="kernel_regression"),
    "deltaformer": Example(_deltaformer, max_len=256, max_fast_len=1024, recipe="deltaformer"),
    "hla2": Example(_hla2, recipe="hla2"),
    "ahla": Example(_ahla, recipe="ahla"),
    "hla3": Example(_hla3),
    "hla3_paper": Example(_hla3_paper, max_len=24),
    "selective_scan": Example(_selective_scan, recipe="mamba"),
    "ttt": Example(_ttt(InnerModel((8,), "silu"), dgd=True), max_len=24, recipe="titans_mlp"),
}


def _gated_scalar(B, T, H, K, V, dtype, gen) -> Made:
    tokens, options, state = _gated(B, T, H, K, V, dtype, gen)
    return {**tokens, "g": _log_gate(gen, dtype, B, T, H)}, options, state


def _hla2_normalized(B, T, H, K, V, dtype, gen) -> Made:
    tokens, options, _ = _hla2(B, T, H, K, V, dtype, gen)
    return tokens, {**options, "normalize": True}, None


# Variants worth showing on their own, by label: (op name, example).
VARIANTS: dict[str, tuple[str, Example]] = {
    "linear_attn(elu+1, normalize)": ("linear_attn", Example(_linear_normalized, recipe="normalized_linear_attn")),
    "gated_linear_attn(scalar g)": ("gated_linear_attn", Example(_gated_scalar, recipe="mamba2")),
    "gated_delta_rule(diagonal g)": ("gated_delta_rule", Example(lambda *a: _delta(*a, gate="diagonal"))),
    "hla2(normalize)": ("hla2", Example(_hla2_normalized, recipe="hla2")),
    "ttt(TTT-MLP)": ("ttt", Example(_ttt(InnerModel((8,), "gelu", bias=True, residual=True, layer_norm=True),
                                         momentum=False, square=True), max_len=24, recipe="ttt_mlp")),
    "ttt(linear, huber)": ("ttt", Example(_ttt(InnerModel(), loss="huber", loss_param=0.5), max_len=24)),
    # official TTT's position-dependent read (ttt(read_scale=...))
    "ttt(TTT-MLP, read scale)": ("ttt", Example(_ttt(InnerModel((8,), "gelu", bias=True, residual=True,
                                                                layer_norm=True), momentum=False, square=True,
                                                     read_scale=True), max_len=24)),
    # a layer norm of bounded gain (eps 1), as self-modifying Titans' `ln_eps`, with DGD and the proximal step
    "ttt(residual LN, eps 1, DGD)": ("ttt", Example(_ttt(InnerModel((8,), "silu", residual=True, layer_norm=True,
                                                                    ln_eps=1.0), square=True, dgd=True,
                                                         step_rule="proximal"), max_len=24)),
}


def example_of(label: str) -> tuple[str, Example]:
    """(op name, example) of `label`: an op of EXAMPLES, or a label of VARIANTS."""
    if label in EXAMPLES:
        return label, EXAMPLES[label]
    if label in VARIANTS:
        return VARIANTS[label]
    raise ValueError(f"label must be an op of EXAMPLES or a label of VARIANTS, got {label!r}")
