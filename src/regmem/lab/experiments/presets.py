"""Presets for `regmem compare`: data, derived from one size knob (d_model).

A preset fixes the model, the task's default point and the training budget; every mixer of a comparison gets
the same preset. The model is the TTR paper's MQAR setting (Sec. 6): one mixer layer whose keys come from a
short convolution, no MLP, heads of 16 dims, so the recurrent state (d_model x 16 floats per layer) is fixed
while the number of key-value pairs grows. Sequence length, vocabulary, steps and data all scale with d_model.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field


@dataclass(frozen=True)
class Preset:
    name: str
    d_model: int  # the size knob
    n_layers: int
    n_heads: int
    ffn: str  # "swiglu" or "none"
    task: dict  # task-config fields, e.g. {"seq_len": 64, "num_kv_pairs": 8, "vocab_size": 256}
    steps: int  # optimiser steps per run (early stop at eval accuracy 0.99)
    batch_size: int
    lr: float
    num_train: int  # training examples, generated once per run from the seed
    num_eval: int  # held-out examples
    eval_every: int  # steps between evaluations, the granularity of the early stop
    mixer_kwargs: dict = field(default_factory=dict)  # per mixer name, applied to every run
    # Per task name, that task's config fields at this scale; a task not listed takes the fields of `task` it has.
    task_points: dict = field(default_factory=dict)
    # AdamW's lr for a model's MLPs (an FFN, Hope's CMS) is the run's lr times this (TrainConfig.mlp_lr_scale)
    mlp_lr_scale: float = 1.0

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


def make_preset(name: str, d_model: int, *, n_layers: int = 1, ffn: str = "none", mlp_lr_scale: float = 0.1) -> Preset:
    steps = 8 * d_model
    return Preset(
        name=name,
        d_model=d_model,
        n_layers=n_layers,
        n_heads=max(d_model // 16, 1),
        ffn=ffn,
        task={"vocab_size": 4 * d_model, "seq_len": d_model, "num_kv_pairs": d_model // 8,
              "random_non_queries": False},
        steps=steps,
        batch_size=64,
        lr=1e-2,  # measured: 1e-3 and 3e-3 leave attention near 10% after 600 steps at d_model 64
        num_train=steps * 64,  # every training sequence is seen once
        num_eval=256,
        eval_every=max(steps // 10, 1),
        # Every mixer gets the short conv (memory mixers have it by default); Mamba-2's state N x P per head is
        # cut to 16 x 2 head_dim so its recurrent state is close to the d_model x 16 of the other memories. The
        # block attentions get blocks of T / 4 (16 at quick), so that a query chooses among several (at their
        # default 64 a quick sequence is one block, and both are exactly `attn`).
        mixer_kwargs={"attn": {"short_conv": 4}, "local_linear": {"short_conv": 4}, "mamba2": {"state_size": 16},
                      "moe_attn": {"short_conv": 4, "block_size": max(d_model // 4, 1)},
                      "moba": {"short_conv": 4, "block_size": max(d_model // 4, 1)}},
        task_points=task_points(d_model),
        # The lr grid is set by MLP-free mixers whose projections feed normalisations; an MLP after one (Hope's CMS)
        # at that lr outgrew it and stalled recall (Gated DeltaNet + SwiGLU on MQAR: 0.116 at one lr, 0.992 with
        # the FFN at 0.1 x; benchmarks/README.md), so a model's MLPs train at a tenth of it.
        mlp_lr_scale=mlp_lr_scale,
    )


def task_points(d_model: int) -> dict[str, dict]:
    """Every task's point at this size: T = d_model where the task allows it (so a step costs about what an
    MQAR step does), MAD's baseline vocabularies (Poli et al. 2024, arXiv:2403.17844, App. B; at d_model 128
    the recall tasks are at MAD's baseline length). Tasks not listed (parity, cycle_navigation, text) take the
    MQAR point's seq_len."""
    return {
        "icr": {"vocab_size": 16, "seq_len": d_model},
        "noisy_icr": {"vocab_size": 32, "seq_len": d_model},
        "fuzzy_icr": {"vocab_size": 16, "seq_len": d_model},
        "selective_copy": {"vocab_size": 16, "seq_len": 2 * d_model, "num_tokens_to_copy": max(d_model // 4, 1)},
        "compression": {"vocab_size": 16, "input_len": max(d_model // 2, 2)},  # T = d_model - 1
        "memorization": {"vocab_size": 4 * d_model, "seq_len": max(d_model // 2, 2)},
        # At quick scale four needles are not learnt in 512 steps (measured: attention 0.41, DeltaNet at chance),
        # two separate the mixers; the multi-value needle needs >= 41 tokens at its default key and value lengths.
        "niah_single": {"seq_len": max(d_model, 64)},
        "niah_multikey": {"seq_len": max(d_model, 64), "num_needles": 2},
        "niah_multivalue": {"seq_len": max(d_model, 64), "num_needles": 2},
        "modular_arithmetic": {"seq_len": d_model - 1},  # odd: number, operator, ..., number
        # S5 at T = 16 at every size, four times cheaper than T = 64; longer words are the length split. At quick
        # no mixer learns more than the first position at either length (benchmarks/README.md, S5 word problem).
        "s5": {"seq_len": 16},
        # arXiv:2505.19488 Sec. 3.2 (Listing 2): 5 elements, 16 swaps at every size; longer is the length split.
        # DAG reachability has no seq_len field (T follows num_nodes), so it keeps its own n = 32 point.
        "swap": {"seq_len": 16},
    }


PRESETS = {
    "tiny": make_preset("tiny", 16),  # seconds per run: tests and smoke runs
    "quick": make_preset("quick", 64),  # `make demo`: five mixers at two points in minutes on 2 CPU cores
    "small": make_preset("small", 128),
    # quick's size and budget with two blocks of mixer + SwiGLU (MAD's model), for tasks whose answer is a
    # nonlinear function of a few tokens (a word problem's product of two group elements is a table), which the
    # one-layer MQAR model without an MLP cannot express.
    # Its committed results (S3, S5 word problems) were measured with one lr for the whole model, so it keeps one.
    "quick-mlp": make_preset("quick-mlp", 64, n_layers=2, ffn="swiglu", mlp_lr_scale=1.0),
}


def long_preset(d_model: int = 64, seq_len: int = 1024) -> Preset:
    """The long-context suite: quick's one-layer model (heads of 16, the short conv, MLPs at 0.1 x the lr) at
    T = `seq_len`, where each level of Hope's default CMS (chunks 16, 64, 256) updates at least four times per
    sequence and every memory mini-batch of 16 sixty-four times. Zoology's long-sequence MQAR (arXiv:2312.04927,
    Sec. 4): the key-value pairs open the sequence and each query comes at a uniformly random later position
    (`power_a` 1), so the mean key-query gap is ~T / 2; needles at the same length; byte-level text in 1024-byte
    windows. The budget fits 2 cores: at d_model 64, B 8 and T 1024 a Gated DeltaNet step takes ~0.26 s on one
    thread and a Hope step ~1.8 s, so a Hope run of 500 steps is ~15 min."""
    base = make_preset("long", d_model)
    steps, batch = 500, 8
    mqar = {"vocab_size": 2 * seq_len, "seq_len": seq_len, "num_kv_pairs": d_model // 2, "power_a": 1.0,
            "random_non_queries": False}  # MQAR needs V > T
    # Truncated BPTT for the self-referential memories: their full backward overflows float32 at T 1024
    # (regmem/layers/self_modifying.py); the forward still carries every memory over the whole sequence.
    truncated = {"bptt": 128}
    kwargs = {**base.mixer_kwargs, "hope": truncated, "self_modifying_titans": truncated, "hope_standin": truncated,
              # blocks of 128: eight per sequence, of which MoBA reads its top 3
              "moe_attn": {"short_conv": 4, "block_size": 128}, "moba": {"short_conv": 4, "block_size": 128}}
    return dataclasses.replace(
        base, task=mqar, steps=steps, batch_size=batch, num_train=steps * batch, num_eval=128, eval_every=50,
        mixer_kwargs=kwargs,
        task_points={**base.task_points,  # the tasks outside the suite keep quick's points
                     "niah_single": {"seq_len": seq_len}, "niah_multikey": {"seq_len": seq_len, "num_needles": 2},
                     "text": {"seq_len": seq_len}})


PRESETS["long"] = long_preset()
