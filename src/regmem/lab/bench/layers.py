"""`regmem bench layers`: whole mixer layers, forward and forward+backward, beside public implementations, and
one decoding step after a context of T tokens.

Every case is a layer on x [B, T, d_model] with d_model = heads x head_dim. The deep-memory cases share one
configuration: a 2-layer GELU MLP memory of width 4 x head_dim per head, inner mini-batch 16.

Passes: `fwd` (no grad), `fwdbwd` (a forward and a backward of a unit cotangent), and `step` for regmem's layers: the
prefill of T tokens (not timed) returns the layer's state, and one token is then timed through the layer with that
state (the recurrent form). A fixed-size state makes the step cost the same at every T.

- `titans_mlp`, `ttt_mlp`: regmem's layers (regmem/layers/deep_memory.py): every inner gradient of a mini-batch of 16
  tokens taken at its start, per-token updates read inside it (the chunk form's dual form).
- `titans_pytorch`: lucidrains' `titans_pytorch.NeuralMemory` (the `bench` extra) with chunk_size 16 and its default
  batch_size=None: one gradient per chunk of 16, all taken at the weights the call starts from (one TTT mini-batch =
  the whole call), so the chunks run in parallel — a cheaper, different model.
- `neural_memory`: regmem's layer for that same model (regmem/layers/neural_memory.py, what
  `regmem.interop.convert("titans_pytorch.NeuralMemory", ...)` returns), stated against `titans_pytorch`.
- `titans_pytorch_b16`: the same with batch_size=16: the weights move every 16 tokens, the semantics of regmem's
  mini-batch of 16 (regmem still reads per-token updates inside a mini-batch, which titans-pytorch does not).
- `cms`: Nested Learning's Continuum Memory System (regmem/nested/cms.py) with three SwiGLU levels of the LM's FFN
  width 8/3 d_model, updated every 16, 64 and 256 tokens; `swiglu`: one such FFN (the LM's), its baseline.
- `hope`: self-modifying Titans (mini-batch 16) followed by that CMS; `gated_deltanet`, its baseline at equal d_model.
  `hope_compiled`: the same with `compile_pieces=True`, each mini-batch's fused piece through torch.compile (inductor;
  its compilation, minutes on CPU, falls in the untimed first call).
  Since the CMS's chunk compile (`compile_chunks`), that option compiles each whole chunk of the CMS's levels too.
  `hope_standin`: Hope as it was before LMConfig format 7 (eq. 84's targets, no DGD; regmem/layers/hope.py), so the
  cost of the paper's mechanisms reads beside it.
  `gated_deltanet_compiled`: the Gated DeltaNet layer whole through torch.compile, the compiled baseline.
- `titans_mlp_compiled`, `ttt_mlp_compiled`: those layers with `compile_blocks=True`, each block of the engine's
  chunk form through torch.compile (inductor; compiled in the untimed first call), stated against the eager layer.
- `mamba`: Mamba-1 (state 16 per channel, d_inner = 2 d_model, the selective scan's chunk form); `mamba2`, its
  baseline (state 64, `heads` heads of 2 d_model / heads).
- `moe_attn`, `moba`: MoE attention and MoBA (regmem/layers/block_attention.py) with the long preset's options
  (blocks of 128 keys, attention's short conv of width 4), stated against `attn`, softmax attention with that conv.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from regmem.lab.bench.timing import median_seconds


def _regmem(name: str, **kwargs) -> Callable:
    def make(d_model: int, heads: int):
        from regmem.layers import build_mixer

        return build_mixer(name, d_model, heads, **kwargs)
    return make


def _titans_pytorch(batch_size: int | None) -> Callable:
    def make(d_model: int, heads: int):
        try:
            from titans_pytorch import NeuralMemory
        except ImportError:
            raise ImportError("this bench case needs titans-pytorch: pip install 'regmem[bench]'") from None
        return NeuralMemory(dim=d_model, chunk_size=16, batch_size=batch_size, heads=heads,
                            dim_head=d_model // heads, default_model_kwargs={"depth": 2, "expansion_factor": 4.0})
    return make


def _neural_memory(d_model: int, heads: int):
    from regmem.layers import NeuralMemory

    return NeuralMemory(d_model, heads, chunk_size=16, depth=2, expansion=4.0)


def _compiled(make: Callable) -> Callable:
    """The layer `make` builds, whole through torch.compile (inductor; compiled in the untimed first call)."""
    return lambda d_model, heads: torch.compile(make(d_model, heads))


def _cms(d_model: int, heads: int):
    from regmem.nested import CMS

    return CMS(d_model)  # CMSConfig's default levels


class _FFN(torch.nn.Module):
    """The LM's SwiGLU FFN in the layers' (y, state) calling convention; it keeps no state."""

    def __init__(self, d_model: int, heads: int):
        super().__init__()
        from regmem.models import SwiGLU, SwiGLUConfig

        self.ffn = SwiGLU(d_model, SwiGLUConfig().hidden(d_model))

    def forward(self, x, state=None):
        return self.ffn(x), None


DEEP = {"mini_batch": 16, "chunk_size": 16}
LAYER_CASES = {
    "titans_mlp": _regmem("titans_mlp", **DEEP),
    "ttt_mlp": _regmem("ttt_mlp", **DEEP),
    "titans_mlp_compiled": _regmem("titans_mlp", **DEEP, compile_blocks=True),
    "ttt_mlp_compiled": _regmem("ttt_mlp", **DEEP, compile_blocks=True),
    "ttt_linear": _regmem("ttt_linear", **DEEP),
    "self_modifying_titans": _regmem("self_modifying_titans", mini_batch=16),
    "mamba": _regmem("mamba"),
    "mamba2": _regmem("mamba2"),
    "cms": _cms,
    "swiglu": _FFN,
    "hope": _regmem("hope", mini_batch=16),
    "hope_compiled": _regmem("hope", mini_batch=16, compile_pieces=True),
    "hope_standin": _regmem("hope_standin", mini_batch=16),
    "gated_deltanet": _regmem("gated_deltanet"),
    "gated_deltanet_compiled": _compiled(_regmem("gated_deltanet")),
    "titans_pytorch": _titans_pytorch(None),
    "titans_pytorch_b16": _titans_pytorch(16),
    "neural_memory": _neural_memory,
    "attn": _regmem("attn", short_conv=4),
    "moe_attn": _regmem("moe_attn", short_conv=4, block_size=128),
    "moba": _regmem("moba", short_conv=4, block_size=128),
}
EXTERNAL_LAYERS = {"titans_pytorch": "titans_mlp", "titans_pytorch_b16": "titans_mlp"}  # theirs -> ours
# layer -> the layer its time is stated against
# (layer, the layer its time is stated against): a compiled layer against the eager baseline and the compiled one
BASELINES = (("cms", "swiglu"), ("hope", "gated_deltanet"), ("hope_compiled", "gated_deltanet"),
             ("hope_standin", "gated_deltanet"),
             ("hope_compiled", "gated_deltanet_compiled"), ("gated_deltanet_compiled", "gated_deltanet"),
             ("mamba", "mamba2"), ("titans_mlp_compiled", "titans_mlp"), ("ttt_mlp_compiled", "ttt_mlp"),
             ("neural_memory", "titans_pytorch"), ("moe_attn", "attn"), ("moba", "attn"))
STATELESS = {*EXTERNAL_LAYERS, "swiglu"}  # no decoding state: no step pass
PASSES = ("fwd", "fwdbwd", "step")


def run_layers(case_names, seq_lens, *, batch, heads, head_dim, min_run_time, passes=PASSES, progress=print) -> dict:
    """Times every (case, T, pass); `step` only for regmem's layers (the external ones keep no decoding state here).
    Returns {"meta": ..., "rows": [...]}."""
    rows = []
    d_model = heads * head_dim
    for name in case_names:
        torch.manual_seed(0)
        layer = LAYER_CASES[name](d_model, heads)
        for T in seq_lens:
            x = torch.randn(batch, T + 1, d_model, generator=torch.Generator().manual_seed(T))
            timed = {"fwd": _forward(layer, x[:, :T]), "fwdbwd": _forward_backward(layer, x[:, :T])}
            if name not in STATELESS and "step" in passes:
                timed["step"] = _step(layer, x[:, :T], x[:, T:])
            for pass_, fn in ((p, timed[p]) for p in passes if p in timed):
                seconds = median_seconds(fn, min_run_time=min_run_time)
                tokens = batch * (1 if pass_ == "step" else T)
                rows.append({"layer": name, "pass": pass_, "T": T, "B": batch, "H": heads, "K": head_dim,
                             "ms": seconds * 1e3, "tokens_per_s": tokens / seconds})
                progress(f"{name:>22} {pass_:>6} T={T:>6}: {seconds * 1e3:9.2f} ms")
    meta = {"threads": torch.get_num_threads(), "torch": torch.__version__, "d_model": d_model}
    return {"meta": meta, "rows": rows}


def _forward(layer, x) -> Callable[[], object]:
    def forward():
        with torch.no_grad():
            return layer(x)
    return forward


def _forward_backward(layer, x) -> Callable[[], None]:
    def forward_backward():
        y = layer(x)[0]
        y.backward(torch.ones_like(y))
        layer.zero_grad(set_to_none=True)
    return forward_backward


def _step(layer, context, token) -> Callable[[], object]:
    """One token through the layer after the prefill of `context` (the prefill is not timed)."""
    with torch.no_grad():
        _, state = layer(context)

    def step():
        with torch.no_grad():
            return layer(token, state)
    return step


def _matched(rows: list[dict], layer: str, other: str):
    """(row of `layer`, row of `other` at the same T and pass) for every such pair."""
    for r in (r for r in rows if r["layer"] == layer):
        match = next((o for o in rows if o["layer"] == other and o["T"] == r["T"] and o["pass"] == r["pass"]), None)
        if match:
            yield r, match


def _pair_table(rows: list[dict], pairs, label: str, *, speed_up: bool, header: str) -> list[str]:
    """One line per (a, b) pair measured at the same T and pass: a's ms, b's ms and b / a (`speed_up`) or a / b."""
    body = []
    for a, b in pairs:
        for r, other in _matched(rows, a, b):
            ratio = f"{other['ms'] / r['ms']:.2f}x" if speed_up else f"{r['ms'] / other['ms']:.2f}"
            body.append(f"| {label.format(a=a, b=b)} | {r['T']} | {r['pass']} | {r['ms']:.1f} | {other['ms']:.1f} | "
                        f"{ratio} |")
    return ["", header, "|---|---:|---|---:|---:|---:|", *body] if body else []


def layers_table(result: dict) -> str:
    """Every row (T is the context of a `step`), then regmem against each public implementation at the same T and
    pass, then each layer's time over its baseline's (`BASELINES`: the CMS over a SwiGLU FFN, Hope over Gated
    DeltaNet, Mamba over Mamba-2), then each layer's decoding step at the longest context over the shortest."""
    rows = result["rows"]
    lines = ["| layer | pass | T | ms | tokens/s |", "|---|---|---:|---:|---:|"]
    lines += [f"| {r['layer']} | {r['pass']} | {r['T']} | {r['ms']:.2f} | {r['tokens_per_s']:,.0f} |" for r in rows]
    speed_ups = [(ours, theirs) for theirs, ours in EXTERNAL_LAYERS.items()]  # regmem's layer over theirs
    lines += _pair_table(rows, speed_ups, "{a} vs {b}", speed_up=True,
                         header="| comparison | T | pass | regmem ms | theirs ms | regmem speed-up |")
    lines += _pair_table(rows, BASELINES, "{a} / {b}", speed_up=False,
                         header="| time ratio | T | pass | layer ms | baseline ms | layer / baseline |")
    steps = [r for r in rows if r["pass"] == "step"]
    Ts = sorted({r["T"] for r in steps})
    if len(Ts) > 1:
        lines += ["", f"| layer | decode step ms @ {Ts[0]} | ms @ {Ts[-1]} | t({Ts[-1]}) / t({Ts[0]}) |",
                  "|---|---:|---:|---:|"]
        for layer in dict.fromkeys(r["layer"] for r in steps):
            by_T = {r["T"]: r["ms"] for r in steps if r["layer"] == layer}
            if Ts[0] in by_T and Ts[-1] in by_T:
                lines.append(f"| {layer} | {by_T[Ts[0]]:.3f} | {by_T[Ts[-1]]:.3f} | {by_T[Ts[-1]] / by_T[Ts[0]]:.2f} |")
    return "\n".join(lines)
