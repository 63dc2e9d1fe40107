"""regmem.ops: functional associative-memory kernels, pure tensors in, tensors out.

The op contract, in brief (docs/architecture.md, "The op contract", is the whole of it, with the three ops that
depart from it: `selective_scan`'s Mamba arguments, `ttt`'s scale None meaning 1, `deltaformer`'s query heads):
  - layout is sequence-first: q, k: [B, T, H, K], v: [B, T, H, V]; scalar gates [B, T, H], diagonal gates
    [B, T, H, K], step sizes [B, T, H]. Gates are passed in log space (log retention, <= 0).
  - a linear memory's state is S: [B, H, K, V] and the read-out is o_t = S_t^T q_t. This is the transpose of
    the paper's M: [V, K] with y_t = M_t q_t (*Test-time regression*, arXiv:2501.12352, Sec. 2), and the same
    orientation as flash-linear-attention. Other families document their state tuple.
  - every op is `op(q, k, v, ..., *, scale=None, initial_state=None, output_final_state=False, mode="chunk",
    chunk_size=64, cu_seqlens=None) -> (o, final_state | None)`; `scale=None` means K ** -0.5.
  - three forms, selected by `mode` and each also reachable as an attribute: `op.reference` (the definition),
    `op.recurrent` (token by token; decoding), `op.chunk` (chunk-parallel; training, the default). Nothing
    switches form silently (an empty batch or sequence, with nothing to compute, runs the reference core).
    `OPS` lists every op; `regmem/ops/common/op.py` is the machinery they share.
  - all forms agree to ~1e-10 in float64 and ~1e-4 relative in float32, outputs, states and gradients. A NaN
    input is NaN in every form's output at the same positions from its token on, never hidden (some forms spread it
    to earlier tokens too, through masked products: BACKWARD_SPREAD of tests/ops/test_every_op_edge_cases.py).
  - bf16/fp16 inputs compute and keep state in float32; the output has the input dtype.
  - bad input raises ValueError naming the argument, its shape and the expected shape. Checks that read tensor
    values (a gate <= 0, ...; a NaN fails them) run on CPU tensors only by default and never under torch.compile,
    so they never stall a GPU: `set_value_checks(True)` turns them on everywhere (`regmem/ops/common/validate.py`).
"""

from regmem.ops import feature_maps
from regmem.ops.common import Op, set_value_checks, value_checks
from regmem.ops.delta import (
    decoupled_gated_delta_rule,
    delta_product,
    delta_rule,
    delta_rule_multistep,
    gated_delta_rule,
    leaky_lms,
    longhorn,
    nlms,
)
from regmem.ops.deltaformer import KUState, deltaformer
from regmem.ops.gd import GDStats, multi_step_gd
from regmem.ops.hla import (
    AHLASegment,
    AHLAState,
    HLA2Segment,
    HLA2State,
    HLA3PaperState,
    HLA3State,
    ahla,
    ahla_scan_states,
    hla2,
    hla2_combine,
    hla2_scan_states,
    hla3,
    hla3_paper,
)
from regmem.ops.linear_attn import NormalizedState, gated_linear_attn, linear_attn
from regmem.ops.momentum_delta import MomentumState, momentum_delta_rule
from regmem.ops.nonparametric import (
    KVState,
    attention_weights,
    kernel_regression,
    local_linear_attn,
    local_polynomial,
    softmax_attn,
)
from regmem.ops.oja import oja_rule
from regmem.ops.omega import OmegaState, omega_rule
from regmem.ops.regression import LeastSquaresState, least_squares
from regmem.ops.ssm import selective_scan
from regmem.ops.ttt import InnerModel, TTTState, dgd_step, ttt

# Every op of the library, by name: what the tests, `regmem showcase` and the docs iterate over.
OPS: dict[str, Op] = {
    op.__name__: op
    for op in (
        linear_attn, gated_linear_attn,
        delta_rule, gated_delta_rule, longhorn, nlms, leaky_lms, decoupled_gated_delta_rule, delta_product,
        delta_rule_multistep, momentum_delta_rule, multi_step_gd, least_squares, oja_rule, omega_rule,
        softmax_attn, local_linear_attn, local_polynomial, kernel_regression, deltaformer,
        hla2, ahla, hla3, hla3_paper,
        ttt, selective_scan,
    )
}

__all__ = [
    "OPS",
    "AHLASegment",
    "AHLAState",
    "GDStats",
    "KUState",
    "HLA2Segment",
    "HLA2State",
    "HLA3PaperState",
    "HLA3State",
    "InnerModel",
    "KVState",
    "LeastSquaresState",
    "MomentumState",
    "NormalizedState",
    "OmegaState",
    "Op",
    "TTTState",
    "ahla",
    "ahla_scan_states",
    "attention_weights",
    "decoupled_gated_delta_rule",
    "delta_product",
    "delta_rule",
    "delta_rule_multistep",
    "dgd_step",
    "feature_maps",
    "gated_delta_rule",
    "gated_linear_attn",
    "hla2",
    "hla2_combine",
    "hla2_scan_states",
    "hla3",
    "hla3_paper",
    "kernel_regression",
    "least_squares",
    "leaky_lms",
    "linear_attn",
    "local_linear_attn",
    "local_polynomial",
    "longhorn",
    "momentum_delta_rule",
    "multi_step_gd",
    "nlms",
    "oja_rule",
    "omega_rule",
    "set_value_checks",
    "selective_scan",
    "softmax_attn",
    "ttt",
    "value_checks",
]
