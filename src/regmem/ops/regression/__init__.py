"""Exact (decay-weighted) ridge-regression memory, ttr.md L1/L4/L5 and MesaNet: reference, recurrent, chunk."""

from regmem.ops.regression.api import (
    least_squares,
    least_squares_chunk,
    least_squares_recurrent,
    least_squares_reference,
)
from regmem.ops.regression.interface import LeastSquaresState

__all__ = [
    "LeastSquaresState",
    "least_squares",
    "least_squares_chunk",
    "least_squares_recurrent",
    "least_squares_reference",
]
