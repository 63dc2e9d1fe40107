"""Machinery shared by every op: validation, chunking, varlen packing, dtype policy, dispatch, decay sums."""

from regmem.ops.common.chunking import merge_chunks, pad_time, split_chunks
from regmem.ops.common.decay import segsum, suffix_exclusive
from regmem.ops.common.frame import compute_dtype, dispatch, map_state, run_core, scaled_queries
from regmem.ops.common.scan import associative_scan, map_fields
from regmem.ops.common.scores import decayed_scores
from regmem.ops.common.validate import (
    MODES,
    check_chunk_size,
    check_cu_seqlens,
    check_initial_state,
    check_log_gate,
    check_mode,
    check_qkv,
    check_same_device,
    check_scale,
    check_shape,
    check_state,
    check_state_tuple,
    check_tensor,
    check_token_scalar,
    num_states,
)
from regmem.ops.common.varlen import Packing

__all__ = [
    "MODES",
    "Packing",
    "associative_scan",
    "check_chunk_size",
    "check_cu_seqlens",
    "check_initial_state",
    "check_log_gate",
    "check_mode",
    "check_qkv",
    "check_same_device",
    "check_scale",
    "check_shape",
    "check_state",
    "check_state_tuple",
    "check_tensor",
    "check_token_scalar",
    "compute_dtype",
    "decayed_scores",
    "dispatch",
    "map_fields",
    "map_state",
    "merge_chunks",
    "num_states",
    "pad_time",
    "run_core",
    "scaled_queries",
    "segsum",
    "split_chunks",
    "suffix_exclusive",
]
