"""Nonparametric memories of *Test-time regression* (arXiv:2501.12352, Sec. 4 Vignette 4): the memory is the
key-value cache and each query solves its own weighted regression over it (softmax attention = local constant /
Nadaraya-Watson, local-linear attention, local polynomials, exact kernel regression). State: `KVState(k, v)`."""

from regmem.ops.nonparametric.api import (
    attention_weights,
    kernel_regression,
    local_linear_attn,
    local_polynomial,
    softmax_attn,
)
from regmem.ops.nonparametric.state import KVState

__all__ = ["KVState", "attention_weights", "kernel_regression", "local_linear_attn", "local_polynomial",
           "softmax_attn"]
