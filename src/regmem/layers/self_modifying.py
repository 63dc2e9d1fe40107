"""SelfModifyingTitans: the mixer of Nested Learning's self-modifying Titans (arXiv:2512.24695, Sec. 8.1-8.3), the
core of Hope, on the functional composite `regmem.nested.self_modifying_titans`.

    x_k, x_v, x_q = conv(W_in x) per head (short causal conv, window 4, Hope's "local convolutions")
    y_h = self_modifying_titans(x_k, x_v, x_q)    six residual-MLP memories, each fitted at test time to its M(v_t)
    out = W_o norm(y) ⊙ silu(W_g x)

Defaults (SelfModifyingConfig holds them, the only place) and each departure from the printed paper:
- the proximal step rule (`step_rule="proximal"`): every memory layer steps with eta / (1 + eta ||x_l||^2 ...)
  instead of eq. 88's eta (regmem/ops/ttt/DERIVATION.md §6). Eq. 88's explicit step expands once eta ||x||^2 > 1;
  the proximal one is its exact minimiser for one input and cannot (tests/ops/test_ttt_stable.py).
- none for DGD (`dgd=True`, eq. 88 with the proximal step above). Eq. 88 adds DGD's decay -eta_t k_t k_t^T to the l2
  gradient, which already holds that term (a "double delta"): for a linear memory and a unit key one write maps
  M k -> (1 - 2 rho) M k + rho v, so repeated writes of a pair converge to v / 2, not v
  (tests/nested/test_dgd_double_delta.py). The halving is harmless here: every read of a memory is normalised (k, q,
  v) or passes a learnt read-out (eta, alpha) or the output norm. It costs time: within a mini-batch the DGD
  transitions are chained (benchmarks/nested-learning.md, "Hope with the paper's mechanisms"). `dgd=False` is Table 6's
  "w/o DGD".
- the main memory is Titans-MLP's (`memory_expand=4`, `memory_activation="gelu"`: a residual MLP 4 d wide with GELU),
  the five generating memories the narrow SiLU MLP of eq. 89 (`hidden` 0: d wide); the paper gives every memory one
  form and leaves its width open. Measured on MQAR (quick preset, benchmarks/README.md): 0.990 at lr 0.03 over
  seeds 0 / 1 (0.977 at lr 0.01) with it, 0.857 with the generators' shape (`memory_expand=0,
  memory_activation=None`, LMConfig format 5 and before; seeds 2 / 3 then read 0.372 / 0.793). It costs time: at
  heads of 16 a run took 1.1-1.3x as long, at heads of 64 the layer 1.1x in one process (benchmarks/README.md).
- v_t is L2-normalised like k_t and q_t (`normalize_v=True`; the paper normalises q and k only). Measured without it
  (benchmarks/README.md): the memories regress onto their own M(v) with v = M_v(x), a positive feedback once M_v's
  gain exceeds one; an LM on MQAR went NaN within 25 steps at eta_max 0.5. The proximal rule bounds each step but
  not this loop: at init (d_model 16, eta_max 1) inputs three times the unit scale made the unnormalised v
  overflow within 256 tokens.
- none for the targets: every memory regresses onto its own M(v_t) (`self_values=True`, eqs. 87/95). Before the
  layer norms had an affine with the generators' gain starting at 0.1 (LMConfig format 4), these targets learned MQAR
  ~10x slower than v_t (eq. 84); with it the paper's configuration (self-generated values + DGD) learned MQAR quick
  to 0.992 at lr 0.03 (early stop at step 510) and 0.873 at lr 0.1, finite throughout (seed 0; the stand-in: 0.992 at
  lr 0.03). The targets stay bounded in context whatever the weights: M(v) = v + gamma LN(.) + beta has norm at
  most |v| + |gamma| sqrt(d) + |beta|, and gamma, beta are outer parameters (tests/layers/test_hope_stable.py).
  `self_values=False` (eq. 84) is the stand-in's.
- each memory's layer norm has a learnable affine (gamma, beta) per head (`ln_affine=True`, as TTT's and Titans'
  memories have), and the generating memories' gamma starts at `generator_gain=0.1` (the main memory's at 1). A
  layer norm without one has a branch of norm sqrt(d) whatever its input, four times the unit k, v, q at head dim
  16, so at init k, v and q were a random function of the views and recall took off late and at a seed-dependent
  step. Measured on MQAR (quick preset, lr 0.1, seed 1, benchmarks/README.md): 0.010 without, 0.881 with.
- M_k (with M_eta, M_alpha), M_v and M_q read their own projection of the input (`inputs="separate"`; eq. 94 feeds
  all one x_t). With one shared x every memory starts near the identity of the same vector, so k, v and q start
  equal and must be pulled apart by the memories' MLPs alone; three views are what a linear attention's W_k, W_v,
  W_q give. `inputs="shared"` is the printed form.
- eta_t = eta_max * sigmoid(.) with eta_max = 1, inner momentum on (Table 6's full model; "w/o momentum" is
  `momentum=False`), and the main memory is read after each token's update (`read="updated"`, as TTT does), so a
  query can recall pairs of its own mini-batch; `read="anchor"` is eq. 90.

Outer parameters: the projection, conv, the six initial memories M_□,0 [H, P] (meta-learned through the unrolled
inner updates), their layer norms' affines, the gate read-outs, and the output norm and gate. Every Table-6
ablation is a constructor option (a field of SelfModifyingConfig): `dgd=False`, `self_values=False`, `momentum=False`,
`weight_decay=False`, `static=("k", "v", "q")` (any subset), `adaptive_q=False`.

The stand-in (`SelfModifyingTitansStandIn`, mixer "self_modifying_titans_standin"; Hope's: "hope_standin") is the
stabilised model these mixers defaulted to before LMConfig format 7: every memory regresses onto v_t (eq. 84, no
self-modification) without DGD's term. It is kept so the two are compared (regmem repro nl-ablations).

Padding (regmem/ops/common/padding.py): padded inputs are zeroed, each row's real tokens are moved to its front
("real tokens first": mini-batches count from a row's first real token), the padded tail changes no memory
(`token_mask`), and the outputs are moved back; the conv cache ends at each row's last real token (conv.py).
"""

from __future__ import annotations

import dataclasses

import torch
from torch import nn

from regmem.layers.base import Mixer, check_mixer_input, split_heads
from regmem.layers.conv import ShortConvolution
from regmem.layers.gates import decay_logits
from regmem.layers.memory import MemoryState
from regmem.layers.norm import GatedRMSNorm
from regmem.nested import OuterParams, SelfModifyingConfig, self_modifying_titans
from regmem.ops.common import permute_time, real_first_order, restore_time, zero_padding
from regmem.recipe import Solver


def config_from_options(config_class, options: dict, owner: str):
    """config_class(**options), with a ValueError naming `owner` and the unknown names instead of a TypeError (the
    config's own __post_init__ validates the values)."""
    known = [f.name for f in dataclasses.fields(config_class)]
    unknown = sorted(set(options) - set(known))
    if unknown:
        raise ValueError(f"{owner} got unknown options {unknown}; it takes those of {config_class.__name__}: {known}")
    return config_class(**options)


class SelfModifyingTitans(Mixer):
    """`options` are the fields of SelfModifyingConfig (regmem/nested/self_modifying.py), which holds every default
    and validates them: `mini_batch`, `mini_batch_memory`, `dgd`, `momentum`, `weight_decay`, `adaptive_q`,
    `static`, `self_values`, `normalize_v`, `read`, `eta_max`, `hidden`, ...; any other name raises ValueError (there
    is no `chunk_size`: the mini-batches set the block length)."""

    recipe_name = "self_modifying_titans"
    options_config = SelfModifyingConfig  # what `**options` take (regmem/layers/options.py)

    def __init__(self, d_model: int, n_heads: int, *, head_dim: int | None = None, short_conv: int = 4,
                 norm_eps: float = 1e-5, **options):
        super().__init__()
        self.config = config_from_options(SelfModifyingConfig, options, type(self).__name__)
        self.d_model, self.n_heads = d_model, n_heads
        self.head_dim = head_dim or d_model // n_heads
        self.short_conv = short_conv
        inner = n_heads * self.head_dim
        self.in_proj = nn.Linear(d_model, self.config.views() * inner, bias=False)  # x, or the k, v, q views
        self.conv = ShortConvolution(self.config.views() * inner, short_conv) if short_conv else None
        H, d, config = n_heads, self.head_dim, self.config
        self.memory_init = nn.ParameterDict({
            name: nn.Parameter(config.model(name, d).init(H, d, d)) for name in config.used()})
        affine = [name for name in config.used() if config.affine(name, d)]
        self.ln_weight = nn.ParameterDict({  # the main memory's gamma starts at 1, the generators' small
            name: nn.Parameter(torch.full((H, d), 1.0 if name == "memory" else config.generator_gain))
            for name in affine})
        self.ln_bias = nn.ParameterDict({name: nn.Parameter(torch.zeros(H, d)) for name in affine})
        self.w_eta = nn.Parameter(torch.randn(H, d) * d**-0.5)
        self.w_alpha = nn.Parameter(torch.randn(H, d) * d**-0.5) if config.weight_decay else None
        # the retention logit: minus the decay's (gates.py), 4.6 by default (retention ~0.99 a token at init)
        self.b_alpha = nn.Parameter(-decay_logits(config.decay_init, H)) if config.weight_decay else None
        self.w_mu = nn.Parameter(torch.randn(H, d) * d**-0.5) if config.momentum else None
        self.w_q = nn.Parameter(torch.eye(d).repeat(H, 1, 1)) if not config.adaptive_q else None
        self.g_proj = nn.Linear(d_model, inner, bias=False)
        self.o_norm = GatedRMSNorm(d, norm_eps)
        self.o_proj = nn.Linear(inner, d_model, bias=False)

    @property
    def recipe(self):
        """The point of the default, eq. 88's DGD; without `dgd` SGD with momentum and weight decay (Titans-MLP's)."""
        point = super().recipe
        return point if self.config.dgd else stand_in_recipe(point)

    def _outer(self) -> OuterParams:
        ln = {name: (self.ln_weight[name], self.ln_bias[name]) for name in self.ln_weight}
        return OuterParams(dict(self.memory_init), self.w_eta, self.w_alpha, self.w_mu, self.w_q, self.b_alpha, ln)

    def forward(self, x, state=None, *, attention_mask=None):
        check_mixer_input(x, attention_mask, self.d_model)
        mask = attention_mask.bool() if attention_mask is not None else None
        x = zero_padding(x, mask)
        conv_cache, memory = state if state is not None else (None, None)
        h = self.in_proj(x)
        if self.conv is not None:
            h, cache = self.conv(h, conv_cache[0] if conv_cache is not None else None, mask)
            conv_cache = (cache,)
        h = split_heads(h, self.head_dim)  # [B, T, H, d], or [B, T, 3 H, d] for the k, v, q views
        if self.config.views() > 1:
            h = h.unflatten(2, (self.config.views(), self.n_heads))  # [B, T, 3, H, d]
        order = None
        if mask is not None:  # real tokens first (module docstring)
            order = real_first_order(mask)  # [B, T]
            h, mask = permute_time(h, order), permute_time(mask, order)
        # Decoding one token with a state runs the engine's recurrent form; anything longer its chunk form.
        mode = "recurrent" if state is not None and x.shape[1] == 1 else "chunk"
        y, memory = self_modifying_titans(h, self.config, self._outer(), memory, token_mask=mask, mode=mode)
        if order is not None:
            y = restore_time(y, order)
        y = self.o_norm(y, split_heads(self.g_proj(x), self.head_dim))
        return self.o_proj(y.flatten(-2)), MemoryState(conv_cache, memory)

    def levels(self) -> list[dict]:
        """The memories updated in context: each every token, its gradients and generated values at the start of
        its mini-batch (Fig. 5: self-modifying Titans' chunk of 16)."""
        rows = []
        for name in self.config.used():
            if self.config.updated(name):
                rows.append({"tensors": f"M_{name} (residual MLP)", "period": self.config.mini_batch_of(name),
                             "objective": self._objective(),
                             "independent": bool(rows)})  # each needs only the previous states
        return rows

    def _objective(self) -> str:
        """What every memory regresses onto (eq. 87's own M(v_t), or eq. 84's v_t) and with which rule."""
        target = "its own values M(v_t)" if self.config.self_values else "v_t"
        return f"l2 regression onto {target}" + (", DGD" if self.config.dgd else "")

    def state_floats(self, seq_len: int) -> int:
        per_memory = sum(
            p.shape[-1] * (2 + int(self.config.momentum)) + 1 for p in self.memory_init.values())  # per head
        conv = self.in_proj.out_features * (self.short_conv - 1) if self.conv is not None else 0
        return self.n_heads * per_memory + conv


# The stand-in's options (module docstring): eq. 84's targets, no DGD term.
STAND_IN = {"self_values": False, "dgd": False}


class StandIn:
    """Mixed in before a self-modifying mixer: the mixer as regmem built it before LMConfig format 7 (module
    docstring), `STAND_IN` under any options given, which may set them back."""

    option_defaults = STAND_IN

    def __init__(self, d_model: int, n_heads: int, **options):
        super().__init__(d_model, n_heads, **{**STAND_IN, **options})

    @classmethod
    def default_recipe(cls):
        """SGD with momentum and weight decay: the stand-in has no DGD term."""
        return stand_in_recipe(super().default_recipe())


class SelfModifyingTitansStandIn(StandIn, SelfModifyingTitans):
    """Self-modifying Titans' stand-in (`StandIn`): eq. 84's targets, no DGD."""


def stand_in_recipe(point):
    """A self-modifying point without DGD's term: SGD with momentum and weight decay."""
    return dataclasses.replace(point, solver=Solver("sgd_momentum"))
