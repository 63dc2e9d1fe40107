"""Mesa: the exact (decay-weighted) ridge-regression memory as a layer — the TTR paper's RLS layer
(arXiv:2501.12352 Vignettes 1-2, eqs. 11, 15) with MesaNet's learned ridge and write strength (von Oswald et al.
2025, arXiv:2506.05233):

    R_t = gamma_t R_{t-1} + beta_t k_t k_t^T,   S_t = gamma_t S_{t-1} + beta_t k_t v_t^T,
    o_t = S_t^T (R_t + diag(lambda))^{-1} q_t

with gamma_t = exp(g_t) from Mamba-2's gate (as GatedDeltaNet), beta_t = sigmoid(W_b x_t) and a per-head,
per-channel ridge lambda = softplus(p) + 0.25 (initialised at 1, MesaNet's parameterisation), which does not
decay. beta enters the op as k * sqrt(beta), v * sqrt(beta). `decay=False, write_gate=False` is the paper's
unweighted RLS layer of Sec. 6 (Fig. 3) with a learned ridge.

`solver="cholesky"` (default) trains with the exact chunk form; `solver="cg"` trains with `cg_steps` of conjugate
gradient per token, as MesaNet does (approximate, ~3x faster on CPU at d_model 64; bench/README; differentiated
implicitly, and on CUDA run by regmem's Triton kernel: ops/regression/cg.py, triton_cg.py). Decoding one token
always uses the exact recurrent form.

Padding: a padded token gets k = 0 and log-gate 0, so it leaves R and S unchanged.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from regmem.layers.gates import a_log_parameter, dt_bias_parameter, log_retention, time_step
from regmem.layers.memory import MemoryMixer
from regmem.ops import least_squares
from regmem.ops.common import zero_padding
from regmem.ops.regression import check_solver
from regmem.ops.regression.chunk import Solver

RIDGE_FLOOR = 0.25  # MesaNet: lambda = softplus(p) + 0.25 keeps the system well conditioned


class Mesa(MemoryMixer):
    recipe_name = "mesa"

    def __init__(self, d_model: int, n_heads: int, *, decay: bool = True, write_gate: bool = True,
                 ridge_init: float = 1.0, solver: Solver = "cholesky",
                 cg_steps: int | None = None,  # solver="cg" only; None: the op's default (ops/regression/chunk.py)
                 qk_norm: bool = True,
                 **memory_kwargs):
        super().__init__(d_model, n_heads, qk_norm=qk_norm, **memory_kwargs)
        if not ridge_init > RIDGE_FLOOR:
            raise ValueError(f"ridge_init must be > {RIDGE_FLOOR} (the ridge floor), got {ridge_init}")
        check_solver(solver, cg_steps)  # the op's rule, at construction: a bad option fails when the model is built
        self.solver, self.cg_steps = solver, cg_steps
        self.recipe_name = "mesa" if decay else "least_squares"
        self.a_proj = nn.Linear(d_model, n_heads, bias=False) if decay else None
        if decay:
            self.A_log, self.dt_bias = a_log_parameter(n_heads), dt_bias_parameter(n_heads)  # Mamba-2's, gates.py
        self.b_proj = nn.Linear(d_model, n_heads, bias=True) if write_gate else None
        excess = ridge_init - RIDGE_FLOOR
        self.ridge_param = nn.Parameter(torch.full((n_heads, self.key_dim), excess + math.log(-math.expm1(-excess))))

    def ridge(self) -> torch.Tensor:
        return F.softplus(self.ridge_param) + RIDGE_FLOOR  # [H, K]

    def memory(self, x, q, k, v, mask, memory, mode):
        if self.b_proj is not None:
            root_beta = torch.sigmoid(self.b_proj(x)).sqrt().unsqueeze(-1)  # [B, T, H, 1]
            k, v = k * root_beta, v * root_beta
        g = None
        if self.a_proj is not None:
            g = log_retention(self.A_log, time_step(self.a_proj(x), self.dt_bias))  # [B, T, H]
            g = zero_padding(g, mask)
        k = zero_padding(k, mask)
        # the chunk form trains with the solver (cg: approximate, cg_steps per token); decoding is exact
        solver = {"solver": self.solver, "cg_steps": self.cg_steps} if mode == "chunk" else {}
        return least_squares(q, k, v, g, ridge=self.ridge(), scale=1.0, initial_state=memory,
                             output_final_state=True, mode=mode, chunk_size=self.chunk_size, **solver)

    def memory_floats(self) -> int:
        return self.n_heads * self.key_dim * (self.key_dim + self.value_dim)  # R and S


class RLS(Mesa):
    """The TTR paper's unweighted RLS layer (Sec. 6, Fig. 3): Mesa without decay and write gate,
    o_t = S_t^T (R_t + diag(lambda))^{-1} q_t over all pairs so far, with a learned ridge."""

    recipe_name = "least_squares"

    def __init__(self, d_model: int, n_heads: int, **kwargs):
        super().__init__(d_model, n_heads, decay=False, write_gate=False, **kwargs)
