"""The test-time-training engine: fit any small regressor (linear, MLP, with layer norm and residual) at test time
by SGD with weight decay, momentum and Delta Gradient Descent, in three forms (reference, recurrent, chunk)."""

from regmem.ops.ttt.api import ttt
from regmem.ops.ttt.chunk import ttt_mini_batch
from regmem.ops.ttt.dgd import dgd_step
from regmem.ops.ttt.model import InnerModel
from regmem.ops.ttt.state import TTTState

__all__ = ["InnerModel", "TTTState", "dgd_step", "ttt", "ttt_mini_batch"]
