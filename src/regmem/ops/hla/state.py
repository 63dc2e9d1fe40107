"""The states of the higher-order linear attention ops (arXiv:2510.27258), one NamedTuple per op, per head.

`HLA2State(S, C, m, G, h)`, the prefix summaries of second-order HLA (sec. 3, Theorem 3.1):
    S: [N, H, K, K], S_t = sum_{i<=t} k_i k_i^T            (S^K_t)
    C: [N, H, K, V], C_t = sum_{i<=t} q_i v_i^T            (C^{QV}_t, q already scaled)
    m: [N, H, K],    m_t = sum_{i<=t} q_i                  (m^Q_t)
    G: [N, H, K, V], G_t = sum_{i<=t} k_i k_i^T C_{i-1}    (masking cross-summary)
    h: [N, H, K],    h_t = sum_{i<=t} k_i k_i^T m_{i-1}    (masking cross-summary of the denominator)
with decay every sum is weighted by gamma^(t-i) (sec. 4.3). m and h only enter the normalised output (eq 3.4).
`AHLAState(P, m, E, n)` of asymmetric HLA (sec. 6, Theorem 6.1), `HLA3State(S, P, F)` of the causal third order
and `HLA3PaperState(SK, SQ, P, G)` of the paper's third-order recurrence (sec. 7, Alg. 3) are documented on their
classes. N = B, or the number of sequences with `cu_seqlens`.
"""

from __future__ import annotations

from typing import NamedTuple

import torch


class HLA2State(NamedTuple):
    """State of second-order HLA: S [N, H, K, K], C [N, H, K, V], m [N, H, K], G [N, H, K, V], h [N, H, K]."""

    S: torch.Tensor
    C: torch.Tensor
    m: torch.Tensor
    G: torch.Tensor
    h: torch.Tensor


class AHLAState(NamedTuple):
    """State of AHLA: P [N, H, K, V], m [N, H, K], E [N, H, K, V], n [N, H, K] (paper sec. 6, Theorem 6.1)."""

    P: torch.Tensor
    m: torch.Tensor
    E: torch.Tensor
    n: torch.Tensor


class HLA3State(NamedTuple):
    """State of the causal variant: S [N, H, K, K] = sum k k^T, P [N, H, K, V] = sum k v^T,
    F [N, H, K, V] = sum_u (S_u q_u)(q_u^T P_u) (paper sec. 7; DERIVATION.md)."""

    S: torch.Tensor
    P: torch.Tensor
    F: torch.Tensor


class HLA3PaperState(NamedTuple):
    """State of the paper variant: SK [N, H, K, K] = sum k k^T, SQ [N, H, K, K] = sum q q^T (q scaled),
    P [N, H, K, V] = sum k v^T, G [N, H, K, V] = G1 + G2 + G3 of the paper's Alg. 3 (sec. 7)."""

    SK: torch.Tensor
    SQ: torch.Tensor
    P: torch.Tensor
    G: torch.Tensor



def hla2_zero_state(q: torch.Tensor, V: int) -> HLA2State:
    """The empty prefix for q: [B, T, H, K]."""
    B, _, H, K = q.shape
    return HLA2State(q.new_zeros(B, H, K, K), q.new_zeros(B, H, K, V), q.new_zeros(B, H, K), q.new_zeros(B, H, K, V),
                     q.new_zeros(B, H, K))


def ahla_zero_state(k: torch.Tensor, V: int) -> AHLAState:
    B, _, H, K = k.shape
    return AHLAState(k.new_zeros(B, H, K, V), k.new_zeros(B, H, K), k.new_zeros(B, H, K, V), k.new_zeros(B, H, K))


def hla3_zero_state(k: torch.Tensor, V: int) -> HLA3State:
    B, _, H, K = k.shape
    return HLA3State(k.new_zeros(B, H, K, K), k.new_zeros(B, H, K, V), k.new_zeros(B, H, K, V))


def hla3_paper_zero_state(k: torch.Tensor, V: int) -> HLA3PaperState:
    B, _, H, K = k.shape
    return HLA3PaperState(k.new_zeros(B, H, K, K), k.new_zeros(B, H, K, K), k.new_zeros(B, H, K, V),
                          k.new_zeros(B, H, K, V))
