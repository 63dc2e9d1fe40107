"""Oja's rule (OjaNet) as a linear memory: reference, recurrent, chunk."""

from regmem.ops.oja.api import oja_rule

__all__ = ["oja_rule"]
