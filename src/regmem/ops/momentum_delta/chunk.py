"""Chunk-parallel form of the momentum delta rule: one unit-lower-triangular solve per chunk (the UT/WY trick of
DeltaNet with a scalar decay kernel), matmuls for outputs and chunk-end states, (S, P) carried across chunks.

Implements the Titans linear memory (Behrouz, Zhong, Mirrokni; arXiv:2501.00663, Sec. 3.1, eqs. 9-15) in
regmem's layout; the algebra is in DERIVATION.md beside this file. Inside a chunk, with (S_0, P_0)
entering it, token positions i, r and gamma = exp(g), eta = exp(log_mu):
    S_i = a_i S_0 + b_i P_0 + sum_{r<=i} W_ir beta_r k_r e_r^T,    P_i = c_i P_0 + sum_{r<=i} Eta_ir beta_r k_r e_r^T
    a_i = prod_{j<=i} gamma_j,  c_i = prod_{j<=i} eta_j,  Gam_iu = prod_{u<j<=i} gamma_j,  Eta_ur = prod_{r<j<=u} eta_j
    W = Gam Eta (product of two lower-triangular decay matrices),  b = Gam c
and the errors e_i = v_i - S_{i-1}^T k_i (the rows of E) solve one unit-lower-triangular system per chunk,
    (I + L) E = V - a_prev ⊙ K S_0 - b_prev ⊙ K P_0,   L_ir = W_{i-1,r} beta_r k_i.k_r  (r < i),
with a_prev_i = a_{i-1}, b_prev_i = b_{i-1} the coefficients of the memory before token i.
Every decay factor is exp of a direct sum of log retentions (<= 0), so g, log_mu = -20 per step and = 0 are exact;
W and b are sums of products of such factors.

Legend: B batch, T time, H heads, K key dim, V value dim, N chunks, C chunk size.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from regmem.ops.common import fit_chunk, merge_chunks, segsum, split_chunks, suffix_exclusive
from regmem.ops.momentum_delta.state import MomentumState


def momentum_chunk_core(q, k, v, g, beta, log_mu, live, *, initial_state, chunk_size):
    """q, k: [B, T, H, K] (q already scaled); v: [B, T, H, V]; g, beta, log_mu: [B, T, H]; live: [B, T, H] or
    None (all ones); initial_state: MomentumState of [B, H, K, V] or None. Returns o: [B, T, H, V] and the
    MomentumState after the last token."""
    B, T, H, K = q.shape
    chunk_size = fit_chunk(chunk_size, T)  # a sequence shorter than a chunk: padded to its own length only
    V = v.shape[-1]
    S0, P0 = initial_state if initial_state is not None else (q.new_zeros(B, H, K, V), q.new_zeros(B, H, K, V))
    if T == 0:
        return v.new_zeros(B, 0, H, V), MomentumState(S0, P0)
    # Step 0: split into chunks; the padding past T is neutral because live = 0 there (state.py).
    live = live if live is not None else torch.ones_like(beta)
    q, k, v = (split_chunks(x, chunk_size) for x in (q, k, v))  # [B, H, N, C, K|V]
    g, beta, log_mu, live = (split_chunks(x, chunk_size) for x in (g, beta, log_mu, live))  # [B, H, N, C]

    # Step 1: decay kernels of the chunk, every factor <= 1.
    coef = _decay_kernels(g, log_mu, live)

    # Step 2: the triangular system for the errors, solved once per chunk for the three right-hand sides
    # V, a_prev ⊙ K and b_prev ⊙ K (WY form): E = U - Wa S_0 - Wb P_0.
    kb = k * beta.unsqueeze(-1)  # [B, H, N, C, K], beta_r k_r
    L = coef["W_prev"] * (k @ kb.transpose(-1, -2))  # [B, H, N, C, C], strictly lower
    rhs = torch.cat([v, coef["a_prev"].unsqueeze(-1) * k, coef["b_prev"].unsqueeze(-1) * k], dim=-1)
    sol = torch.linalg.solve_triangular(L, rhs, upper=False, unitriangular=True)  # [B, H, N, C, V + 2K]
    U, Wa, Wb = sol.split([V, K, K], dim=-1)  # [B, H, N, C, V], [B, H, N, C, K], [B, H, N, C, K]

    # Step 3: what each error contributes to the chunk-end memory and momentum.
    k_to_S = kb * coef["W_end"].unsqueeze(-1)  # [B, H, N, C, K], W_{C,r} beta_r k_r
    k_to_P = kb * coef["E_end"].unsqueeze(-1)  # [B, H, N, C, K], Eta_{C,r} beta_r k_r
    a_end, b_end, c_end = (coef[n][..., None, None] for n in ("a_end", "b_end", "c_end"))  # [B, H, N, 1, 1]

    # Step 4: inter-chunk pass, one step per chunk.
    # unbind, not U[:, :, n]: the backward of indexing would zero-fill all of U once per chunk (O(N^2)).
    S, P = S0, P0
    S_in, P_in, errors = [], [], []
    per_chunk = (x.unbind(dim=2) for x in (U, Wa, Wb, k_to_S, k_to_P, a_end, b_end, c_end))
    for U_n, Wa_n, Wb_n, kS_n, kP_n, a_n, b_n, c_n in zip(*per_chunk, strict=True):
        S_in.append(S)
        P_in.append(P)
        E_n = U_n - Wa_n @ S - Wb_n @ P  # [B, H, C, V], e_i = v_i - S_{i-1}^T k_i
        errors.append(E_n)
        S, P = a_n * S + b_n * P + kS_n.transpose(-1, -2) @ E_n, c_n * P + kP_n.transpose(-1, -2) @ E_n
    S_in, P_in, E = (torch.stack(x, dim=2) for x in (S_in, P_in, errors))  # [B, H, N, K|C, V]

    # Step 5: outputs o_i = S_i^T q_i from the entering state, the entering momentum and the chunk's errors.
    A = (q @ kb.transpose(-1, -2)) * coef["W"]  # [B, H, N, C, C], W_ir beta_r q_i.k_r (r <= i)
    o = (q * coef["a"].unsqueeze(-1)) @ S_in + (q * coef["b"].unsqueeze(-1)) @ P_in + A @ E  # [B, H, N, C, V]
    return merge_chunks(o, T), MomentumState(S, P)


def _decay_kernels(g, log_mu, live):
    """g, log_mu: [B, H, N, C] log retentions; live: [B, H, N, C] in {0, 1}. Returns the chunk's coefficients
    (all [B, H, N, C] or [B, H, N, C, C]); "prev" is the coefficient of the memory before token i."""
    Gam = torch.exp(segsum(g)) * live.unsqueeze(-2)  # [B, H, N, C(i), C(u)], prod_{u<j<=i} gamma_j, live_u
    Eta = torch.exp(segsum(log_mu))  # [B, H, N, C(u), C(r)], prod_{r<j<=u} eta_j
    a = torch.exp(g.cumsum(dim=-1))  # [B, H, N, C], prod_{j<=i} gamma_j
    c = torch.exp(log_mu.cumsum(dim=-1))  # [B, H, N, C], prod_{j<=i} eta_j
    W = Gam @ Eta  # [B, H, N, C, C], W_ir = sum_{r<=u<=i} Gam_iu Eta_ur, zero above the diagonal
    b = (Gam @ c.unsqueeze(-1)).squeeze(-1)  # [B, H, N, C], b_i = sum_{u<=i} Gam_iu c_u
    return {
        "W": W,
        "a": a,
        "b": b,
        "W_prev": F.pad(W[..., :-1, :], (0, 0, 1, 0)),  # [B, H, N, C, C], row i = W_{i-1}, row 0 = 0
        "a_prev": F.pad(a[..., :-1], (1, 0), value=1.0),  # [B, H, N, C], a_{i-1}, a_{-1} = 1
        "b_prev": F.pad(b[..., :-1], (1, 0)),  # [B, H, N, C], b_{i-1}, b_{-1} = 0
        "W_end": W[..., -1, :],  # [B, H, N, C], W_{C,r}
        "E_end": torch.exp(suffix_exclusive(log_mu, dim=-1)),  # [B, H, N, C], prod_{r<j<=C} eta_j
        "a_end": a[..., -1],  # [B, H, N]
        "b_end": b[..., -1],  # [B, H, N]
        "c_end": c[..., -1],  # [B, H, N]
    }
