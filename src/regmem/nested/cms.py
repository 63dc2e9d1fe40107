"""The Continuum Memory System (CMS): Nested Learning, arXiv:2512.24695, Sec. 7.1, eqs. 70-74.

A chain of k residual MLP levels. Level l has a chunk size C_l and an inner learning rate lr_l; its parameters
theta_l are fast weights of the sequence (one copy per row), changed only when a chunk of C_l tokens ends:

    y_t = MLP_{theta_k}( ... MLP_{theta_1}(x_t))                                  (eq. 70, sequential: eq. 73)
    theta_l <- theta_l - eta_l * sum_{t in chunk} grad L(theta_l; u_t)  at t = 0 (mod C_l), else unchanged  (eq. 71)

Every token of a chunk reads the frozen chunk-start parameters, so a chunk is one batched call, and every gradient
of a chunk is taken at those parameters (the sum in eq. 71 runs over the chunk's C_l tokens; the paper's index range
i - C .. i has C + 1 terms). The initial parameters theta_{l,0} are outer parameters, meta-learned through the
unrolled updates. With lr_l = 0 (or C_l longer than any context) a level is an ordinary frozen FFN: the conventional
Transformer block is the one-level CMS that never updates (Sec. 7.1).

Each level is pre-norm residual, h <- h + f_theta(u), u = rmsnorm(h) * gamma, with f a SwiGLU MLP (the FFN of
regmem's LM, so a trained FFN can seed a level: Sec. 7.3, `stack_levels`):

    f_theta(u) = (silu(u W_gate) * (u W_up)) W_down

The inner objective L (the paper's "error component of an arbitrary optimiser", left open) is a choice:
    "value"        1/2 ||f_theta(u_t) - u_t W_value||^2, W_value an outer parameter per level: the level memorises
                   a meta-learned view of its own inputs, as TTT's reconstruction task does (arXiv:2407.04620).
    "reconstruct"  1/2 ||f_theta(u_t) - u_t||^2: the level's branch is pulled toward the identity on the context.
Both are local: available inside the forward pass and at test time without labels. (The alternative the paper
mentions, each level's share of the next-token loss, needs the labels and a backward pass through the layers above;
it is not implemented.)

The step eta_l of eq. 71 (`step_rule`):
    "explicit"     eta = lr_l, eq. 71 as printed. On W_down, whose loss is quadratic (Hessian sum_t a_t a_t^T, a_t
                   the hidden activations of the chunk), the step maps W_down -> (I - lr sum_t a_t a_t^T) W_down + ...,
                   which expands once lr * lambda_max(sum_t a_t a_t^T) > 2; W_gate's and W_up's curvature grows with
                   W_down and the activations. Large inputs or a large lr make a level diverge, and its activations
                   grow with its own weights, so one bad chunk feeds the next (Hope's CMS went to NaN on
                   self-modifying Titans' outputs, benchmarks/README.md).
    "normalized"   eta = lr_l / (1 + lr_l * sum_{t in chunk} c_t), one step per level and row, c_t a bound on the
                   largest eigenvalue of the Gauss-Newton curvature J_t^T J_t of f_theta(u_t) in all of theta:
                       c_t = ||a_t||^2 + ||u_t||^2 sum_f (silu(z_t)_f^2 + (silu'(z_t) z'_t)_f^2) ||W_down[f]||^2
                   (z = u W_gate, z' = u W_up; the three terms are W_down's, W_up's and W_gate's blocks, each
                   lambda_max(W_down^T diag(c) W_down) bounded by its trace). Then eta * lambda_max(sum_t J_t^T J_t)
                   < 1 for any input size and any lr: the linearised step is a non-expansion, and on W_down, whose
                   loss is quadratic, the homogeneous part I - eta sum_t a_t a_t^T has its spectrum in (0, 1]. For one
                   token and a linear level it is the exact proximal step, the normalised LMS step lr / (1 + lr
                   ||x||^2); for a chunk it uses the bound in place of the chunk's curvature (the exact
                   chunk-proximal step needs a solve per chunk). It departs from the printed paper (lr * sum c_t -> 0
                   recovers "explicit", and a large lr tends to the step 1 / sum c_t). It is the default, at lr 1e-3,
                   where the levels of an initial Hope LM move by 0.01 % over 1024 tokens.
    "capped"       eta = min(lr_l, 1 / sum_{t in chunk} c_t): eq. 71's step lr_l wherever the
                   curvature bound allows it, and the bound's step where it does not. The bound is a cap, not a
                   divisor: a chunk of small curvature steps by lr_l itself. Still eta * lambda_max(sum_t J_t^T J_t)
                   <= 1, so the linearised step cannot expand and W_down's homogeneous part keeps its spectrum in
                   [0, 1] (tests/layers/test_hope_stable.py: 2048 tokens of 30 randn at lr 1000 stay bounded). At
                   lr 1 it moves the levels of an initial Hope LM by 17 % over 1024 tokens; it is not the default
                   because Hope with it learned neither MQAR nor a needle at quick scale (benchmarks/README.md,
                   "Hope with the paper's mechanisms"), where each of it and the paper's memories alone did.
All three are exact in both forms: the chunk form sums c_t with the gradients, the token loop token by token, and a
partial chunk carries its sum in `CMSState`.

Variants (`variant`):
    "sequential"      the chain of eq. 73 (Hope, eq. 97).
    "nested"          eq. 72: a level is reset to its meta-learned initial value whenever its parent -- the next
                      slower level, the one with the next larger chunk size, which must be a multiple of its own --
                      ends a chunk; the slowest level is never reset inside a context.
    "nested_learned"  eq. 72 read as "the initial value of level s+1 is learnt in level s": the child's reset value
                      is itself a fast weight of the parent's level (starting at the meta-learned initial value),
                      updated in context at the parent's frequency with the parent's lr and step rule. When the
                      parent's chunk ends -- one context of the child, C_parent / C_child of its steps -- the reset
                      value takes the parent's step on 1/2 ||init - theta_child||^2 (init <- init + eta (theta_child -
                      init), eta = lr_parent for "explicit", lr_parent / (1 + lr_parent) for "normalized": that
                      objective's proximal step, a convex combination), then the child restarts from it. This is the
                      first-order (Reptile, arXiv:1803.02999) step toward eq. 72's argmin over the parent's contexts:
                      the init moves toward where the child's own learning takes it. With lr_parent = 0 it is
                      "nested".
    "independent"     eq. 74: every level reads the same input, y = x + sum_l w_l f_{theta_l}(u_l), weights w learnt.
The chain runs in the order given (chunk_sizes[0] first); ascending chunk sizes are Fig. 5's fast-first stacking
(eq. 70's index order would put the slowest first: pass the sizes in that order for it).

Persistent levels (`persistent`): Fig. 5 gives the slow levels chunks far longer than a context, so their updates
happen across the sequences of a stream. A persistent level keeps its weights, its partial chunk and its own clock
(`CMSState.stream`, tokens since the last reset) from one sequence to the next: `CMS.next_sequence(state)` starts a
new sequence, returning the other levels to their initial values and detaching the persistent ones (the outer
gradient does not cross a sequence: Fig. 5's BPTT length 1); state=None resets everything. In the nested variants a
level and its parent persist alike (a parent's reset schedule runs on its child's clock).

Forms: "chunk" (one batched call per chunk, gradients written out) and "reference" (a token loop, every per-token
gradient by torch.func.grad at the frozen chunk-start parameters, applied when the chunk ends). Both carry the
partial-chunk accumulators in `CMSState`, so a prefill followed by one-token steps equals one full call.

Legend: B batch, T time, D model width, F hidden width of a level, k levels.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar, Literal, NamedTuple, get_args

import torch
import torch.nn.functional as F
from torch import nn

from regmem.nested.cms_steps import (
    STEP_RULES,
    LevelState,
    StepRule,
    SwiGLUWeights,
    add,
    end_chunk,
    learn_init,
    swiglu,
    swiglu_and_grad,
    swiglu_and_grad_reference,
    uses_curvature,
    where,
    zeros_like,
)
from regmem.ops.common import (
    CompileBackend,
    check_compile_option,
    compiled,
    permute_time,
    real_first_order,
    restore_time,
    shared_offset,
)

Variant = Literal["sequential", "nested", "nested_learned", "independent"]
Objective = Literal["value", "reconstruct"]
Mode = Literal["chunk", "reference"]
VARIANTS, OBJECTIVES, MODES = get_args(Variant), get_args(Objective), get_args(Mode)
NESTED = ("nested", "nested_learned")  # the variants whose levels a parent resets (eq. 72)
__all__ = ["CMS", "CMSConfig", "CMSState", "LevelState", "StepRule", "SwiGLUWeights", "swiglu"]


@dataclass(frozen=True)
class CMSConfig:
    """chunk_sizes: C_l per level in chain order (their number is the number of levels); lr: the inner learning
    rate, one for every level or one per level (0 freezes a level); hidden: F, the SwiGLU width of every level;
    persistent: one flag for every level or one per level (module docstring). These defaults are the only ones:
    Hope's `cms_*` options, `LMConfig(ffn="cms")` and `stack_levels` read them from here. `kind` tags it among an
    LM's FFN configs (regmem/models/ffn.py)."""

    kind: ClassVar[Literal["cms"]] = "cms"
    chunk_sizes: tuple[int, ...] = (16, 64, 256)  # tokens per update of each level; Fig. 5 stacks 16 under slower
    # inner step size. At 1e-3 with the "normalized" rule the levels of an initial Hope LM move by 0.01 % over 1024
    # tokens; the "capped" rule at lr 1 moves them by 17 %, but with self-modifying Titans' own values and DGD Hope
    # then learned neither MQAR quick (0.14) nor its needle (0.06), both solved at this default (benchmarks/README.md)
    lr: float | tuple[float, ...] = 1e-3
    hidden: int = 0  # 0: round(8/3 D / k): the LM's SwiGLU width split over the k levels (the FFN's parameters)
    variant: Variant = "sequential"  # eq. 73, Hope's chain (eq. 97)
    objective: Objective = "value"  # a meta-learned view of the level's own inputs (module docstring)
    step_rule: StepRule = "normalized"  # cannot diverge (module docstring); "explicit" is eq. 71 as printed
    persistent: bool | tuple[bool, ...] = False  # no level carries its weights from one sequence to the next
    # True: each whole chunk of a level (its outputs, inner gradient and eq. 71 step: `_whole_chunk`) runs through
    # torch.compile (a name: that backend), one graph per level's chunk size, traced once and reused by every chunk;
    # same results to float round-off (regmem/ops/common/compiled.py). Hope's `compile_pieces` turns it on
    compile_chunks: bool | CompileBackend = False

    def __post_init__(self):
        sizes = tuple(self.chunk_sizes)
        object.__setattr__(self, "chunk_sizes", sizes)
        if not sizes or any(isinstance(c, bool) or not isinstance(c, int) or c < 1 for c in sizes):
            raise ValueError(f"chunk_sizes must be a non-empty tuple of positive ints, got {self.chunk_sizes!r}")
        if isinstance(self.lr, list | tuple):
            object.__setattr__(self, "lr", tuple(float(r) for r in self.lr))
            if len(self.lr) != len(sizes):
                raise ValueError(f"lr lists {len(self.lr)} levels but chunk_sizes lists {len(sizes)}")
        if any(r < 0 for r in self.rates()):
            raise ValueError(f"lr must be >= 0, got {self.lr!r}")
        if self.variant not in VARIANTS:
            raise ValueError(f"variant must be one of {VARIANTS}, got {self.variant!r}")
        if self.objective not in OBJECTIVES:
            raise ValueError(f"objective must be one of {OBJECTIVES}, got {self.objective!r}")
        if self.step_rule not in STEP_RULES:
            raise ValueError(f"step_rule must be one of {STEP_RULES}, got {self.step_rule!r}")
        if self.hidden < 0:
            raise ValueError(f"hidden must be >= 0, got {self.hidden}")
        self._check_persistent()
        check_compile_option("compile_chunks", self.compile_chunks)
        if self.variant in NESTED:
            for level, parent in enumerate(self.parents()):
                if parent is not None and sizes[parent] % sizes[level]:
                    raise ValueError(f"chunk_sizes: a nested level's parent chunk must be a multiple of its own, "
                                     f"got {sizes[parent]} over {sizes[level]}")

    def _check_persistent(self):
        flags = self.persistent
        if isinstance(flags, list | tuple):
            flags = tuple(flags)
            object.__setattr__(self, "persistent", flags)
            if len(flags) != self.levels:
                raise ValueError(f"persistent lists {len(flags)} levels but chunk_sizes lists {self.levels}")
        if not all(isinstance(f, bool) for f in self.persists()):
            raise ValueError(f"persistent must be a bool or a tuple of bools, got {self.persistent!r}")
        if self.variant in NESTED:
            for level, parent in enumerate(self.parents()):
                if parent is not None and self.persists()[parent] != self.persists()[level]:
                    raise ValueError(f"persistent: a nested level and its parent must both persist or both not, "
                                     f"got {self.persistent!r} for chunk_sizes {self.chunk_sizes}")

    @property
    def levels(self) -> int:
        return len(self.chunk_sizes)

    def rates(self) -> tuple[float, ...]:
        return self.lr if isinstance(self.lr, tuple) else (float(self.lr),) * self.levels

    def persists(self) -> tuple[bool, ...]:
        return self.persistent if isinstance(self.persistent, tuple) else (self.persistent,) * self.levels

    def width(self, d_model: int) -> int:
        """F of every level: `hidden`, or the SwiGLU width of the LM's FFN (8/3 D) split over the levels, so a CMS
        that replaces an FFN has its parameters (and, per token, its forward cost)."""
        return self.hidden or round(8 / 3 * d_model / self.levels)

    def parents(self) -> list[int | None]:
        """Per level, the level that resets it (the nested variants): the one with the next larger chunk size."""
        sizes = self.chunk_sizes
        return [min((j for j in range(len(sizes)) if sizes[j] > c), key=lambda j: sizes[j], default=None)
                for c in sizes]

    def learns_init(self, level: int) -> bool:
        """Whether the level's reset value is a fast weight of its parent (variant "nested_learned")."""
        return self.variant == "nested_learned" and self.parents()[level] is not None


class CMSState(NamedTuple):
    """levels: one LevelState per level; offset: [B] int64, tokens of the current sequence seen per row (chunks
    count from a row's first real token); stream: [B] int64, tokens since the last reset (the clock of the persistent
    levels; equal to offset until `CMS.next_sequence`)."""

    levels: tuple[LevelState, ...]
    offset: torch.Tensor
    stream: torch.Tensor


class CMS(nn.Module):
    """The Continuum Memory System as a module: outer parameters are each level's initial SwiGLU weights, norm
    gain, value projection (objective "value") and, for the independent variant, the aggregation weights.

    `norm_eps` is the eps of every level's RMSNorm (an LM passes its own, LMConfig.norm_eps).

    forward(x [B, T, D], state=None, *, attention_mask=None, mode="chunk") -> (y [B, T, D], CMSState). A left-padded
    row (attention_mask [B, T], 1 = token) counts chunks from its first real token; padding never updates a level.
    """

    def __init__(self, d_model: int, config: CMSConfig | None = None, *, norm_eps: float = 1e-5):
        super().__init__()
        self.config = config or CMSConfig()
        self.d_model, self.norm_eps = d_model, norm_eps
        D, F_ = d_model, self.config.width(d_model)
        k = self.config.levels
        self.norm_weight = nn.Parameter(torch.ones(k, D))
        self.gate, self.up = nn.Parameter(torch.empty(k, D, F_)), nn.Parameter(torch.empty(k, D, F_))
        self.down = nn.Parameter(torch.empty(k, F_, D))
        self.reset_parameters()
        self.value = nn.Parameter(torch.eye(D).repeat(k, 1, 1)) if self.config.objective == "value" else None
        self.mix = nn.Parameter(torch.ones(k)) if self.config.variant == "independent" else None

    @torch.no_grad()
    def reset_parameters(self, std: float | None = None):
        """The levels' initial SwiGLU weights: std=None scales by fan-in (a standalone CMS, whose levels start
        O(1)); a number draws every weight from N(0, std^2), as an LM initialises the SwiGLU FFN a level stands for
        (`LM` passes its `init_std`). In an LM the fan-in scale made each level's branch ~100x louder than every
        other branch at init (a Hope block's CMS added rms 0.59 to self-modifying Titans' 0.011, d_model 64), and
        Hope learned no recall (benchmarks/README.md)."""
        if std is None:
            D, F_ = self.gate.shape[1:]
            down = F_**-0.5 / math.sqrt(self.config.levels)
            for w, scale in ((self.gate, D**-0.5), (self.up, D**-0.5), (self.down, down)):
                w.copy_(torch.randn_like(w) * scale)
        else:
            for w in (self.gate, self.up, self.down):
                nn.init.normal_(w, std=std)

    def state_floats(self) -> int:
        """Floats of decoding state per sequence: every level's weights, its gradient accumulator (and curvature
        sum for the normalized rule) if it updates, and its learnt reset value (nested_learned); constant in the context
        length."""
        weights = self.gate.shape[1] * self.gate.shape[2] * 3
        total = 0
        for level, rate in enumerate(self.config.rates()):
            total += weights * (1 + (rate > 0) + self.config.learns_init(level))
            total += (rate > 0 and uses_curvature(self.config.step_rule))
        return total

    def initial_weights(self, level: int, B: int) -> SwiGLUWeights:
        return SwiGLUWeights(*(w[level].unsqueeze(0).expand(B, -1, -1) for w in (self.gate, self.up, self.down)))

    def initial_level(self, level: int, B: int) -> LevelState:
        theta = self.initial_weights(level, B)
        updates = self.config.rates()[level] > 0
        grad = zeros_like(theta) if updates else None
        bounded = updates and uses_curvature(self.config.step_rule)
        curvature = torch.zeros(B, dtype=self.gate.dtype, device=self.gate.device) if bounded else None
        return LevelState(theta, grad, curvature, theta if self.config.learns_init(level) else None)

    def initial_state(self, B: int) -> CMSState:
        zeros = torch.zeros(B, dtype=torch.long, device=self.gate.device)
        return CMSState(tuple(self.initial_level(level, B) for level in range(self.config.levels)), zeros, zeros)

    def next_sequence(self, state: CMSState) -> CMSState:
        """The state at the start of the stream's next sequence: the persistent levels keep their weights, partial
        chunk and clock (detached: the outer gradient does not cross sequences), the others restart from their
        initial values, and the sequence offset restarts at 0. Pass state=None to `forward` to reset everything."""
        B = state.offset.shape[0]
        levels = tuple(_detach(old) if keep else self.initial_level(level, B)
                       for level, (keep, old) in enumerate(zip(self.config.persists(), state.levels, strict=True)))
        return CMSState(levels, torch.zeros_like(state.offset), state.stream)

    def forward(self, x, state: CMSState | None = None, *, attention_mask=None, mode: Mode = "chunk"):
        if mode not in MODES:
            raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
        if x.ndim != 3 or x.shape[-1] != self.d_model:
            raise ValueError(f"x must have shape [B, T, d_model={self.d_model}], got {list(x.shape)}")
        B, T, _ = x.shape
        if attention_mask is not None and tuple(attention_mask.shape) != (B, T):
            raise ValueError(f"attention_mask must have shape [B, T] = {[B, T]}, got {list(attention_mask.shape)}")
        fresh = state is None
        if fresh:
            state = self.initial_state(B)
        if T == 0:
            return x, state
        if fresh:  # empty accumulators: the first chunk of each level starts them (`_whole_chunk` for a whole one)
            state = state._replace(levels=tuple(level._replace(grad=None, curvature=None) for level in state.levels))
        mask = attention_mask.bool() if attention_mask is not None else None
        order = None
        if mask is not None:  # real tokens first, so every row's chunks start at its first real token (padding.py)
            order = real_first_order(mask)
            x, mask = permute_time(x, order), permute_time(mask, order)
        y, state = run_cms(self, x, state, mask, mode, _starts(self.config, state, fresh, T))
        return (restore_time(y, order) if order is not None else y), state

    def level_input(self, level: int, h: torch.Tensor) -> torch.Tensor:
        return F.rms_norm(h, (self.d_model,), self.norm_weight[level], self.norm_eps)

    def target(self, level: int, u: torch.Tensor) -> torch.Tensor:
        return u if self.value is None else u @ self.value[level]

    def levels(self) -> list[dict]:
        """This module's levels (Definition 2) for `describe_levels`: one per CMS level, updated in context (the
        levels of an independent CMS read the same input, so none needs another)."""
        rows = []
        for level, (size, rate) in enumerate(zip(self.config.chunk_sizes, self.config.rates(), strict=True)):
            rows.append({"tensors": f"CMS level {level} SwiGLU (gate, up, down)", "period": size if rate > 0 else None,
                         "objective": f"{self.config.objective} regression, {self.config.step_rule} step, lr {rate:g}",
                         "reset": _reset_note(self.config, level),
                         "independent": self.config.variant == "independent" and level > 0})
        return rows


def _reset_note(config: CMSConfig, level: int) -> str:
    if config.variant not in NESTED:
        return ""
    parent = config.parents()[level]
    if parent is None:
        return ""
    learnt = " to a value its parent learns" if config.learns_init(level) else ""
    return f"reset every {config.chunk_sizes[parent]} tokens{learnt}"


def _detach(state: LevelState) -> LevelState:
    return LevelState(*(None if part is None else
                        part.detach() if isinstance(part, torch.Tensor) else SwiGLUWeights(*(t.detach() for t in part))
                        for part in state))


def _starts(config: CMSConfig, state: CMSState, fresh: bool, T: int) -> tuple[int | None, int | None]:
    """The rows' shared (sequence, stream) offsets; None for one-token steps, where each row keeps its own and
    boundaries are masks (no host read)."""
    if fresh:
        return 0, 0
    if T == 1:
        return None, None
    start = shared_offset(state.offset)
    return start, (shared_offset(state.stream) if any(config.persists()) else start)


def run_cms(cms: CMS, x, state: CMSState, mask, mode: Mode, starts: tuple[int | None, int | None]):
    """The chain over a [B, T, D] block; `starts` the rows' shared (sequence, stream) offsets (None for one-token
    steps)."""
    config = cms.config
    B, T, _ = x.shape
    weight = torch.ones(B, T, dtype=x.dtype, device=x.device) if mask is None else mask.to(x.dtype)
    h, out, new = x, x, []
    for level in range(config.levels):
        source = x if config.variant == "independent" else h
        u = cms.level_input(level, source)
        persists = config.persists()[level]
        clock, start = (state.stream, starts[1]) if persists else (state.offset, starts[0])
        level_run = _run_level if start is not None else _step
        branch, level_state = level_run(cms, level, u, weight, mask is not None, state.levels[level], clock, start,
                                        mode)
        new.append(level_state)
        if config.variant == "independent":
            out = out + cms.mix[level] * branch
        else:
            h = h + branch
    y = out if config.variant == "independent" else h
    real = weight.sum(1).to(torch.long)
    return y, CMSState(tuple(new), state.offset + real, state.stream + real)


def _schedule(config: CMSConfig, level: int) -> tuple[int, float, int | None, float]:
    """(chunk size, lr, the parent's chunk size or None, the parent's lr) of a level."""
    parent = config.parents()[level] if config.variant in NESTED else None
    rates = config.rates()
    return (config.chunk_sizes[level], rates[level], None if parent is None else config.chunk_sizes[parent],
            0.0 if parent is None else rates[parent])


def _run_level(cms: CMS, level: int, u, weight, masked: bool, state: LevelState, clock, start: int, mode: Mode):
    """One level over the block, the rows at the shared offset `start` of the level's clock: outputs [B, T, D] and
    its state after the block."""
    C, _, period, _ = _schedule(cms.config, level)
    T = u.shape[1]
    target = cms.target(level, u)
    stops = [*range(min(T, C - start % C), T, C), T] if T else []  # the level's chunk boundaries in the block, T
    sizes = [b - a for a, b in zip([0, *stops[:-1]], stops, strict=True)]
    # split, not u[:, t:stop]: the backward of a slice zero-fills all of u once per piece (O(T^2 / C))
    weights = weight.split(sizes, dim=1) if masked else [None] * len(sizes)  # None: every token real
    outs, rate, rule = [], cms.config.rates()[level], cms.config.step_rule
    whole = compiled(_whole_chunk, cms.config.compile_chunks) if cms.config.compile_chunks else _whole_chunk
    for stop, u_piece, target_piece, piece_weight in zip(stops, u.split(sizes, dim=1), target.split(sizes, dim=1),
                                                         weights, strict=True):
        chunk_end, parent_end = (start + stop) % C == 0, period is not None and (start + stop) % period == 0
        if mode == "chunk" and not masked and rate > 0 and state.grad is None and u_piece.shape[1] == C:
            out, theta = whole(state.theta, u_piece, target_piece, rate, rule)  # a whole chunk, eq. 71 included
            state, chunk_end = state._replace(theta=theta), False
        else:
            out, state = _piece(cms, level, state, u_piece, target_piece, piece_weight, mode)
        outs.append(out)
        real = weight[:, stop - 1] > 0 if masked else None  # the rows whose token at the boundary is real
        state = _boundaries(cms, level, state, (chunk_end, real), (parent_end, real))
    if state.grad is None and rate > 0:  # a chunk ended last: empty accumulators
        fresh = cms.initial_level(level, u.shape[0])
        state = state._replace(grad=zeros_like(state.theta), curvature=fresh.curvature)
    return torch.cat(outs, dim=1), state


def _whole_chunk(theta: SwiGLUWeights, u, target, rate: float, rule: StepRule):
    """One whole chunk of a level from the chunk's start, every token real: its outputs [B, C, D] at the frozen
    parameters and the parameters after eq. 71's step at its end (`_piece` then `end_chunk`, in one function that
    `compile_chunks` compiles)."""
    out, grad, curvature = swiglu_and_grad(theta, u, target, None, uses_curvature(rule))
    return out, end_chunk(LevelState(theta, grad, curvature, None), rate, rule, None).theta


def _step(cms: CMS, level: int, u, weight, masked: bool, state: LevelState, clock, start: None, mode: Mode):
    """One token per row, each row at its own offset `clock` [B]: the boundaries are masks."""
    C, _, period, _ = _schedule(cms.config, level)
    out, state = _piece(cms, level, state, u, cms.target(level, u), weight, mode)
    real = weight[:, 0] > 0
    chunk_rows = (torch.remainder(clock + 1, C) == 0) & real
    parent_rows = None if period is None else (torch.remainder(clock + 1, period) == 0) & real
    return out, _boundaries(cms, level, state, (True, chunk_rows), (period is not None, parent_rows))


def _piece(cms: CMS, level: int, state: LevelState, u, target, weight, mode: Mode):
    """Outputs of a piece inside one chunk at the frozen parameters; its gradient and curvature bound added to the
    level's accumulators."""
    config = cms.config
    if config.rates()[level] == 0:  # a frozen level
        return swiglu(state.theta, u), state
    form = swiglu_and_grad_reference if mode == "reference" else swiglu_and_grad
    out, grad, curvature = form(state.theta, u, target, weight, uses_curvature(config.step_rule))
    if state.grad is not None:  # else the chunk starts here (end_chunk left no zeros to add to)
        grad = add(state.grad, grad)
        curvature = None if curvature is None else state.curvature + curvature
    return out, state._replace(grad=grad, curvature=curvature)


def _boundaries(cms: CMS, level: int, state: LevelState, chunk: tuple, parent: tuple) -> LevelState:
    """After a piece: eq. 71 if the level's chunk ended, then eq. 72's reset if its parent's chunk ended. chunk,
    parent: (whether it may have ended, on which rows [B] bool, None for every row)."""
    config = cms.config
    _, rate, _, parent_rate = _schedule(config, level)
    (chunk_end, chunk_rows), (parent_end, parent_rows) = chunk, parent
    if chunk_end and rate > 0:
        state = end_chunk(state, rate, config.step_rule, chunk_rows)
    if parent_end:
        init = state.init
        if init is not None:  # nested_learned: the parent's in-context step on the reset value
            init = where(parent_rows, learn_init(init, state.theta, parent_rate, config.step_rule), init)
        reset = init if init is not None else cms.initial_weights(level, state.theta.gate.shape[0])
        state = state._replace(theta=where(parent_rows, reset, state.theta), init=init)
    return state
