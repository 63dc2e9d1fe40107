"""regmem.ops: functional associative-memory kernels, pure tensors in, tensors out.

The op contract (DESIGN.md), shared by every op:
  - layout is sequence-first: q, k: [B, T, H, K], v: [B, T, H, V]; scalar gates [B, T, H], diagonal gates
    [B, T, H, K], step sizes [B, T, H]. Gates are passed in log space (log retention, <= 0).
  - a linear memory's state is S: [B, H, K, V] and the read-out is o_t = S_t^T q_t. This is the transpose of
    the paper's M: [V, K] with y_t = M_t q_t (*Test-time regression*, arXiv:2501.12352, Sec. 2), and the same
    orientation as flash-linear-attention. Other families document their state tuple.
  - every op is `op(q, k, v, ..., *, scale=None, initial_state=None, output_final_state=False, mode="chunk",
    chunk_size=64, cu_seqlens=None) -> (o, final_state | None)`; `scale=None` means K ** -0.5.
  - three forms, selected by `mode` and also callable by name: `<op>_reference` (the definition),
    `<op>_recurrent` (token by token; decoding), `<op>_chunk` (chunk-parallel; training). Nothing switches
    form silently.
  - all forms agree to ~1e-10 in float64 and ~1e-4 relative in float32, outputs, states and gradients.
  - bf16/fp16 inputs compute and keep state in float32; the output has the input dtype.
  - bad input raises ValueError naming the argument, its shape and the expected shape.
"""

from regmem.ops import feature_maps
from regmem.ops.delta import (
    decoupled_gated_delta_rule,
    delta_product,
    delta_rule,
    delta_rule_chunk,
    delta_rule_multistep,
    delta_rule_recurrent,
    delta_rule_reference,
    gated_delta_rule,
    gated_delta_rule_chunk,
    gated_delta_rule_recurrent,
    gated_delta_rule_reference,
    leaky_lms,
    longhorn,
    nlms,
)
from regmem.ops.gd import (
    GDStats,
    multi_step_gd,
    multi_step_gd_chunk,
    multi_step_gd_recurrent,
    multi_step_gd_reference,
)
from regmem.ops.hla import (
    AHLAState,
    HLA2State,
    HLA3PaperState,
    HLA3State,
    ahla,
    ahla_chunk,
    ahla_recurrent,
    ahla_reference,
    hla2,
    hla2_chunk,
    hla2_recurrent,
    hla2_reference,
    hla3,
)
from regmem.ops.linear_attn import (
    NormalizedState,
    gated_linear_attn,
    gated_linear_attn_chunk,
    gated_linear_attn_recurrent,
    gated_linear_attn_reference,
    linear_attn,
    linear_attn_chunk,
    linear_attn_recurrent,
    linear_attn_reference,
)
from regmem.ops.nonparametric import (
    KVState,
    attention_weights,
    kernel_regression,
    kernel_regression_chunk,
    kernel_regression_recurrent,
    kernel_regression_reference,
    local_linear_attn,
    local_linear_attn_chunk,
    local_linear_attn_recurrent,
    local_linear_attn_reference,
    local_polynomial_reference,
    softmax_attn,
    softmax_attn_chunk,
    softmax_attn_recurrent,
    softmax_attn_reference,
)
from regmem.ops.regression import (
    LeastSquaresState,
    least_squares,
    least_squares_chunk,
    least_squares_recurrent,
    least_squares_reference,
)
from regmem.ops.titans import (
    MomentumState,
    momentum_delta_rule,
    momentum_delta_rule_chunk,
    momentum_delta_rule_recurrent,
    momentum_delta_rule_reference,
)

__all__ = [
    "AHLAState",
    "HLA2State",
    "HLA3PaperState",
    "HLA3State",
    "ahla",
    "ahla_chunk",
    "ahla_recurrent",
    "ahla_reference",
    "hla2",
    "hla2_chunk",
    "hla2_recurrent",
    "hla2_reference",
    "hla3",
    "KVState",
    "LeastSquaresState",
    "attention_weights",
    "kernel_regression",
    "kernel_regression_chunk",
    "kernel_regression_recurrent",
    "kernel_regression_reference",
    "least_squares",
    "least_squares_chunk",
    "least_squares_recurrent",
    "least_squares_reference",
    "local_linear_attn",
    "local_linear_attn_chunk",
    "local_linear_attn_recurrent",
    "local_linear_attn_reference",
    "local_polynomial_reference",
    "softmax_attn",
    "softmax_attn_chunk",
    "softmax_attn_recurrent",
    "softmax_attn_reference",
    "NormalizedState",
    "feature_maps",
    "gated_linear_attn",
    "gated_linear_attn_chunk",
    "gated_linear_attn_recurrent",
    "gated_linear_attn_reference",
    "linear_attn",
    "linear_attn_chunk",
    "linear_attn_recurrent",
    "linear_attn_reference",
    "decoupled_gated_delta_rule",
    "delta_product",
    "delta_rule",
    "delta_rule_chunk",
    "delta_rule_multistep",
    "delta_rule_recurrent",
    "delta_rule_reference",
    "gated_delta_rule",
    "gated_delta_rule_chunk",
    "gated_delta_rule_recurrent",
    "gated_delta_rule_reference",
    "leaky_lms",
    "longhorn",
    "nlms",
    "GDStats",
    "multi_step_gd",
    "multi_step_gd_chunk",
    "multi_step_gd_recurrent",
    "multi_step_gd_reference",
    "MomentumState",
    "momentum_delta_rule",
    "momentum_delta_rule_chunk",
    "momentum_delta_rule_recurrent",
    "momentum_delta_rule_reference",
]
