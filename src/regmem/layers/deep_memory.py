"""Deep-memory mixers: the memory is a small network fitted at test time by the engine `regmem.ops.ttt`.

    q, k, v = conv(W_q x), conv(W_k x), conv(W_v x)          (memory.py: projections, short convs, L2-normalised q, k)
    eta_t = inner_lr * sigmoid(W_eta x_t)                      per head: the learnable, data-dependent inner step
    [alpha_t, mu_t = sigmoid(W_alpha x_t), sigmoid(W_mu x_t)]  weight decay and momentum (Titans only; alpha starts
                                                                near 0.01: a memory decaying by half per token forgets
                                                                its meta-learned initial state within a few tokens)
    o_t = f_{theta_t}(q_t), theta fitted on (k_t, v_t) by mini-batch SGD from a meta-learned theta_0
    y = W_o norm(o) ⊙ silu(W_g x)

- `TTTLinear`, `TTTMLP`: TTT (Sun et al., arXiv:2407.04620, Sec. 2.7 and 3.1): f(x) = x + LN(g(x)) with g linear
  (with bias) or a 2-layer GELU MLP of width 4K, plain inner GD in mini-batches of 16, learnable inner lr.
- `TitansMLP`: the deep neural memory of Titans (Behrouz et al., arXiv:2501.00663, Sec. 3.1, eqs. 9-14): a residual
  bias-free GELU MLP of depth 2 (width 4K) with output layer norm, SGD with data-dependent momentum and weight decay;
  `momentum=False` / `weight_decay=False` are Titans' Table 5 ablations (the gate held at 0); `decay_init` sets
  alpha_t's initial value, one for every head or a (lo, hi) spread over the heads (layers/gates.py).
  `TitansLinear` (titans.py) is the same memory with a linear regressor and its closed-form chunk algebra.
- `position_step=True` (TTT-Linear and TTT-MLP: no momentum, no weight decay): official TTT's inner step
  (ttt-lm-pytorch, `token_idx` and its learnt bias). The output at position i of a mini-batch reads the anchor minus
  c_i times the mini-batch's summed eta-weighted gradients so far, c_i = max(1/(i + 1) + b_i, 0) with b
  (`position_bias` [mini_batch]) learnt from zero, and the state ends the mini-batch at c_{C-1}: each output reads
  the mean of the gradients before it (`ttt(read_scale=)`, regmem/ops/ttt/state.py). Off by default: regmem's TTT
  steps every token by eta alone.
- Official TTT's layer around the memory (ttt-lm-pytorch's `TTTBase`; regmem/interop/ttt_lm_pytorch.py converts its
  weights): `rotary=True` rotates q and k by RoPE at their position within the mini-batch (t mod mini_batch, pairs of
  neighbouring channels: layers/rotary.py), `output_norm="layer"` normalises the heads' outputs together by one
  LayerNorm with an affine (`norm_eps`; the default "head" is a per-head RMSNorm), and `gate_activation="gelu_tanh"`
  gates with the tanh-approximated GELU instead of silu. All three are off by default.
- `dgd=True` on any of them adds Delta Gradient Descent's state-dependent decay (Nested Learning, arXiv:2512.24695,
  eq. 88), layer by layer; `step_rule="proximal"` replaces the printed explicit step by one that cannot expand
  (regmem/ops/ttt/DERIVATION.md §6). The default stays "explicit": TTT's and Titans' rules as published, with
  normalised keys. Measured on an untrained layer (d_model 64, 64 tokens): Titans-MLP with DGD at mini-batch 1 and
  inner_lr 1 reached |W| = 3.6e18 under the explicit rule, its output kept finite by the layer norm, and 0.75 under
  the proximal one (tests/layers/test_deep_memory_stable.py).

The initial memory theta_0 [H, P] (and the output layer norm's affine) are parameters of the layer, trained by the
outer optimiser through the unrolled inner updates ("meta-learned initial memory").

`mini_batch` is a model hyper-parameter (the engine takes every inner gradient of a mini-batch at its start; 1 is
the token recurrence); `chunk_size` only sets the chunk form's block length (≤ mini_batch), as in every mixer.
`compile_blocks=True` (or a torch.compile backend's name) runs each block of the chunk form through one compiled
graph, reused by every block (ops/common/compiled.py): same numbers to round-off, fewer and larger kernels, after a
compilation of its own on the first call.

Padding (regmem/ops/common/padding.py, "real tokens first"): each row's real tokens are moved to its front (the
engine counts mini-batches from a row's first real token), the op's `token_mask` makes the padded tail change
nothing, and the outputs are moved back. The conv caches end at each row's last real token (conv.py), so a padded
prefill followed by one-token steps equals the unpadded run.
"""

from __future__ import annotations

from typing import Literal, get_args

import torch
import torch.nn.functional as F
from torch import nn

from regmem.layers.gates import decay_logits
from regmem.layers.memory import MemoryMixer
from regmem.layers.rotary import RotaryEmbedding
from regmem.ops import InnerModel, TTTState, ttt
from regmem.ops.common import CompileBackend, check_compile_option, permute_time, real_first_order, restore_time
from regmem.ops.ttt.model import Activation, Loss, StepRule

OutputNorm = Literal["head", "layer"]  # per-head RMSNorm, or one LayerNorm over all heads (official TTT's post_norm)
GateActivation = Literal["silu", "gelu_tanh"]
GATES = {"silu": F.silu, "gelu_tanh": lambda g: F.gelu(g, approximate="tanh")}


class DeepMemoryMixer(MemoryMixer):
    """The shared skeleton (module docstring); subclasses fix the inner model and the solver's gates."""

    momentum: bool = False  # data-dependent momentum mu_t
    weight_decay: bool = False  # data-dependent weight decay alpha_t

    def __init__(self, d_model: int, n_heads: int, *, inner_model: InnerModel, inner_lr: float = 1.0,
                 mini_batch: int = 16, dgd: bool = False, loss: Loss = "l2", step_rule: StepRule = "explicit",
                 compile_blocks: bool | CompileBackend = False, qk_norm: bool = True, position_step: bool = False,
                 rotary: bool = False, rope_base: float = 10000.0, output_norm: OutputNorm = "head",
                 gate_activation: GateActivation = "silu", **memory_kwargs):
        super().__init__(d_model, n_heads, qk_norm=qk_norm, **memory_kwargs)
        self._init_output(output_norm, gate_activation)
        # official TTT's RoPE: positions within the mini-batch, neighbouring channels paired (module docstring)
        self.rotary = RotaryEmbedding(self.key_dim, rope_base, interleaved=True) if rotary else None
        check_compile_option("compile_blocks", compile_blocks)
        self.compile_blocks = compile_blocks  # the chunk form's blocks through torch.compile (ops/ttt/chunk.py)
        if loss not in get_args(Loss):
            raise ValueError(f"loss must be one of {get_args(Loss)}, got {loss!r}")
        if step_rule not in get_args(StepRule):
            raise ValueError(f"step_rule must be one of {get_args(StepRule)}, got {step_rule!r}")
        self.step_rule = step_rule
        inner_model.check_dims(self.key_dim, self.value_dim)
        self.inner_model, self.inner_lr, self.mini_batch, self.dgd, self.loss = (
            inner_model, inner_lr, mini_batch, dgd, loss)
        P = inner_model.num_params(self.key_dim, self.value_dim)
        self.memory_init = nn.Parameter(inner_model.init(n_heads, self.key_dim, self.value_dim))  # [H, P]
        if inner_model.layer_norm:
            self.ln_weight = nn.Parameter(torch.ones(n_heads, self.value_dim))
            self.ln_bias = nn.Parameter(torch.zeros(n_heads, self.value_dim))
        n_gates = self.n_gates
        self.gate_proj = nn.Linear(d_model, n_gates * n_heads, bias=False)  # eta [, mu] [, alpha] logits per head
        # The gates' biases are a parameter of their own, not the Linear's (an LM re-initialises every Linear bias to
        # zero): alpha = sigmoid(-4.6) ~ 0.01 at init, so the memory keeps ~99% per token, not 50% (TitansMLP's
        # `decay_init`: another alpha, or a spread over the heads; layers/gates.py).
        bias = torch.zeros(n_gates, n_heads)
        if self.weight_decay:
            bias[-1] = decay_logits(None, n_heads)
        self.gate_bias = nn.Parameter(bias.flatten())  # [n_gates * H]
        self.num_params = P
        if position_step and (self.momentum or self.weight_decay):
            raise ValueError("position_step is official TTT's step, which has no momentum or weight decay: the read "
                             "scale would scale those too (use it on ttt_linear or ttt_mlp)")
        self.position_step = position_step
        if position_step:  # official TTT's learnt offset of the 1/(i + 1) factors (module docstring), zero at init
            self.position_bias = nn.Parameter(torch.zeros(mini_batch))

    def _init_output(self, output_norm: OutputNorm, gate_activation: GateActivation) -> None:
        for name, value, choices in (("output_norm", output_norm, OutputNorm),
                                     ("gate_activation", gate_activation, GateActivation)):
            if value not in get_args(choices):
                raise ValueError(f"{name} must be one of {get_args(choices)}, got {value!r}")
        self.output_norm, self.gate_activation = output_norm, gate_activation
        if output_norm == "layer":
            self.o_norm = nn.LayerNorm(self.n_heads * self.value_dim, eps=self.norm_eps)
        elif gate_activation != "silu" and self.g_proj is not None:  # the gate multiplies after a plain norm
            self.o_norm = nn.RMSNorm(self.value_dim, eps=self.norm_eps)

    def _output(self, o, x):
        if self.output_norm == "head" and self.gate_activation == "silu":
            return super()._output(o, x)
        o = self.o_norm(o.flatten(-2)) if self.output_norm == "layer" else self.o_norm(o).flatten(-2)
        if self.g_proj is not None:
            o = o * GATES[self.gate_activation](self.g_proj(x))
        return self.o_proj(o)  # [B, T, d_model]

    def memory(self, x, q, k, v, mask, memory, mode):
        logits = (self.gate_proj(x) + self.gate_bias).chunk(self.n_gates, dim=-1)  # [B, T, H] each
        beta = self.inner_lr * torch.sigmoid(logits[0])
        log_mu = F.logsigmoid(logits[1]) if self.momentum else None
        g = F.logsigmoid(-logits[-1]) if self.weight_decay else None  # log(1 - alpha), alpha = sigmoid(logit)
        if memory is None:
            memory = self._initial_state(x.shape[0])
        order = None
        if mask is not None:  # real tokens first (module docstring)
            order = real_first_order(mask)  # [B, T]
            q, k, v, beta, g, log_mu, mask = (permute_time(t, order) for t in (q, k, v, beta, g, log_mu, mask))
        if self.rotary is not None:  # a row's real tokens are first: its positions count from the state's offset
            steps = torch.arange(q.shape[1], device=q.device, dtype=memory.offset.dtype)
            positions = torch.remainder(memory.offset[:, :1] + steps, self.mini_batch)  # [B, T]
            q, k = self.rotary(q, positions), self.rotary(k, positions)
        ln = {"ln_weight": self.ln_weight, "ln_bias": self.ln_bias} if self.inner_model.layer_norm else {}
        read = {}
        if self.position_step:
            beta, read["read_scale"] = self._position_step(beta)
        o, state = ttt(q, k, v, beta, g, log_mu, model=self.inner_model, loss=self.loss, dgd=self.dgd,
                       step_rule=self.step_rule,
                       mini_batch=self.mini_batch, initial_state=memory, output_final_state=True, mode=mode,
                       chunk_size=min(self.chunk_size, self.mini_batch), token_mask=mask, **ln, **read,
                       **({"compile_blocks": self.compile_blocks} if mode == "chunk" else {}))
        if order is not None:
            o = restore_time(o, order)
        return o, state

    def _position_step(self, beta):
        """Official TTT's step (module docstring): c_i = max(1/(i + 1) + bias_i, 0) for position i of a mini-batch;
        the state steps with c_{C-1} beta and output i reads c_i / c_{C-1} of the change (`ttt(read_scale=)`).
        c_{C-1} is kept >= 1e-6 in both (official TTT's state stops moving at 0; here it moves by 1e-6 of a step)."""
        positions = torch.arange(1, self.mini_batch + 1, dtype=beta.dtype, device=beta.device)
        c = (1.0 / positions + self.position_bias).clamp(min=0.0)
        last = c[-1].clamp(min=1e-6)  # one value for the step and the division, so the reads stay c_i's
        return beta * last, c / last

    @property
    def n_gates(self) -> int:
        """eta, then mu with momentum, then alpha with weight decay: one logit per head each."""
        return 1 + int(self.momentum) + int(self.weight_decay)

    def _initial_state(self, B: int) -> TTTState:
        init = self.memory_init.unsqueeze(0).expand(B, -1, -1)  # [B, H, P]
        H, P = self.memory_init.shape
        momentum = init.new_zeros(B, H, P if self.momentum else 0)
        return TTTState(init, momentum, init, init.new_zeros(B, H))

    def memory_floats(self) -> int:
        """params, anchor (and momentum) [H, P] plus the mini-batch offset [H]."""
        return self.n_heads * ((2 + int(self.momentum)) * self.num_params + 1)


class TTTLinear(DeepMemoryMixer):
    """TTT-Linear: f(x) = x + LN(x W + b), mini-batch inner GD (module docstring)."""

    recipe_name = "ttt_linear"

    def __init__(self, d_model: int, n_heads: int, *, inner_lr: float = 1.0, **kwargs):
        super().__init__(d_model, n_heads, inner_model=InnerModel((), bias=True, residual=True, layer_norm=True),
                         inner_lr=inner_lr, **kwargs)


class TTTMLP(DeepMemoryMixer):
    """TTT-MLP: f(x) = x + LN(MLP(x)), a 2-layer GELU MLP of width `expand` * K with biases (module docstring)."""

    recipe_name = "ttt_mlp"

    def __init__(self, d_model: int, n_heads: int, *, expand: int = 4, inner_lr: float = 0.1,
                 activation: Activation = "gelu", **kwargs):
        head_dim = kwargs.get("head_dim") or d_model // n_heads
        # activation "gelu_tanh": official TTT-MLP's tanh-approximated GELU (ttt-lm-pytorch)
        model = InnerModel((expand * head_dim,), activation, bias=True, residual=True, layer_norm=True)
        super().__init__(d_model, n_heads, inner_model=model, inner_lr=inner_lr, **kwargs)


class TitansMLP(DeepMemoryMixer):
    """Titans' deep memory: x + LN(MLP(x)) of `depth` layers (width `expand` * K, GELU, no biases), SGD with
    data-dependent momentum and weight decay (module docstring)."""

    recipe_name = "titans_mlp"
    momentum = True
    weight_decay = True

    def __init__(self, d_model: int, n_heads: int, *, depth: int = 2, expand: int = 4, inner_lr: float = 0.1,
                 momentum: bool = True, weight_decay: bool = True,
                 decay_init: float | tuple[float, float] | None = None, **kwargs):
        # Titans' ablations "w/o momentum" and "w/o weight decay" (arXiv:2501.00663, Table 5) switch a gate off
        self.momentum, self.weight_decay = bool(momentum), bool(weight_decay)
        if depth < 2:
            raise ValueError(f"depth must be >= 2 for a deep memory (TitansLinear is depth 1), got {depth}")
        if decay_init is not None and not weight_decay:
            raise ValueError("decay_init sets the weight decay's initial value: it needs weight_decay=True")
        head_dim = kwargs.get("head_dim") or d_model // n_heads
        model = InnerModel((expand * head_dim,) * (depth - 1), "gelu", residual=True, layer_norm=True)
        super().__init__(d_model, n_heads, inner_model=model, inner_lr=inner_lr, **kwargs)
        if decay_init is not None:  # alpha_t's initial value (module docstring; None: ~0.01 a token)
            with torch.no_grad():
                self.gate_bias.view(self.n_gates, n_heads)[-1] = decay_logits(decay_init, n_heads)
