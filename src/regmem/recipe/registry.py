"""Registry of known points of the design space: each op and named model with its test-time-regression
coordinates and the equation of *Test-time regression* (arXiv:2501.12352; Sec. 4, Fig. 1) it comes from."""

from __future__ import annotations

from dataclasses import dataclass

from regmem.recipe.space import Recipe, Regressor, Solver, Weights


@dataclass(frozen=True)
class RecipeEntry:
    name: str  # short name, e.g. "retnet"
    recipe: Recipe
    op: str  # the regmem op call that computes it
    source: str  # equation / section of the TTR paper
    models: tuple[str, ...] = ()  # published models at this point
    note: str = ""


_REGISTRY: dict[str, RecipeEntry] = {}


def register(entry: RecipeEntry) -> RecipeEntry:
    if entry.name in _REGISTRY:
        raise ValueError(f"recipe name {entry.name!r} is already registered")
    _REGISTRY[entry.name] = entry
    return entry


def get(name: str) -> RecipeEntry:
    if name not in _REGISTRY:
        raise ValueError(f"unknown recipe {name!r}; known: {sorted(_REGISTRY)}")
    return _REGISTRY[name]


def entries() -> list[RecipeEntry]:
    return list(_REGISTRY.values())


def find(recipe: Recipe) -> list[RecipeEntry]:
    """Every registered entry at exactly this point of the space."""
    return [e for e in _REGISTRY.values() if e.recipe == recipe]


def format_table(rows: list[RecipeEntry] | None = None) -> str:
    """A markdown table: name, weights, regressor, solver, op, source, models."""
    rows = entries() if rows is None else rows
    header = "| name | weights | regressor | solver | op | TTR source | models |\n|---|---|---|---|---|---|---|"
    lines = [
        f"| {e.name} | {e.recipe.weights} | {e.recipe.regressor} | {e.recipe.solver} | `{e.op}` | {e.source} | "
        f"{', '.join(e.models)}{' (' + e.note + ')' if e.note else ''} |"
        for e in rows
    ]
    return "\n".join([header, *lines])


_GD_STEP = Solver("gd_step")
_LINEAR = Regressor("linear")

register(RecipeEntry(
    "linear_attn", Recipe(Weights("uniform"), _LINEAR, _GD_STEP), "linear_attn(q, k, v)",
    "eq. (2), (24)", ("Linear Transformer without normaliser",),
))
register(RecipeEntry(
    "feature_linear_attn", Recipe(Weights("uniform"), Regressor("feature_linear", feature_map="phi"), _GD_STEP),
    "linear_attn(q, k, v, feature_map=phi)", "eq. (3)",
    ("Performer (random_features)", "Based (taylor2)", "DPFP", "1+ELU"),
))
register(RecipeEntry(
    "normalized_linear_attn",
    Recipe(Weights("query_similarity"), Regressor("local_polynomial", degree=0, feature_map="phi"),
           Solver("analytic")),
    "linear_attn(q, k, v, feature_map=phi, normalize=True)", "eq. (50) with s(k, q) = phi(k).phi(q)",
    ("Linear Transformer (Katharopoulos 2020)",), "Nadaraya-Watson with a feature-map kernel",
))
register(RecipeEntry(
    "softmax_attn",
    Recipe(Weights("query_similarity"), Regressor("local_polynomial", degree=0), Solver("analytic")),
    "softmax_attn(q, k, v) (SDPA)", "eq. (50) (with QK-norm: eq. (51))", ("Transformer",),
    "Nadaraya-Watson with s(k, q) = exp(k.q / sqrt(K))",
))
register(RecipeEntry(
    "gated_linear_attn", Recipe(Weights("scalar_decay"), _LINEAR, _GD_STEP), "gated_linear_attn(q, k, v, g[B,T,H])",
    "eq. (4), (16)", ("mLSTM (forget gate)", "GateLoop"),
))
register(RecipeEntry(
    "retnet", Recipe(Weights("constant_decay"), _LINEAR, _GD_STEP),
    "gated_linear_attn(q, k, v, g = log gamma_h)", "eq. (16)", ("RetNet",),
))
register(RecipeEntry(
    "mamba2", Recipe(Weights("scalar_decay"), _LINEAR, _GD_STEP),
    "gated_linear_attn(q=C, k=B, v=x dt, g = A dt)", "eq. (16) via SSD", ("Mamba-2",),
))
register(RecipeEntry(
    "mamba", Recipe(Weights("diagonal_decay"), _LINEAR, _GD_STEP),
    "selective_scan(x, delta, A, B, C, D) = gated_linear_attn(q=C, k=Bbar, v=x, g=delta A[D, N]), a head per channel",
    "eq. (16), per channel; arXiv:2312.00752", ("Mamba (S6)",),
    "decay exp(delta_t A[d, n]) per channel and state; zero-order-hold input weight",
))
register(RecipeEntry(
    "gla", Recipe(Weights("diagonal_decay"), _LINEAR, _GD_STEP), "gated_linear_attn(q, k, v, g[B,T,H,K])",
    "eq. (16), per channel", ("GLA", "RWKV-6", "HGRN-2"), "outside the paper's scalar derivation",
))

_SGD = Solver("sgd")
register(RecipeEntry(
    "deltanet", Recipe(Weights("uniform"), _LINEAR, _SGD), "delta_rule(q, k, v, beta)",
    "eq. (26)-(29)", ("DeltaNet",), "streaming SGD: recent pairs weigh more",
))
register(RecipeEntry(
    "gated_deltanet", Recipe(Weights("uniform"), _LINEAR, Solver("sgd_weight_decay")),
    "gated_delta_rule(q, k, v, g, beta)", "eq. (38)-(41)", ("Gated DeltaNet",), "= Leaky LMS, reparameterised",
))
register(RecipeEntry(
    "leaky_lms", Recipe(Weights("uniform"), _LINEAR, Solver("sgd_weight_decay")),
    "leaky_lms(q, k, v, beta, lam)", "eq. (34)-(37)", ("Leaky LMS",), "weight decay tied to the step",
))
register(RecipeEntry(
    "decoupled_gated_deltanet", Recipe(Weights("uniform"), _LINEAR, Solver("sgd_weight_decay")),
    "decoupled_gated_delta_rule(q, k, v, beta, lam)", "after eq. (41), proposed modification", (),
    "weight decay independent of the step (AdamW-style)",
))
register(RecipeEntry(
    "longhorn", Recipe(Weights("uniform"), _LINEAR, Solver("sgd_adaptive")), "longhorn(q, k, v, delta)",
    "eq. (30)-(31)", ("Longhorn",), "beta = delta / (1 + delta |k|^2), a proximal step",
))
register(RecipeEntry(
    "nlms", Recipe(Weights("uniform"), _LINEAR, Solver("sgd_adaptive")),
    "nlms(q, k, v)", "eq. (32)-(33)", ("NLMS / Kaczmarz",), "beta = 1 / |k|^2: the newest pair is exact",
))
register(RecipeEntry(
    "delta_product", Recipe(Weights("uniform"), _LINEAR, Solver("sgd", steps=2)),
    "delta_product(q, k, v, beta) with n_h pairs per token", "Vignette 3, after eq. (29)", ("DeltaProduct",),
    "n_h Householder steps per token (steps=2 shown)",
))
register(RecipeEntry(
    "titans_linear", Recipe(Weights("uniform"), _LINEAR, Solver("sgd_momentum")),
    "momentum_delta_rule(q, k, v, g, beta, log_mu)", "Fig. 1 (+ Momentum); arXiv:2501.00663",
    ("Titans LMM (linear)",),
    "SGD with momentum and weight decay",
))
register(RecipeEntry(
    "multi_step_gd", Recipe(Weights("uniform"), _LINEAR, Solver("gd_steps", steps=2)),
    "multi_step_gd(q, k, v, beta[..., I])", "eq. (18)-(23)", (), "I full-batch GD steps from 0 (I=2 shown)",
))

# Deep memories: the regressor is a small network fitted by the test-time-training engine `ttt` (regmem/ops/ttt).
register(RecipeEntry(
    "ttt_linear", Recipe(Weights("uniform"), _LINEAR, _SGD),
    "ttt(q, k, v, beta, model=InnerModel((), bias, residual, layer_norm), mini_batch=16)",
    "Table 1 / Vignette 3 (TTT); arXiv:2407.04620", ("TTT-Linear",),
    "f(k) = k + LN(kW + b), inner mini-batch GD",
))
register(RecipeEntry(
    "ttt_mlp", Recipe(Weights("uniform"), Regressor("mlp"), _SGD),
    "ttt(q, k, v, beta, model=InnerModel((4K,), 'gelu', bias, residual, layer_norm), mini_batch=16)",
    "Table 1 / Vignette 3 (TTT); arXiv:2407.04620", ("TTT-MLP",), "f(k) = k + LN(MLP(k)), inner mini-batch GD",
))
register(RecipeEntry(
    "titans_mlp", Recipe(Weights("uniform"), Regressor("mlp"), Solver("sgd_momentum")),
    "ttt(q, k, v, beta, g, log_mu, model=InnerModel((4K,), 'gelu', residual, layer_norm))",
    "Fig. 1 (+ Momentum), Sec. 8; arXiv:2501.00663", ("Titans LMM (deep)",),
    "SGD with momentum and weight decay on an MLP memory",
))

register(RecipeEntry(
    "dgd", Recipe(Weights("uniform"), _LINEAR, Solver("dgd")), "ttt(q, k, v, beta, g, dgd=True, mini_batch=1)",
    "not in TTR; Nested Learning arXiv:2512.24695 eq. 88", (), "M(alpha I - eta k k^T) - eta (M k - v) k^T",
))
register(RecipeEntry(
    "self_modifying_titans", Recipe(Weights("uniform"), Regressor("mlp"), Solver("dgd")),
    "regmem.nested.self_modifying_titans(x, config, params) on ttt(...)",
    "not in TTR; Nested Learning arXiv:2512.24695 eqs. 86-91", ("Self-modifying Titans (Hope's core)",),
    "six residual-MLP memories (k, v, q, eta, alpha, memory), each fitted to its own M(v_t) by eq. 88's DGD with "
    "momentum and weight decay (dgd=False: SGD with momentum, the point uniform/mlp/sgd_momentum)",
))

_ANALYTIC = Solver("analytic")
register(RecipeEntry(
    "least_squares", Recipe(Weights("uniform"), _LINEAR, _ANALYTIC), "least_squares(q, k, v, ridge=lam)",
    "eq. (10)-(11), (25)", ("RLS", "mesa-layer", "Intention"),
    "one Newton step = the exact (ridge) solution",
))
register(RecipeEntry(
    "weighted_least_squares", Recipe(Weights("scalar_decay"), _LINEAR, _ANALYTIC),
    "least_squares(q, k, v, g, ridge=lam)", "eq. (14)-(15)", ("MesaNet", "weighted RLS"),
    "exponentially forgetting RLS",
))
register(RecipeEntry(
    "feature_least_squares", Recipe(Weights("uniform"), Regressor("feature_linear", feature_map="phi"), _ANALYTIC),
    "least_squares(q, k, v, feature_map=phi)", "Vignette 1 (nonlinear memory)", (),
    "the optimal feature-map memory",
))
register(RecipeEntry(
    "mesa", Recipe(Weights("scalar_decay"), _LINEAR, _ANALYTIC),
    "least_squares(q, k, v, g, ridge=lam[H, K])", "eq. (14)-(15) + MesaNet (arXiv:2506.05233)", ("MesaNet",),
    "exact by Cholesky; MesaNet's conjugate gradient is solver='cg'",
))
register(RecipeEntry(
    "kernel_regression", Recipe(Weights("uniform"), Regressor("kernel"), _ANALYTIC),
    "kernel_regression(q, k, v, kernel, ridge)", "eq. (42)-(43)", ("Skyformer", "SOFT", "Intention (kernel)"),
    "exact: a growing t x t Gram solve",
))
register(RecipeEntry(
    "deltaformer", Recipe(Weights("uniform"), Regressor("kernel"), _SGD),
    "deltaformer(q, k, v, w, alpha, beta, erase_kernel='softmax', read_kernel='softmax')",
    "eq. (26)-(29) in a kernel's feature space; arXiv:2505.19488 eqs. (41)-(42)", ("DeltaFormer",),
    "the delta rule on phi(k) (u-form), read by a normalised kernel",
))
register(RecipeEntry(
    "gaussian_nw", Recipe(Weights("query_similarity"), Regressor("local_polynomial", degree=0), _ANALYTIC),
    "softmax_attn(q, k, v, bandwidth=B) or softmax_attn(q, k, v, qk_norm=True)", "eq. (51)",
    ("QK-norm Transformer",), "s = exp(-|k - q|^2 / B); QK-norm: B = 2 x temperature",
))
register(RecipeEntry(
    "local_linear_attn", Recipe(Weights("query_similarity"), Regressor("local_polynomial", degree=1), _ANALYTIC),
    "local_linear_attn(q, k, v, ridge)", "eq. (52)-(54)", (),
    "the paper's new layer: softmax attention + a regression correction",
))
register(RecipeEntry(
    "local_polynomial", Recipe(Weights("query_similarity"), Regressor("local_polynomial", degree=2), _ANALYTIC),
    "local_polynomial(q, k, v, degree=2)", "eq. (48)-(49)", (), "reference only (small K)",
))

# Higher-order linear attention (arXiv:2510.27258) is not one of the TTR paper's layers; these rows say how close
# it comes (HLA sec. 3-7 against TTR Sec. 4) rather than forcing it into a category.
register(RecipeEntry(
    "hla2", Recipe(Weights("constant_decay"), _LINEAR, Solver("metric_gd_step")),
    "hla2(q, k, v, g=log_gamma)", "not in TTR; HLA eq. (3.3), sec. 4.3", ("HLA",),
    "unmasked o_t = C_t^T S_t q_t is one GD step from 0 on the regression of v_j on the QUERIES q_j, with the key "
    "second moment S_t = sum k k^T as a data-adaptive metric where least squares would use an inverse second "
    "moment; masked, pair j is written under the key S_j q_j; with decay the op is its serial recurrence",
))
register(RecipeEntry(
    "ahla", Recipe(Weights("constant_decay"), _LINEAR, _GD_STEP),
    "ahla(q, k, v, g=log_gamma)", "not in TTR; HLA Theorem 6.1", ("AHLA",),
    "linear attention over the pairs (k_i, r_i) whose values r_i = P_i^T q_i are a first linear-attention "
    "memory's own answers: two stacked GD-step memories sharing keys, not a single regression",
))
