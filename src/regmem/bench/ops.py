"""`regmem bench ops`: forward and forward+backward of each op and form over sequence lengths.

FLOPs are counted per form as the multiply-adds it performs (2 per MAC); forward+backward is counted as
3x forward (the usual convention: the backward pass costs about two forwards)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass

import torch

from regmem.bench.external import fla_naive_gated_delta_rule
from regmem.bench.timing import matmul_gflops, median_seconds
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
    softmax_attn,
    ttt,
)
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
    make_inputs: Callable[[Shape, torch.dtype, torch.Generator], dict]
    call: Callable[..., tuple]
    # Multiply-adds x 2 per token of one forward pass: (form, shape) -> FLOPs per token.
    flops_per_token: Callable[[str, Shape], float]
    forms: tuple[str, ...] = ("chunk", "recurrent", "reference")  # the forms the case has; others are skipped


def _qkv(s: Shape, dtype, gen, *, unit_keys: bool = False):
    q = torch.randn(s.B, s.T, s.H, s.K, generator=gen).to(dtype)
    k = torch.randn(s.B, s.T, s.H, s.K, generator=gen)
    k = (torch.nn.functional.normalize(k, dim=-1) if unit_keys else k * s.K**-0.5).to(dtype)
    v = torch.randn(s.B, s.T, s.H, s.V, generator=gen).to(dtype)
    return {"q": q, "k": k, "v": v}


def _log_gate(shape, gen):
    return torch.nn.functional.logsigmoid(torch.randn(shape, generator=gen) + 3.0)  # retention ~0.95


def _step_size(s: Shape, gen, *extra):
    return torch.sigmoid(torch.randn(s.B, s.T, s.H, *extra, generator=gen))


def _gla_inputs(shape_of):
    def make(s: Shape, dtype, gen):
        return {**_qkv(s, dtype, gen), "g": _log_gate(shape_of(s), gen)}
    return make


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


def _per_head_decay(s: Shape, dtype, gen):
    """Unit keys, scaled queries and a per-head constant retention gamma in [0.9, 0.999] (HLA sec. 4.3)."""
    gamma = torch.linspace(0.9, 0.999, s.H)
    return {**_qkv(s, dtype, gen, unit_keys=True), "decay": gamma.log().to(dtype)}


def _least_squares_cg(*, mode, chunk_size=64, **kw):
    """least_squares whose chunk form solves by 30 conjugate-gradient steps (MesaNet; approximate)."""
    if mode != "chunk":
        return least_squares(**kw, ridge=1.0, mode=mode)
    return least_squares.chunk(**kw, ridge=1.0, chunk_size=chunk_size, solver="cg", cg_steps=30)


def _unit_qkv(s: Shape, dtype, gen):
    return _qkv(s, dtype, gen, unit_keys=True)


def _delta_inputs(s: Shape, dtype, gen):
    return {**_qkv(s, dtype, gen, unit_keys=True), "g": _log_gate((s.B, s.T, s.H), gen), "beta": _step_size(s, gen)}


def _delta_product_inputs(s: Shape, dtype, gen, n_h: int = 2):
    k = torch.nn.functional.normalize(torch.randn(s.B, s.T, s.H, n_h, s.K, generator=gen), dim=-1).to(dtype)
    v = torch.randn(s.B, s.T, s.H, n_h, s.V, generator=gen).to(dtype)
    q = torch.randn(s.B, s.T, s.H, s.K, generator=gen).to(dtype)
    return {"q": q, "k": k, "v": v, "beta": _step_size(s, gen, n_h), "g": _log_gate((s.B, s.T, s.H), gen)}


def _momentum_inputs(s: Shape, dtype, gen):
    return {**_delta_inputs(s, dtype, gen), "log_eta": _log_gate((s.B, s.T, s.H), gen)}


def _gd_inputs(s: Shape, dtype, gen):
    return {**_qkv(s, dtype, gen, unit_keys=True), "beta": 0.1 * _step_size(s, gen, 2)}


def _deep(momentum: bool, **model_options):
    """The engine with a 2-layer GELU MLP memory of width 4 x head dim (TTT-MLP: with biases; Titans: with momentum
    and weight decay), inner mini-batch 16, from a fixed random initial memory (zero is a fixed point of an MLP)."""
    def call(q, k, v, beta, g, log_eta=None, *, mode, chunk_size=16, initial_state=None, **options):
        B, _, H, K = q.shape
        sized = InnerModel((4 * K,), "gelu", residual=True, layer_norm=True, **model_options)
        if initial_state is None:
            params = sized.init(H, K, v.shape[-1], generator=torch.Generator().manual_seed(0), dtype=q.dtype)
            params = params.unsqueeze(0).expand(B, -1, -1)
            initial_state = TTTState(params, params.new_zeros(B, H, params.shape[-1] if momentum else 0), params,
                                     params.new_zeros(B, H))
        return ttt(q, k, v, beta, g if momentum else None, log_eta if momentum else None, model=sized,
                   initial_state=initial_state, mini_batch=16, mode=mode, chunk_size=min(chunk_size, 16), **options)
    return call


def _deep_flops(form: str, s: Shape) -> float:
    """Per layer (d_in x d_out, P = sum d_in d_out over the two layers, hidden 4K): key forward and backward (4 P),
    the gradient's rank-one update or, in the chunk form, the query read (Z W_0), the end state (X^T D) and the
    [C, C] kernels Z X^T and (M * Z X^T) D (2 C (d_in + d_out) per layer)."""
    P = 4 * s.K * s.K + 4 * s.K * s.V
    if form == "recurrent":
        return 2 * 4 * P  # forward at the anchor, backward, the outer-product update, the read-out
    return 2 * (4 * P + 2 * min(s.chunk_size, 16) * (2 * s.K + 4 * s.K + 4 * s.K + s.V))


CASES = {
    "linear_attn": OpCase("linear_attn", _qkv, linear_attn, _linear_flops),
    "linear_attn_normalized": OpCase(
        "linear_attn_normalized", _qkv,
        lambda **kw: linear_attn(**kw, feature_map="elu_plus_one", normalize=True), _linear_flops,
    ),
    "gla_scalar": OpCase("gla_scalar", _gla_inputs(lambda s: (s.B, s.T, s.H)), gated_linear_attn, _linear_flops),
    "gla_diagonal": OpCase("gla_diagonal", _gla_inputs(lambda s: (s.B, s.T, s.H, s.K)), gated_linear_attn,
                           _linear_flops),
    "delta_rule": OpCase("delta_rule", _delta_inputs, lambda g, **kw: delta_rule(**kw), _delta_flops),
    "gated_delta_rule": OpCase("gated_delta_rule", _delta_inputs, gated_delta_rule, _delta_flops),
    "gated_delta_rule_diagonal": OpCase(
        "gated_delta_rule_diagonal",
        lambda s, dtype, gen: {**_delta_inputs(s, dtype, gen), "g": _log_gate((s.B, s.T, s.H, s.K), gen)},
        gated_delta_rule, _delta_flops,
    ),
    "longhorn": OpCase("longhorn", _delta_inputs, lambda g, beta, **kw: longhorn(delta=beta, **kw), _delta_flops),
    "nlms": OpCase("nlms", _delta_inputs, lambda g, beta, **kw: nlms(**kw), _delta_flops),
    "delta_product": OpCase("delta_product", _delta_product_inputs, delta_product,
                            lambda form, s: 2 * _delta_flops(form, s)),
    "momentum_delta_rule": OpCase("momentum_delta_rule", _momentum_inputs, momentum_delta_rule, _momentum_flops),
    "multi_step_gd": OpCase("multi_step_gd", _gd_inputs, multi_step_gd, _gd_flops),
    "least_squares": OpCase("least_squares", _unit_qkv, lambda **kw: least_squares(**kw, ridge=1.0),
                            _least_squares_flops),
    "weighted_least_squares": OpCase(
        "weighted_least_squares", _gla_inputs(lambda s: (s.B, s.T, s.H)),
        lambda **kw: least_squares(**kw, ridge=1.0), _least_squares_flops,
    ),
    "least_squares_cg": OpCase("least_squares_cg", _unit_qkv, _least_squares_cg, _least_squares_flops),
    "softmax_attn": OpCase("softmax_attn", _qkv, softmax_attn, _softmax_flops),
    # erase scores and A U over the pairs before t, then the softmax read: about twice softmax attention's work
    "deltaformer": OpCase("deltaformer", _unit_qkv, deltaformer, lambda form, s: 2 * _softmax_flops(form, s)),
    "local_linear_attn": OpCase("local_linear_attn", _unit_qkv,
                                lambda **kw: local_linear_attn(**kw, qk_norm=True, ridge=1e-2), _local_linear_flops),
    "kernel_regression": OpCase("kernel_regression", _unit_qkv, kernel_regression, _kernel_regression_flops),
    "hla2": OpCase("hla2", _per_head_decay, hla2, _hla2_flops),
    "ahla": OpCase("ahla", _per_head_decay, ahla, _ahla_flops),
    "ttt_mlp": OpCase("ttt_mlp", _momentum_inputs, _deep(False, bias=True), _deep_flops, forms=("chunk", "recurrent")),
    "titans_mlp": OpCase("titans_mlp", _momentum_inputs, _deep(True), _deep_flops,
                         forms=("chunk", "recurrent")),
}
DEFAULT_CASES = ("linear_attn", "gla_scalar", "gla_diagonal")
# Public implementations to compare against (bench/external.py; `pip install 'regmem[bench]'`), on the inputs of
# the regmem case they mirror.
EXTERNAL_CASES = {
    "fla_naive_gated_delta_rule": OpCase("fla_naive_gated_delta_rule", _delta_inputs, fla_naive_gated_delta_rule,
                                         _delta_flops, forms=("chunk",)),
}
ALL_CASES = CASES | EXTERNAL_CASES
MIRRORS = {"fla_naive_gated_delta_rule": "gated_delta_rule"}  # external case -> the regmem case it is compared with


def forward_flops(case: OpCase, form: str, s: Shape) -> float:
    """Multiply-adds x 2 of one forward pass of `case` in the given form."""
    return s.B * s.H * s.T * case.flops_per_token(form, s)


def run(
    case_names, forms, seq_lens, *, batch, heads, head_dim, chunk_size, dtype, min_run_time, memory=False,
    max_token_loop_len=None, progress=print,
) -> dict:
    """Times every (case, form, T, pass); with `memory`, also measures each one's peak memory in a fresh process
    (bench/memory.py); forms other than chunk only up to T = `max_token_loop_len` (None: every T).
    Returns {"meta": ..., "rows": [...]}."""
    from regmem.bench.memory import peak_mb

    peak = matmul_gflops(1024, dtype, min_run_time=min_run_time)
    progress(f"dense matmul 1024^3 ({dtype}): {peak:.1f} GFLOP/s")
    rows = []
    gen = torch.Generator().manual_seed(0)
    for name in case_names:
        case = ALL_CASES[name]
        for T in seq_lens:
            shape = Shape(batch, T, heads, head_dim, head_dim, chunk_size)
            inputs = case.make_inputs(shape, dtype, gen)
            long = max_token_loop_len is not None and T > max_token_loop_len
            for form in (f for f in forms if f in case.forms and not (long and f != "chunk")):
                kwargs = {"mode": form, **({"chunk_size": chunk_size} if form == "chunk" else {})}
                for pass_ in ("fwd", "fwdbwd"):
                    seconds = median_seconds(_step(case, inputs, kwargs, pass_), min_run_time=min_run_time)
                    flops = forward_flops(case, form, shape) * (3 if pass_ == "fwdbwd" else 1)
                    row = {
                        "op": name, "form": form, "pass": pass_, **asdict(shape), "dtype": str(dtype),
                        "ms": seconds * 1e3, "tokens_per_s": batch * T / seconds,
                        "gflops": flops / seconds / 1e9, "matmul_ratio": flops / seconds / 1e9 / peak,
                    }
                    if memory:
                        row["peak_mb"] = peak_mb(name, shape, dtype, form, pass_)
                    rows.append(row)
                    extra = f", peak +{row['peak_mb']:.0f} MiB" if memory else ""
                    progress(f"{name:>22} {form:>9} {pass_:>6} T={T:>6}: {row['ms']:9.2f} ms{extra}")
    meta = {"matmul_gflops": peak, "threads": torch.get_num_threads(), "torch": torch.__version__}
    return {"meta": meta, "rows": rows}


def _step(case: OpCase, inputs: dict, kwargs: dict, pass_: str) -> Callable[[], object]:
    if pass_ == "fwd":
        def forward():
            with torch.no_grad():
                return case.call(**inputs, **kwargs)
        return forward
    leaves = {n: t.detach().requires_grad_() for n, t in inputs.items()}

    def forward_backward():
        o, _ = case.call(**leaves, **kwargs)
        o.backward(torch.ones_like(o))
        for t in leaves.values():
            t.grad = None
    return forward_backward
