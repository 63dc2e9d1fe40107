"""Machinery shared by every op: the op shape and its frame, validation, chunking, varlen packing, decay sums; and
how a padded batch reaches an op (padding.py)."""

from regmem.ops.common.chunking import fit_chunk, merge_chunks, pad_time, split_chunks
from regmem.ops.common.compiled import CompileBackend, check_compile_option, compiled
from regmem.ops.common.decay import chunk_decays, segsum, suffix_exclusive
from regmem.ops.common.kernels import SCORE_KERNELS, ScoreKernel, check_score_kernel, round_ste, score_kernel
from regmem.ops.common.linalg import cholesky_or_nan
from regmem.ops.common.op import Call, Op, compute_dtype, map_state, op, scaled_queries
from regmem.ops.common.padding import permute_time, real_end, real_first_order, restore_time, zero_padding
from regmem.ops.common.scan import associative_scan, map_fields
from regmem.ops.common.scores import decayed_scores
from regmem.ops.common.validate import (
    MODES,
    Mode,
    check_at_least,
    check_at_most,
    check_chunk_size,
    check_cu_seqlens,
    check_initial_state,
    check_key_mask,
    check_log_gate,
    check_qkv,
    check_same_device,
    check_scale,
    check_shape,
    check_state,
    check_state_tuple,
    check_tensor,
    check_token_scalar,
    checks_values,
    num_states,
    renamed_argument,
    set_value_checks,
    value_checks,
)
from regmem.ops.common.varlen import Packing, shared_offset

__all__ = [
    "renamed_argument",
    "MODES",
    "CompileBackend",
    "SCORE_KERNELS",
    "Call",
    "Mode",
    "Op",
    "Packing",
    "ScoreKernel",
    "associative_scan",
    "compiled",
    "check_at_least",
    "check_at_most",
    "check_chunk_size",
    "check_compile_option",
    "check_cu_seqlens",
    "check_initial_state",
    "check_key_mask",
    "check_log_gate",
    "check_qkv",
    "check_same_device",
    "check_scale",
    "check_score_kernel",
    "check_shape",
    "check_state",
    "check_state_tuple",
    "check_tensor",
    "check_token_scalar",
    "checks_values",
    "cholesky_or_nan",
    "chunk_decays",
    "compute_dtype",
    "fit_chunk",
    "decayed_scores",
    "map_fields",
    "map_state",
    "merge_chunks",
    "num_states",
    "op",
    "pad_time",
    "permute_time",
    "real_end",
    "real_first_order",
    "restore_time",
    "scaled_queries",
    "shared_offset",
    "segsum",
    "set_value_checks",
    "round_ste",
    "score_kernel",
    "split_chunks",
    "suffix_exclusive",
    "value_checks",
    "zero_padding",
]
