"""The exact (decay-weighted) ridge-regression memory of TTR Vignettes 1-2 and MesaNet: reference, recurrent,
chunk."""

from regmem.ops.regression.api import least_squares
from regmem.ops.regression.chunk import check_solver
from regmem.ops.regression.state import LeastSquaresState

__all__ = ["LeastSquaresState", "check_solver", "least_squares"]
