"""DeltaFormer (arXiv:2505.19488, Sec. 2.2 Vignette 2): softmax attention whose values are first processed by the
delta rule, u_t = alpha_t v_t - beta_t sum_{i<t} kappa_1(w_t, k_i) u_i, o_t = sum_{i<=t} kappa_2(q_t, k_i) u_i.
State: `KUState(k, u)`."""

from regmem.ops.deltaformer.api import check_kernels, deltaformer
from regmem.ops.deltaformer.chunk import unit_lower_inverse
from regmem.ops.deltaformer.state import KUState

__all__ = ["KUState", "check_kernels", "deltaformer", "unit_lower_inverse"]
