"""What every form of second-order HLA shares: the state tuple, validation, and the hand-off to the common frame.
A form is only its core (reference.py, recurrent.py, chunk.py).

State layout: `HLA2State(S, C, m, G, h)`, the paper's prefix summaries (spec hla.md §1), per head:
    S: [N, H, K, K], S_t = sum_{i<=t} k_i k_i^T            (S^K_t)
    C: [N, H, K, V], C_t = sum_{i<=t} q_i v_i^T            (C^{QV}_t, q already scaled)
    m: [N, H, K],    m_t = sum_{i<=t} q_i                  (m^Q_t)
    G: [N, H, K, V], G_t = sum_{i<=t} k_i k_i^T C_{i-1}    (masking cross-summary)
    h: [N, H, K],    h_t = sum_{i<=t} k_i k_i^T m_{i-1}    (masking cross-summary of the denominator)
with decay every sum is weighted by gamma^(t-i) (sec. 4.3). m and h only enter the normalised output (eq 3.4).
N = B, or the number of sequences with `cu_seqlens`.

Normalised output (`normalize=True`, eq 3.4), masked / unmasked:
    o_t = num_t / den_t,  num_t = q_t^T (S_t C_t - G_t),  den_t = q_t^T (S_t m_t - h_t)
    (unmasked: o_t = q_t^T S_t C_t / q_t^T S_t m_t)
The denominator is the numerator with v replaced by a ones column: m_t, h_t are exactly C_t, G_t for that column
(m_t = sum q_i * 1, h_t = sum k_i k_i^T m_{i-1}, same weights and same "previous" convention in every form). So
`normalized_core` runs the unchanged core on v' = [v, 1] with the state (S, [C, m], m, [G, h], h), splits the
last column off as den (and off the final C', G' as m, h), and divides. The division is sign-safe:
    o_t = num_t / (den_t + eps * sign(den_t)),  sign(0) := +1,
so a negative denominator moves away from zero (den - eps), never through it. It is done in the compute dtype.

Ridge read-out (`ridge=lambda >= 0`, Alg. 1 with u = q_t^T S_eff, S_eff = S_t + lambda I in the READ-OUT only):
    o_t = q_t^T ((S_t + lambda I) C_t - G_t) = (ridge-free o_t) + lambda q_t^T C_t   (den alike with m_t).
The paper calls this a stabilised variant: for lambda > 0 it is not the exact masked operator of Theorem 3.1.
The state (S is carried without the ridge) is unaffected.

The per-head decay [H] is handed to the cores as a per-token log retention gate g: [B, T, H] (g_t = log gamma),
so that the zero-gate padding of varlen packing and of chunking leaves the state unchanged.
"""

from __future__ import annotations

import math
from functools import partial
from typing import NamedTuple

import torch

from regmem.ops.common import (
    check_qkv,
    check_same_device,
    check_scale,
    check_state_tuple,
    check_tensor,
    num_states,
    run_core,
    scaled_queries,
)


class HLA2State(NamedTuple):
    """State of second-order HLA: S [N, H, K, K], C [N, H, K, V], m [N, H, K], G [N, H, K, V], h [N, H, K]."""

    S: torch.Tensor
    C: torch.Tensor
    m: torch.Tensor
    G: torch.Tensor
    h: torch.Tensor


def zero_state(q: torch.Tensor, V: int) -> HLA2State:
    """The empty prefix for q: [B, T, H, K]."""
    B, _, H, K = q.shape
    return HLA2State(q.new_zeros(B, H, K, K), q.new_zeros(B, H, K, V), q.new_zeros(B, H, K), q.new_zeros(B, H, K, V),
                     q.new_zeros(B, H, K))


def check_decay(decay, H: int, q: torch.Tensor) -> None:
    """decay: None or a per-head log retention tensor [H] (<= 0, gamma = exp(decay))."""
    if decay is None:
        return
    check_tensor("decay", decay, 1, "[H]")
    if tuple(decay.shape) != (H,):
        raise ValueError(f"decay must have shape [H] = {[H]}, got shape {list(decay.shape)}")
    check_same_device(q=q, decay=decay)
    with torch.no_grad():
        if decay.numel() and bool((decay > 0).any()):
            raise ValueError(f"decay is a log retention factor and must be <= 0 everywhere, got max "
                             f"{decay.max().item():.3g}")


def check_hla2_state(initial_state, N: int, H: int, K: int, V: int, q: torch.Tensor) -> None:
    kk, kv, k = ((N, H, K, K), "[N, H, K, K]"), ((N, H, K, V), "[N, H, K, V]"), ((N, H, K), "[N, H, K]")
    check_state_tuple(initial_state, HLA2State, {"S": kk, "C": kv, "m": k, "G": kv, "h": k}, q)


def check_real(name: str, x, *, positive: bool) -> None:
    """x: a finite Python real, > 0 if positive else >= 0."""
    if isinstance(x, bool) or not isinstance(x, (int, float)):
        raise ValueError(f"{name} must be a Python float, got {type(x).__name__}")
    if not math.isfinite(x) or (x <= 0 if positive else x < 0):
        raise ValueError(f"{name} must be finite and {'> 0' if positive else '>= 0'}, got {x}")


def sign_safe_divide(num: torch.Tensor, den: torch.Tensor, eps: float) -> torch.Tensor:
    """num / (den + eps * sign(den)) with sign(0) := +1: a negative den is pushed away from zero, not through it."""
    return num / torch.where(den >= 0, den + eps, den - eps)


def normalized_core(core, q, k, v, log_gamma, *, initial_state, eps, **options):
    """The normalised output of eq 3.4 from an unnormalised core: run it on v' = [v, 1] with C' = [C, m],
    G' = [G, h] (m, h are C, G of the ones column), split num / den and divide sign-safely."""
    B, T, H, _ = q.shape
    V = v.shape[-1]
    state = initial_state if initial_state is not None else zero_state(q, V)
    v_aug = torch.cat([v, v.new_ones(B, T, H, 1)], dim=-1)  # [B, T, H, V + 1]
    aug = HLA2State(state.S, torch.cat([state.C, state.m.unsqueeze(-1)], -1), state.m,
                    torch.cat([state.G, state.h.unsqueeze(-1)], -1), state.h)
    o_aug, final = core(q, k, v_aug, log_gamma, initial_state=aug, **options)  # [B, T, H, V + 1]
    o = sign_safe_divide(o_aug[..., :V], o_aug[..., V:], eps)  # [B, T, H, V]
    return o, HLA2State(final.S, final.C[..., :V], final.C[..., V], final.G[..., :V], final.G[..., V])


def run_hla2(core, q, k, v, *, masked, decay, scale, initial_state, output_final_state, cu_seqlens,
             normalize=False, eps=1e-6, ridge=0.0, **options):
    """o_t = q_t^T (S_t C_t - G_t) (eq 3.3), or q_t^T S_t C_t unmasked (eq 3.1), optionally with the ridge
    read-out and the normalisation of eq 3.4 (module docstring); see api.hla2."""
    B, T, H, K, V = check_qkv(q, k, v)
    if not isinstance(masked, bool):
        raise ValueError(f"masked must be a bool, got {type(masked).__name__}")
    if not isinstance(normalize, bool):
        raise ValueError(f"normalize must be a bool, got {type(normalize).__name__}")
    check_real("eps", eps, positive=True)
    check_real("ridge", ridge, positive=False)
    ridge = float(ridge)
    if normalize:
        core = partial(normalized_core, core, eps=float(eps))
    return run_decayed(
        core, q, k, v, decay=decay, scale=scale, initial_state=initial_state, check_initial=check_hla2_state,
        output_final_state=output_final_state, cu_seqlens=cu_seqlens, masked=masked, ridge=ridge, **options,
    )


def decayed_inputs(q, k, v, decay, scale):
    """Validates q, k, v, decay and scale; returns q scaled [B, T, H, K] (compute dtype) and the decay spread to a
    per-token log gate [B, T, H] (None without decay)."""
    B, T, H, _, _ = check_qkv(q, k, v)
    check_decay(decay, H, q)
    check_scale(scale)
    q_scaled = scaled_queries(q, scale)  # [B, T, H, K]
    return q_scaled, None if decay is None else decay.to(q_scaled.dtype).expand(B, T, H)


def run_decayed(core, q, k, v, *, decay, scale, initial_state, check_initial, output_final_state, cu_seqlens,
                **options):
    """The frame shared by the HLA ops with a constant per-head decay: validates q, k, v, decay, scale and the
    state (by `check_initial(initial_state, N, H, K, V, q)`), scales q, spreads the decay [H] to a per-token log
    gate [B, T, H] (so zero-gate padding is neutral), and runs
    core(q, k, v, log_gamma, *, initial_state, **options) in the common frame."""
    q_scaled, log_gamma = decayed_inputs(q, k, v, decay, scale)
    B, T, H, K = q.shape
    check_initial(initial_state, num_states(B, T, cu_seqlens), H, K, v.shape[-1], q)
    return run_core(
        core, {"q": q_scaled, "k": k, "v": v, "log_gamma": log_gamma}, initial_state,
        output_final_state=output_final_state, cu_seqlens=cu_seqlens, out_dtype=q.dtype, **options,
    )
