"""Higher-order linear attention as layers (Zhang, Qin, Wang, Gu; *Higher-order Linear Attention*,
arXiv:2510.27258): second-order HLA (`HLA`, recipe "hla2") and asymmetric HLA (`AHLA`, recipe "ahla").

`HLA` runs the strictly causal second-order operator of sec. 3 (Theorem 3.1, eq 3.3) with the per-head constant
decay gamma of sec. 4.3; without decay
    o_t = q_t^T (S_t C_t - G_t) = sum_{j<=t} sum_{i<=j} (q_t.k_i)(q_j.k_i) v_j,
    S_t = sum_{i<=t} k_i k_i^T,  C_t = sum_{i<=t} q_i v_i^T,  G_t = sum_{i<=t} k_i k_i^T C_{i-1}
(every sum weighted by gamma^(t-i) with decay). `masked=False` is the unmasked eq 3.1, o_t = q_t^T S_t C_t;
`normalize=True` divides by the same read-out of a ones column (eq 3.4); `ridge=lambda` reads out with
S_t + lambda I (Alg. 1). The decoding state is HLA2State(S [B, H, K, K], C [B, H, K, V], m [B, H, K],
G [B, H, K, V], h [B, H, K]).

`AHLA` runs the asymmetric "A A V" operator of sec. 6 (Theorem 6.1): with A = L ⊙ Q K^T,
    o = ((A A) ⊙ L) V,   o_t = q_t^T E_t,   P_t = gamma P_{t-1} + k_t v_t^T,   E_t = gamma E_{t-1} + k_t (q_t^T P_t)
with state AHLAState(P [B, H, K, V], m [B, H, K], E [B, H, K, V], n [B, H, K]).

Both sit in the MemoryMixer skeleton (memory.py): q, k: [B, T, H, K] and v: [B, T, H, V] from projections with
optional short convs and grouped k/v heads (n_kv_heads), the op, then the per-head (gated) RMSNorm and W_o.
q and k are L2-normalised per head by default (`qk_norm=True`) and q is scaled by the op's K ** -0.5, so
|q_t.k_i| <= K ** -0.5: the unnormalised output is a sum over pairs (i <= j <= t) and grows like the square of the
effective window (T^2 without decay); the output RMSNorm removes that scale.

Decay: gamma_h = sigmoid(p_h), passed to the op as the log retention decay_h = logsigmoid(p_h) < 0, one learnable
constant per head (the paper's constant gamma, sec. 4.3). p is initialised at RetNet's gammas,
gamma_h = 1 - 2^(-5 - h) (windows of 32 to 32 * 2^(H-1) tokens), i.e. p_h = log(2^(5 + h) - 1). `decay=False`
is gamma = 1 (no parameter).

Padding (regmem/ops/common/padding.py, "neutral tokens"): a padded token gets q = k = 0 and, with decay, the
per-token decay 0 (retention 1; the ops take the decay per head [H] or per token [B, T, H]). With k = 0 it writes
nothing to S, G, m, h, P or E, with q = 0 nothing to C (which sums q v^T) and it reads 0, so it leaves the state
unchanged and real tokens never see it, for any padding pattern, with or without an initial state; no data moves
and nothing is read on the host.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from regmem.layers.gates import retnet_decay_exponents
from regmem.layers.memory import MemoryMixer
from regmem.ops import ahla, hla2
from regmem.ops.common import zero_padding


class _HigherOrder(MemoryMixer):
    """The shared part of HLA and AHLA: the learnable per-head decay and the op call with neutral padded tokens."""

    def __init__(self, d_model: int, n_heads: int, *, decay: bool, qk_norm: bool, **memory_kwargs):
        super().__init__(d_model, n_heads, qk_norm=qk_norm, **memory_kwargs)
        self.decay_logit = None
        if decay:  # sigmoid(p_h) = 1 - 2^(-5 - h), RetNet's gammas
            p = torch.log(2.0 ** retnet_decay_exponents(n_heads) - 1.0)  # [H], logit(1 - 2^(-5 - h))
            self.decay_logit = nn.Parameter(p)

    def log_gamma(self) -> torch.Tensor | None:
        """Per-head log retention [H] (< 0), or None for gamma = 1."""
        return None if self.decay_logit is None else F.logsigmoid(self.decay_logit)

    def memory(self, x, q, k, v, mask, memory, mode):
        decay = self.log_gamma()  # [H] or None
        if mask is not None:  # neutral padded tokens (module docstring)
            q, k = zero_padding(q, mask), zero_padding(k, mask)
            decay = zero_padding(decay.expand(*mask.shape, -1), mask) if decay is not None else None  # [B, T, H]
        return self.op(q, k, v, g=decay, initial_state=memory, output_final_state=True, mode=mode,
                       chunk_size=self.chunk_size)

    def op(self, q, k, v, **kwargs):
        raise NotImplementedError


class HLA(_HigherOrder):
    """Second-order HLA, eq 3.3 (or eq 3.1 with masked=False), optionally normalised (eq 3.4) and with the ridge
    read-out of Alg. 1; module docstring."""

    recipe_name = "hla2"

    def __init__(
        self,
        d_model: int,
        n_heads: int,
        *,
        decay: bool = True,
        normalize: bool = False,
        masked: bool = True,
        ridge: float = 0.0,
        qk_norm: bool = True,
        **memory_kwargs,
    ):
        super().__init__(d_model, n_heads, decay=decay, qk_norm=qk_norm, **memory_kwargs)
        self.normalize, self.masked, self.ridge = normalize, masked, float(ridge)

    def op(self, q, k, v, **kwargs):
        return hla2(q, k, v, masked=self.masked, normalize=self.normalize, ridge=self.ridge, **kwargs)

    def memory_floats(self) -> int:
        K, V = self.key_dim, self.value_dim
        return self.n_heads * (K * K + 2 * K * V + 2 * K)  # S, C and G, m and h


class AHLA(_HigherOrder):
    """Asymmetric HLA, o_t = q_t^T E_t (Theorem 6.1), unnormalised; module docstring."""

    recipe_name = "ahla"

    def __init__(self, d_model: int, n_heads: int, *, decay: bool = True, qk_norm: bool = True, **memory_kwargs):
        super().__init__(d_model, n_heads, decay=decay, qk_norm=qk_norm, **memory_kwargs)

    def op(self, q, k, v, **kwargs):
        return ahla(q, k, v, **kwargs)

    def memory_floats(self) -> int:
        K, V = self.key_dim, self.value_dim
        return self.n_heads * (2 * K * V + 2 * K)  # P and E, m and n
