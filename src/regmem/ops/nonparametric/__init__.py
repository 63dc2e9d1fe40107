"""Nonparametric memories of *Test-time regression* (arXiv:2501.12352, Sec. 4 Vignette 4): the memory is the
key-value cache and each query solves its own weighted regression over it (softmax attention = local constant /
Nadaraya-Watson, local-linear attention, local polynomials, exact kernel regression). State: `KVState(k, v)`."""

from regmem.ops.nonparametric.frame import KVState, run_nonparametric
from regmem.ops.nonparametric.kernel_regression import (
    kernel_regression,
    kernel_regression_chunk,
    kernel_regression_recurrent,
    kernel_regression_reference,
)
from regmem.ops.nonparametric.local_linear import (
    local_linear_attn,
    local_linear_attn_chunk,
    local_linear_attn_recurrent,
    local_linear_attn_reference,
)
from regmem.ops.nonparametric.local_polynomial import local_polynomial_reference
from regmem.ops.nonparametric.similarity import causal_logits, check_similarity, similarity_features
from regmem.ops.nonparametric.softmax import (
    attention_weights,
    softmax_attn,
    softmax_attn_chunk,
    softmax_attn_recurrent,
    softmax_attn_reference,
)

__all__ = [
    "KVState",
    "attention_weights",
    "causal_logits",
    "check_similarity",
    "kernel_regression",
    "kernel_regression_chunk",
    "kernel_regression_recurrent",
    "kernel_regression_reference",
    "local_linear_attn",
    "local_linear_attn_chunk",
    "local_linear_attn_recurrent",
    "local_linear_attn_reference",
    "local_polynomial_reference",
    "run_nonparametric",
    "similarity_features",
    "softmax_attn",
    "softmax_attn_chunk",
    "softmax_attn_recurrent",
    "softmax_attn_reference",
]
