"""DeltaProduct and the multi-step delta rule: several delta steps per token, both ops on the delta kernel's forms.

- `delta_product`: DeltaProduct (Siems et al. 2025, arXiv:2502.10297, Sec. 3): n_h distinct (k, v, beta) per
  token, i.e. a product of n_h generalised Householder transitions per token (an extension of TTR's Vignette 3):
      S_{t,0} = exp(g_t) S_{t-1},
      S_{t,j} = (I - beta_{t,j} k_{t,j} k_{t,j}^T) S_{t,j-1} + beta_{t,j} k_{t,j} v_{t,j}^T,   j = 1..n_h,
      S_t = S_{t,n_h},   o_t = scale * S_t^T q_t.
  It is the (gated) delta rule on the interleaved sequence of length T * n_h: sub-step (t, j) carries
  k_{t,j}, v_{t,j}, beta_{t,j}; the gate sits on sub-step j = 1 (zero elsewhere) and q_t on j = n_h (zero
  elsewhere); the output of token t is the output of its last sub-step.
- `delta_rule_multistep`: the paper's reading of DeltaProduct (*Test-time regression*, arXiv:2501.12352,
  Vignette 3, eq. 28 iterated): I SGD steps on the same (k_t, v_t) with step sizes
  beta_t^(1..I). Each step shrinks the residual v - M k by (1 - beta^(i) ||k||^2) and is rank-1 along k, so the
  I steps are one step with 1 - beta_eff ||k||^2 = prod_i (1 - beta^(i) ||k||^2); one `delta_rule` call.

Legend: B batch, T time, H heads, K key dim, V value dim, n_h Householder steps per token, I SGD steps per
token, N sequences. State S: [N, H, K, V].
"""

from __future__ import annotations

import torch
from einops import rearrange

from regmem.ops.common import (
    check_at_least,
    check_cu_seqlens,
    check_log_gate,
    check_qkv,
    check_same_device,
    check_shape,
    check_tensor,
    check_token_scalar,
    compute_dtype,
    op,
)
from regmem.ops.delta.api import FORMS, delta_call


@op(**FORMS)
def delta_product(q, k, v, beta, *, g=None, scale=None, initial_state=None, cu_seqlens=None):
    """DeltaProduct: n_h delta steps with distinct keys, values and step sizes per token (arXiv:2502.10297).

    Args:
        q: [B, T, H, K]; k: [B, T, H, n_h, K]; v: [B, T, H, n_h, V], one floating dtype.
        beta: [B, T, H, n_h] step sizes, >= 0 (not capped; up to 2 with unit keys for negative eigenvalues).
        g: None or [B, T, H] scalar log retention (<= 0), applied once per token before its first step.
        scale, initial_state ([N, H, K, V]), output_final_state, mode, chunk_size, cu_seqlens: as
            `gated_delta_rule`; `chunk_size` counts sub-steps of the interleaved sequence (T * n_h long).

    Returns:
        o: [B, T, H, V] in the input dtype (read after the last step of each token), and the final state
        [N, H, K, V] or None.
    """
    B, T, H, n_h, K, V = _check_product_inputs(q, k, v)
    check_token_scalar("beta", beta, B, T, H, extra=(n_h,), doc="[B, T, H, n_h]", low=0.0)
    check_same_device(q=q, beta=beta)
    if g is not None:
        check_log_gate("g", g, B, T, H, K, ("scalar",))
        check_same_device(q=q, g=g)
    if cu_seqlens is not None:
        check_cu_seqlens(cu_seqlens, B, T)
    # Interleave the n_h sub-steps of every token: sub-step (t, j) sits at position t * n_h + j.
    k_seq = rearrange(k, "b t h n k -> b (t n) h k")  # [B, T * n_h, H, K]
    v_seq = rearrange(v, "b t h n v -> b (t n) h v")  # [B, T * n_h, H, V]
    beta_seq = rearrange(beta, "b t h n -> b (t n) h")  # [B, T * n_h, H]
    q_last = torch.cat([q.new_zeros(B, T, n_h - 1, H, K), q.unsqueeze(2)], dim=2)  # [B, T, n_h, H, K]
    q_seq = rearrange(q_last, "b t n h k -> b (t n) h k")  # [B, T * n_h, H, K]
    g_seq = None
    if g is not None:
        g_first = torch.cat([g.unsqueeze(2), g.new_zeros(B, T, n_h - 1, H)], dim=2)  # [B, T, n_h, H]
        g_seq = rearrange(g_first, "b t n h -> b (t n) h")  # [B, T * n_h, H]

    def last_sub_step(o_seq, state):
        o = rearrange(o_seq, "b (t n) h v -> b t n h v", n=n_h)  # [B, T, n_h, H, V]
        return o[:, :, -1], state  # [B, T, H, V], after the last sub-step

    return delta_call(q_seq, k_seq, v_seq, g_seq, beta_seq, scale=scale, initial_state=initial_state,
                      cu_seqlens=cu_seqlens * n_h if cu_seqlens is not None else None, finish=last_sub_step)


@op(**FORMS)
def delta_rule_multistep(q, k, v, betas, *, scale=None, initial_state=None, cu_seqlens=None):
    """I delta-rule (SGD) steps per token on the same pair (k_t, v_t), as one delta step with beta_eff
    (TTR Vignette 3, eq. 28 applied I times): 1 - beta_eff ||k_t||^2 = prod_i (1 - beta_t^(i) ||k_t||^2).

    Args:
        q, k: [B, T, H, K]; v: [B, T, H, V].
        betas: [B, T, H, I] step sizes of the I steps, >= 0, such that beta_eff >= 0 (true whenever every
            beta^(i) ||k||^2 <= 2).
        scale, initial_state ([N, H, K, V]), output_final_state, mode, chunk_size, cu_seqlens: as
            `gated_delta_rule`.

    Returns:
        o: [B, T, H, V] in the input dtype, and the final state [N, H, K, V] or None.
    """
    B, T, H, _, _ = check_qkv(q, k, v)
    check_tensor("betas", betas, 4, "[B, T, H, I]")
    check_token_scalar("betas", betas, B, T, H, extra=(betas.shape[-1],), doc="[B, T, H, I]", low=0.0)
    dtype = compute_dtype(q)
    k_sq = k.to(dtype).pow(2).sum(-1)  # [B, T, H], ||k_t||^2
    # beta_eff = (1 - prod_i (1 - beta_i x)) / x without the division (exact at x = 0): after step i,
    # beta_eff <- beta_eff + beta_i (1 - x beta_eff), since 1 - x beta_eff is the residual factor so far.
    beta_eff = torch.zeros_like(k_sq)  # [B, T, H]
    for beta_i in betas.to(dtype).unbind(dim=-1):
        beta_eff = beta_eff + beta_i * (1 - k_sq * beta_eff)
    check_at_least("betas", beta_eff, 0.0, "give a negative effective step 1 - prod_i (1 - beta_i ||k||^2) < 0; "
                                           "keep every beta_i ||k||^2 <= 2")
    return delta_call(q, k, v, None, beta_eff, scale=scale, initial_state=initial_state, cu_seqlens=cu_seqlens)


def _check_product_inputs(q, k, v) -> tuple[int, int, int, int, int, int]:
    """q: [B, T, H, K], k: [B, T, H, n_h, K], v: [B, T, H, n_h, V], one dtype; returns (B, T, H, n_h, K, V)."""
    check_tensor("q", q, 4, "[B, T, H, K]")
    check_tensor("k", k, 5, "[B, T, H, n_h, K]")
    check_tensor("v", v, 5, "[B, T, H, n_h, V]")
    B, T, H, K = q.shape
    n_h = k.shape[3]
    if n_h < 1:
        raise ValueError(f"k must have shape [B, T, H, n_h, K] with n_h >= 1, got {list(k.shape)}")
    check_shape("k", k, (B, T, H, n_h, K), "[B, T, H, n_h, K]")
    if tuple(v.shape[:4]) != (B, T, H, n_h):
        raise ValueError(f"v must have shape [B, T, H, n_h, V] with B, T, H, n_h = {[B, T, H, n_h]}, got "
                         f"{list(v.shape)}")
    for name, x in (("k", k), ("v", v)):
        if x.dtype != q.dtype:
            raise ValueError(f"{name} must have the dtype of q ({q.dtype}), got {x.dtype}")
    check_same_device(q=q, k=k, v=v)
    return B, T, H, n_h, K, v.shape[-1]
