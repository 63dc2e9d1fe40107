"""Hope and Hope-Attention: Nested Learning, arXiv:2512.24695, Sec. 8.3, eqs. 94-97.

    o = SelfModifyingTitans(x)        (eqs. 94-96: q, k L2-normalised, short causal conv of window 4, chunk-wise)
    y = CMS(o)                        (eq. 97: the Continuum Memory System, sequential variant, regmem.nested.CMS)

Hope-Attention puts global softmax attention where self-modifying Titans was (Sec. 8.3: "a Transformer whose MLPs
are CMS"). Both are mixers, so an LM takes them by name (`mixer="hope"`); with `ffn="none"` the CMS is the block's
only MLP, as in the paper. Every Table-6 ablation is a constructor flag: self-modifying Titans' own (`momentum=False`,
`weight_decay=False`, `static=("k",)` ... for "w/o inner-projection k/v", `adaptive_q=False`, `dgd=False` ("w/o
DGD"), `self_values=False`) and `cms=False` ("w/o CMS", which leaves self-modifying Titans alone). With no options
Hope has the paper's mechanisms (regmem/layers/self_modifying.py names each departure from the printed equations)
but one: its CMS steps by the "normalized" rule at lr 1e-3, which barely moves the levels in context. The "capped"
rule at `cms_lr=1` moves them (17 % over 1024 tokens), and with it Hope learned neither MQAR nor a needle at quick
scale, where either part alone trained (benchmarks/nested-learning.md, "Hope with the paper's mechanisms").
`HopeStandIn` (mixer "hope_standin") is the stabilised model it was before LMConfig format 7.

CMS options: `cms_chunk_sizes` (one per level, fast first as in Fig. 5), `cms_lr` (inner learning rate),
`cms_variant`, `cms_objective`, `cms_hidden` (0: 8/3 d_model), `cms_step_rule` ("normalized", which cannot diverge;
"capped", eq. 71's lr capped by the curvature bound, which cannot expand either and moves the levels far more at a
large lr; or "explicit", eq. 71 as printed), `cms_persistent` (levels carried across the sequences of a stream),
`cms_compile_chunks` (each whole chunk of a level through torch.compile; Hope's `compile_pieces` sets it too): the
fields of CMSConfig (regmem/nested/cms.py), whose defaults they read; with `cms=False` setting any of them raises
ValueError.

Training: the CMS's levels are MLPs whose output is cubic in their weights, after a mixer whose projections feed
normalisations; at the lr that mixer wants they outgrow it. The experiments' presets (tiny, quick, small) train
every MLP, this CMS included (`has_mlp`), at 0.1 x the run's lr (`TrainConfig.mlp_lr_scale`); measured on MQAR
(quick, benchmarks/README.md) Hope then recalled 0.991 at lr 0.03 over seeds 0 / 1, against 0.255 at its best
lr with one lr for all (LMConfig format 5).

State: `HopeState(inner, cms)`, the inner mixer's state and the CMS's.
"""

from __future__ import annotations

from typing import NamedTuple

from regmem.layers.attention import SoftmaxAttention
from regmem.layers.self_modifying import SelfModifyingTitans, StandIn
from regmem.nested import CMS, CMSConfig, CMSState
from regmem.nested.cms import Objective, StepRule, Variant
from regmem.ops.common import CompileBackend


class HopeState(NamedTuple):
    inner: object
    cms: CMSState | None


class _ThenCMS:
    """Runs the mixer it is mixed into, then a CMS on its output (eq. 97). It takes the `cms` flag and the `cms_*`
    options (each `cms_<field>` is that field of CMSConfig, whose default it reads) and hands every other option to
    that mixer, which rejects the unknown ones."""

    has_mlp = True  # the CMS's levels (regmem.train: mlp_lr_scale)

    def __init__(self, d_model: int, n_heads: int, *, cms: bool = True,
                 cms_chunk_sizes: tuple[int, ...] = CMSConfig.chunk_sizes,
                 cms_lr: float | tuple[float, ...] = CMSConfig.lr, cms_variant: Variant = CMSConfig.variant,
                 cms_objective: Objective = CMSConfig.objective, cms_hidden: int = CMSConfig.hidden,
                 cms_step_rule: StepRule = CMSConfig.step_rule,
                 cms_persistent: bool | tuple[bool, ...] = CMSConfig.persistent,
                 cms_compile_chunks: bool | CompileBackend = CMSConfig.compile_chunks, **inner):
        if cms and not cms_compile_chunks:  # the inner mixer's compile option compiles the CMS's chunks too
            cms_compile_chunks = inner.get("compile_pieces", CMSConfig.compile_chunks)
        config = CMSConfig(chunk_sizes=cms_chunk_sizes, lr=cms_lr, hidden=cms_hidden, variant=cms_variant,
                           objective=cms_objective, step_rule=cms_step_rule, persistent=cms_persistent,
                           compile_chunks=cms_compile_chunks)
        if not cms and config != CMSConfig():
            raise ValueError(f"the cms_* options apply only with cms=True, got cms=False and {config}")
        super().__init__(d_model, n_heads, **inner)
        self.cms = CMS(d_model, config) if cms else None

    def forward(self, x, state=None, *, attention_mask=None):
        inner, cms_state = state if state is not None else (None, None)
        o, inner = super().forward(x, inner, attention_mask=attention_mask)
        if self.cms is not None:
            o, cms_state = self.cms(o, cms_state, attention_mask=attention_mask)
        return o, HopeState(inner, cms_state)

    def state_floats(self, seq_len: int) -> int:
        return super().state_floats(seq_len) + (self.cms.state_floats() if self.cms is not None else 0)


class Hope(_ThenCMS, SelfModifyingTitans):
    """Self-modifying Titans followed by a CMS (module docstring). The memories' mini-batch (the paper's chunk, 16
    in Fig. 5) is `mini_batch`; state tracking needs small ones (Sec. 9.5). Options: `cms` and the `cms_*` ones of
    _ThenCMS, the rest SelfModifyingTitans'."""

    recipe_name = "self_modifying_titans"


class HopeAttention(_ThenCMS, SoftmaxAttention):
    """Softmax attention followed by a CMS (module docstring); options: `cms` and the `cms_*` ones of _ThenCMS, the
    rest SoftmaxAttention's. Like Hope it has the short causal convolution of window 4 by default (Sec. 8.3's "local
    convolutions"; `short_conv=0` removes it, and then one layer cannot find the token before a key: on MQAR it
    scored 0.145 without, attention 0.994 with)."""

    recipe_name = "softmax_attn"

    def __init__(self, d_model: int, n_heads: int, *, short_conv: int = 4, **options):
        super().__init__(d_model, n_heads, short_conv=short_conv, **options)


class HopeStandIn(StandIn, Hope):
    """Hope as regmem built it before LMConfig format 7 (`StandIn`): self-modifying Titans' stand-in (eq. 84's
    targets, no DGD) followed by Hope's CMS. Options given override these."""
