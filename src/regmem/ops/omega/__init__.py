"""The Omega rule (OmegaNet, Atlas) for a linear memory: reference, recurrent, chunk."""

from regmem.ops.omega.api import omega_rule
from regmem.ops.omega.state import OmegaState

__all__ = ["OmegaState", "omega_rule"]
