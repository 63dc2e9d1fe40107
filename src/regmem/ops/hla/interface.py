"""What every form of second-order HLA shares: the state tuple, validation, and the hand-off to the common frame.
A form is only its core (reference.py, recurrent.py, chunk.py).

State layout: `HLA2State(S, C, m, G, h)`, the paper's prefix summaries (spec hla.md §1), per head:
    S: [N, H, K, K], S_t = sum_{i<=t} k_i k_i^T            (S^K_t)
    C: [N, H, K, V], C_t = sum_{i<=t} q_i v_i^T            (C^{QV}_t, q already scaled)
    m: [N, H, K],    m_t = sum_{i<=t} q_i                  (m^Q_t)
    G: [N, H, K, V], G_t = sum_{i<=t} k_i k_i^T C_{i-1}    (masking cross-summary)
    h: [N, H, K],    h_t = sum_{i<=t} k_i k_i^T m_{i-1}    (masking cross-summary of the denominator)
with decay every sum is weighted by gamma^(t-i) (sec. 4.3). m and h only enter the normalised output (eq 3.4),
which this family does not implement yet; they are carried so the state is the paper's 5-tuple. N = B, or the
number of sequences with `cu_seqlens`.

The per-head decay [H] is handed to the cores as a per-token log retention gate g: [B, T, H] (g_t = log gamma),
so that the zero-gate padding of varlen packing and of chunking leaves the state unchanged.
"""

from __future__ import annotations

from typing import NamedTuple

import torch

from regmem.ops.common import (
    check_qkv,
    check_same_device,
    check_scale,
    check_state,
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
    if initial_state is None:
        return
    if not isinstance(initial_state, HLA2State):
        raise ValueError(
            "initial_state must be an HLA2State(S [N, H, K, K], C [N, H, K, V], m [N, H, K], G [N, H, K, V], "
            f"h [N, H, K]), got {type(initial_state).__name__}"
        )
    docs = {"S": ((N, H, K, K), "[N, H, K, K]"), "C": ((N, H, K, V), "[N, H, K, V]"), "m": ((N, H, K), "[N, H, K]"),
            "G": ((N, H, K, V), "[N, H, K, V]"), "h": ((N, H, K), "[N, H, K]")}
    for name, field in zip(initial_state._fields, initial_state, strict=True):
        shape, doc = docs[name]
        check_state(f"initial_state.{name}", field, shape, doc)
        check_same_device(q=q, **{f"initial_state.{name}": field})


def run_hla2(core, q, k, v, *, masked, decay, scale, initial_state, output_final_state, cu_seqlens, **options):
    """o_t = q_t^T (S_t C_t - G_t) (eq 3.3), or q_t^T S_t C_t unmasked (eq 3.1); see api.hla2."""
    B, T, H, K, V = check_qkv(q, k, v)
    if not isinstance(masked, bool):
        raise ValueError(f"masked must be a bool, got {type(masked).__name__}")
    check_decay(decay, H, q)
    check_scale(scale)
    N = num_states(B, T, cu_seqlens)
    check_hla2_state(initial_state, N, H, K, V, q)
    q_scaled = scaled_queries(q, scale)  # [B, T, H, K]
    log_gamma = None if decay is None else decay.to(q_scaled.dtype).expand(B, T, H)  # [B, T, H]
    return run_core(
        core, {"q": q_scaled, "k": k, "v": v, "log_gamma": log_gamma}, initial_state,
        output_final_state=output_final_state, cu_seqlens=cu_seqlens, out_dtype=q.dtype, masked=masked,
        **options,
    )
