"""The cases of `regmem bench ops` and `regmem bench decode`: what each times, on which inputs, and its FLOP count.

A case names an op (with options) and the entry of `regmem.ops.examples` whose inputs it runs on: `EXAMPLES`
(valid, well-conditioned inputs of every op, the ones the op-wide tests use) or a label of `VARIANTS`, made at
the benchmark's sizes by `case_inputs`. Input construction therefore lives in one place for the tests, `regmem
showcase` and the benchmarks. `op_step` turns a case and its inputs into the timed call (forward, or forward and
backward); ops.py times it and memory.py measures its peak memory in a fresh process, both from this module.

FLOPs are counted per form as the multiply-adds it performs (2 per MAC); forward+backward is counted as 3x forward
(the usual convention: the backward pass costs about two forwards).

Legend: B batch, T time, H heads, K key dim, V value dim, C chunk size.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import torch

from regmem.lab.bench.external import fla_naive_gated_delta_rule
from regmem.ops import (
    ahla,
    delta_product,
    delta_rule,
    deltaformer,
    gated_delta_rule,
    gated_linear_attn,
    hla2,
    kernel_regression,
    least_squares,
    linear_attn,
    local_linear_attn,
    longhorn,
    momentum_delta_rule,
    multi_step_gd,
    nlms,
    oja_rule,
    omega_rule,
    softmax_attn,
    ttt,
)
from regmem.ops.examples import example_of
from regmem.ops.ttt import InnerModel, TTTState


@dataclass(frozen=True)
class Shape:
    B: int
    T: int
    H: int
    K: int
    V: int
    chunk_size: int


@dataclass(frozen=True)
class OpCase:
    name: str
    example: str  # an op of `EXAMPLES` or a label of `VARIANTS`: the inputs the case runs on
    call: Callable[..., tuple]  # call(**tokens, **options, mode=..., [chunk_size=...]) -> (o, state)
    # Multiply-adds x 2 per token of one forward pass: (form, shape) -> FLOPs per token.
    flops_per_token: Callable[[str, Shape], float]
    tokens: tuple[str, ...] | None = None  # the example's per-token inputs the call takes (None: all of them)
    options: Mapping[str, Any] | None = None  # the op's other arguments (None: the example's)
    forms: tuple[str, ...] = ("chunk", "recurrent", "reference")  # the forms the case has; others are skipped


def case_inputs(case: OpCase, shape: Shape, dtype: torch.dtype, gen: torch.Generator):
    """The case's inputs at `shape` in `dtype`, on `gen`'s device: (tokens, options), the per-token tensors
    [B, T, ...] by argument name and the op's other arguments."""
    _, example = example_of(case.example)
    tokens, options, _ = example.make(shape.B, shape.T, shape.H, shape.K, shape.V, dtype, gen)
    if case.tokens is not None:
        tokens = {name: tokens[name] for name in case.tokens}
    return tokens, dict(options if case.options is None else case.options)


def op_step(case: OpCase, tokens: dict, options: dict, kwargs: dict, pass_: str) -> Callable[[], object]:
    """The timed call: `pass_` "fwd" runs the case without autograd; "fwdbwd" runs it on leaf copies of the
    tokens and back-propagates ones through the output. kwargs: the frame's arguments (mode, chunk_size)."""
    if pass_ == "fwd":
        def forward():
            with torch.no_grad():
                return case.call(**tokens, **options, **kwargs)
        return forward
    leaves = {n: t.detach().requires_grad_(t.is_floating_point()) for n, t in tokens.items()}

    def forward_backward():
        o, _ = case.call(**leaves, **options, **kwargs)
        o.backward(torch.ones_like(o))
        for t in leaves.values():
            t.grad = None
    return forward_backward


def _linear_flops(form: str, s: Shape) -> float:
    if form == "recurrent":  # k v^T update and q^T S read-out
        return 4 * s.K * s.V
    if form == "chunk":  # Q K^T and A V inside the chunk, K^T V and Q S across chunks
        return 2 * s.chunk_size * (s.K + s.V) + 4 * s.K * s.V
    return 2 * s.T * (s.K + s.V)  # reference: the full T x T attention matrix


def _delta_flops(form: str, s: Shape) -> float:
    if form == "recurrent":  # S^T k, the rank-1 update, and the read-out
        return 6 * s.K * s.V
    if form == "chunk":  # K K^T, the triangular solve, W and U, W S and K^T U, Q K^T, A U, Q S
        return 2 * s.chunk_size * (3 * s.K + 2 * s.V) + s.chunk_size**2 / 3 + 6 * s.K * s.V
    return 2 * s.T * (s.K + s.V)


def _momentum_flops(form: str, s: Shape) -> float:
    return 2 * _delta_flops(form, s)  # two states, memory and momentum


def _omega_flops(form: str, s: Shape, window: int = 3) -> float:
    """The example's window of 3: the delta rule's work once per window slot (a token is in `window` windows)."""
    return window * _delta_flops(form, s)


def _gd_flops(form: str, s: Shape, steps: int = 2) -> float:
    """multi_step_gd runs the I steps on a K-vector z per token (o_t = C_t^T z_t; see ops/gd/DERIVATION.md)."""
    if form == "recurrent":  # R and C updates, I steps of R^T z, the read-out C^T z
        return 2 * s.K * s.K * (1 + steps) + 4 * s.K * s.V
    if form == "chunk":  # per step Z R_n and tril(Z K^T) K; prefix statistics; Z C_n and tril(Z K^T) V
        return steps * (2 * s.K * s.K + 4 * s.chunk_size * s.K) + 2 * s.K * (s.K + s.V) \
            + 2 * s.K * s.V + 2 * s.chunk_size * (s.K + s.V)
    return 2 * s.T * (s.K + s.V) * (1 + steps)


def _least_squares_flops(form: str, s: Shape) -> float:
    """least_squares: R_t per token, a K x K solve, and the read-out o_t = S_t^T z_t."""
    solve = s.K**3 / 3 + 2 * s.K * s.K  # Cholesky and two triangular solves (or Sherman-Morrison, ~3 K^2)
    if form == "recurrent":  # R, S updates, P update, z = P q, o = S^T z
        return 2 * (s.K * s.K + s.K * s.V) + 6 * s.K * s.K + 2 * (s.K * s.K + s.K * s.V)
    if form == "chunk":  # R_t = decay-matrix @ outer products (C K^2 per token), the solve, then GLA with z
        return 2 * s.chunk_size * s.K * s.K + 2 * solve + _linear_flops("chunk", s)
    return 2 * s.T * (s.K * s.K + s.K * s.V) + 2 * solve  # reference: R_t, S_t from the whole prefix


def _softmax_flops(form: str, s: Shape) -> float:
    return s.T * (s.K + s.V)  # q.k and p v over the causal half (T / 2 keys per query on average)


def _local_linear_flops(form: str, s: Shape) -> float:
    """Moments sum p [1, k, k k^T / 2, v, v k^T] over T / 2 keys per query, then one K x K solve."""
    features = 1 + s.K + s.K * (s.K + 1) / 2 + s.V + s.V * s.K
    return s.T * (s.K + features) + 2 * (s.K**3 / 3 + s.K * s.V)


def _kernel_regression_flops(form: str, s: Shape) -> float:
    """Gram (T K per token), one T x T Cholesky (T^2 / 3 per token), two triangular solves and the read-out."""
    return 2 * s.T * s.K + 2 * s.T * s.T / 3 + 2 * s.T * (s.T + s.V) + 2 * s.T * s.V


def _hla2_flops(form: str, s: Shape) -> float:
    """hla2 (masked, eq 3.3). Recurrent: S, C, G updates (k^T C_{t-1} and its outer product), q^T S, u C, q^T G.
    Chunk: Q K^T, K Q^T, Q (S + A K) rows U, U Q^T; the score-times-value products A P, (U Q^T) V, Bk V; the
    chunk summaries K^T K, Kbar, Q^T V, K^T P; the entering-state reads q S, U C, k C, q G; the carry Kbar C_0
    once per chunk (K^2 V / C per token)."""
    if form == "recurrent":
        return 2 * (2 * s.K * s.K + 5 * s.K * s.V)
    if form == "chunk":
        C = s.chunk_size
        return 2 * (4 * C * s.K + 3 * C * s.V + 3 * s.K * s.K + 5 * s.K * s.V + s.K * s.K * s.V / C)
    return 2 * s.T * (2 * s.K + s.V)  # reference: W W^T (T^2 K) and the T x T matrix times V, per token


def _ahla_flops(form: str, s: Shape) -> float:
    """ahla (Theorem 6.1). Recurrent: P update, q^T P, E update, q^T E. Chunk: Q K^T, A V, A r; the summaries
    K^T V, K^T r, K^T Q; the entering-state reads q P, q E; the carry R P once per chunk."""
    if form == "recurrent":
        return 2 * 4 * s.K * s.V
    if form == "chunk":
        C = s.chunk_size
        return 2 * (C * s.K + 2 * C * s.V + s.K * s.K + 4 * s.K * s.V + s.K * s.K * s.V / C)
    return 2 * s.T * (s.K + 2 * s.V)  # reference: the decayed prefix sums of the summaries


def _deep_flops(form: str, s: Shape) -> float:
    """Per layer (d_in x d_out, P = sum d_in d_out over the two layers, hidden 4K): key forward and backward (4 P),
    the gradient's rank-one update or, in the chunk form, the query read (Z W_0), the end state (X^T D) and the
    [C, C] kernels Z X^T and (M * Z X^T) D (2 C (d_in + d_out) per layer)."""
    P = 4 * s.K * s.K + 4 * s.K * s.V
    if form == "recurrent":
        return 2 * 4 * P  # forward at the anchor, backward, the outer-product update, the read-out
    return 2 * (4 * P + 2 * min(s.chunk_size, 16) * (2 * s.K + 4 * s.K + 4 * s.K + s.V))


def _least_squares_cg(*, mode, chunk_size=64, **kw):
    """least_squares whose chunk form solves by 30 conjugate-gradient steps (MesaNet; approximate)."""
    if mode != "chunk":
        return least_squares(**kw, ridge=1.0, mode=mode)
    return least_squares.chunk(**kw, ridge=1.0, chunk_size=chunk_size, solver="cg", cg_steps=30)


_least_squares_cg.backends = least_squares.backends  # `backend=` reaches the op (its Triton kernel solves by CG)


def _deep(momentum: bool, **model_options):
    """The engine with a 2-layer GELU MLP memory of width 4 x head dim (TTT-MLP: with biases; Titans: with momentum
    and weight decay), inner mini-batch 16, from a fixed random initial memory (zero is a fixed point of an MLP)."""
    def call(q, k, v, beta, g=None, log_mu=None, *, mode, chunk_size=16, initial_state=None,
             output_final_state=False):
        B, _, H, K = q.shape
        sized = InnerModel((4 * K,), "gelu", residual=True, layer_norm=True, **model_options)
        if initial_state is None:
            params = sized.init(H, K, v.shape[-1], generator=torch.Generator().manual_seed(0), dtype=q.dtype)
            params = params.to(q.device).unsqueeze(0).expand(B, -1, -1)  # [B, H, P]
            initial_state = TTTState(params, params.new_zeros(B, H, params.shape[-1] if momentum else 0), params,
                                     params.new_zeros(B, H))
        return ttt(q, k, v, beta, g, log_mu, model=sized, initial_state=initial_state, mini_batch=16, mode=mode,
                   chunk_size=min(chunk_size, 16), output_final_state=output_final_state)
    return call


_LS = {"ridge": 1.0}
_QKV = ("q", "k", "v")
CASES = {case.name: case for case in (
    OpCase("linear_attn", "linear_attn", linear_attn, _linear_flops),
    OpCase("linear_attn_normalized", "linear_attn(elu+1, normalize)", linear_attn, _linear_flops),
    OpCase("gla_scalar", "gated_linear_attn(scalar g)", gated_linear_attn, _linear_flops),
    OpCase("gla_diagonal", "gated_linear_attn", gated_linear_attn, _linear_flops),
    OpCase("delta_rule", "delta_rule", delta_rule, _delta_flops),
    OpCase("gated_delta_rule", "gated_delta_rule", gated_delta_rule, _delta_flops),
    OpCase("gated_delta_rule_diagonal", "gated_delta_rule(diagonal g)", gated_delta_rule, _delta_flops),
    OpCase("longhorn", "longhorn", longhorn, _delta_flops),
    OpCase("nlms", "nlms", nlms, _delta_flops),
    OpCase("delta_product", "delta_product", delta_product, lambda form, s: 2 * _delta_flops(form, s)),
    OpCase("momentum_delta_rule", "momentum_delta_rule", momentum_delta_rule, _momentum_flops),
    OpCase("oja_rule", "oja_rule", oja_rule, _delta_flops),  # the delta rule with keys and values exchanged
    OpCase("omega_rule", "omega_rule", omega_rule, _omega_flops),
    OpCase("multi_step_gd", "multi_step_gd", multi_step_gd, _gd_flops),
    OpCase("least_squares", "least_squares", least_squares, _least_squares_flops, tokens=_QKV, options=_LS),
    OpCase("weighted_least_squares", "least_squares", least_squares, _least_squares_flops, options=_LS),
    OpCase("least_squares_cg", "least_squares", _least_squares_cg, _least_squares_flops, tokens=_QKV, options={}),
    OpCase("softmax_attn", "softmax_attn", softmax_attn, _softmax_flops),
    # erase scores and A U over the pairs before t, then the softmax read: about twice softmax attention's work
    OpCase("deltaformer", "deltaformer", deltaformer, lambda form, s: 2 * _softmax_flops(form, s), tokens=_QKV),
    OpCase("local_linear_attn", "local_linear_attn", local_linear_attn, _local_linear_flops,
           options={"qk_norm": True, "ridge": 1e-2}),
    OpCase("kernel_regression", "kernel_regression", kernel_regression, _kernel_regression_flops, options={}),
    OpCase("hla2", "hla2", hla2, _hla2_flops),
    OpCase("ahla", "ahla", ahla, _ahla_flops),
    OpCase("ttt_mlp", "ttt", _deep(False, bias=True), _deep_flops, tokens=("q", "k", "v", "beta"), options={},
           forms=("chunk", "recurrent")),
    OpCase("titans_mlp", "ttt", _deep(True), _deep_flops, tokens=("q", "k", "v", "beta", "g", "log_mu"),
           options={}, forms=("chunk", "recurrent")),
)}
DEFAULT_CASES = ("linear_attn", "gla_scalar", "gla_diagonal")
# Public implementations to compare against (bench/external.py; `pip install 'regmem[bench]'`), on the inputs of
# the regmem case they mirror.
EXTERNAL_CASES = {
    "fla_naive_gated_delta_rule": OpCase("fla_naive_gated_delta_rule", "gated_delta_rule", fla_naive_gated_delta_rule,
                                         _delta_flops, options={}, forms=("chunk",)),
}
ALL_CASES = CASES | EXTERNAL_CASES
MIRRORS = {"fla_naive_gated_delta_rule": "gated_delta_rule"}  # external case -> the regmem case it is compared with


def forward_flops(case: OpCase, form: str, s: Shape) -> float:
    """Multiply-adds x 2 of one forward pass of `case` in the given form."""
    return s.B * s.H * s.T * case.flops_per_token(form, s)
