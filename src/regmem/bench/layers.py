"""`regmem bench layers`: whole mixer layers, forward and forward+backward, beside public implementations.

Every case is a layer on x [B, T, d_model] with d_model = heads x head_dim. The deep-memory cases share one
configuration: a 2-layer GELU MLP memory of width 4 x head_dim per head, inner mini-batch 16.

- `titans_mlp`, `ttt_mlp`: regmem's layers (regmem/layers/deep_memory.py): every inner gradient of a mini-batch of 16
  tokens taken at its start, per-token updates read inside it (the chunk form's dual form).
- `titans_pytorch`: lucidrains' `titans_pytorch.NeuralMemory` (the `bench` extra) with chunk_size 16 and its default
  batch_size=None: one gradient per chunk of 16, all taken at the weights the call starts from (one TTT mini-batch =
  the whole call), so the chunks run in parallel — a cheaper, different model.
- `titans_pytorch_b16`: the same with batch_size=16: the weights move every 16 tokens, the semantics of regmem's
  mini-batch of 16 (regmem still reads per-token updates inside a mini-batch, which titans-pytorch does not).
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from regmem.bench.timing import median_seconds


def _regmem(name: str) -> Callable:
    def make(d_model: int, heads: int):
        from regmem.layers import build_mixer

        return build_mixer(name, d_model, heads, mini_batch=16, chunk_size=16)
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


LAYER_CASES = {
    "titans_mlp": _regmem("titans_mlp"),
    "ttt_mlp": _regmem("ttt_mlp"),
    "titans_pytorch": _titans_pytorch(None),
    "titans_pytorch_b16": _titans_pytorch(16),
}
EXTERNAL_LAYERS = {"titans_pytorch": "titans_mlp", "titans_pytorch_b16": "titans_mlp"}  # theirs -> ours


def run_layers(case_names, seq_lens, *, batch, heads, head_dim, min_run_time, progress=print) -> dict:
    rows = []
    d_model = heads * head_dim
    for name in case_names:
        torch.manual_seed(0)
        layer = LAYER_CASES[name](d_model, heads)
        for T in seq_lens:
            x = torch.randn(batch, T, d_model, generator=torch.Generator().manual_seed(T))

            def forward(layer=layer, x=x):
                with torch.no_grad():
                    return layer(x)

            def forward_backward(layer=layer, x=x):
                y = layer(x)[0]
                y.backward(torch.ones_like(y))
                layer.zero_grad(set_to_none=True)

            for pass_, fn in (("fwd", forward), ("fwdbwd", forward_backward)):
                seconds = median_seconds(fn, min_run_time=min_run_time)
                rows.append({"layer": name, "pass": pass_, "T": T, "B": batch, "H": heads, "K": head_dim,
                             "ms": seconds * 1e3, "tokens_per_s": batch * T / seconds})
                progress(f"{name:>20} {pass_:>6} T={T:>6}: {seconds * 1e3:9.1f} ms")
    meta = {"threads": torch.get_num_threads(), "torch": torch.__version__, "d_model": d_model}
    return {"meta": meta, "rows": rows}


def layers_table(result: dict) -> str:
    rows = result["rows"]
    lines = ["| layer | pass | T | ms | tokens/s |", "|---|---|---:|---:|---:|"]
    lines += [f"| {r['layer']} | {r['pass']} | {r['T']} | {r['ms']:.1f} | {r['tokens_per_s']:,.0f} |" for r in rows]
    compare = []
    for theirs, ours in EXTERNAL_LAYERS.items():
        for r in (r for r in rows if r["layer"] == theirs):
            mine = next((m for m in rows if m["layer"] == ours and m["T"] == r["T"] and m["pass"] == r["pass"]), None)
            if mine:
                compare.append(f"| {ours} vs {theirs} | {r['T']} | {r['pass']} | {mine['ms']:.1f} | {r['ms']:.1f} | "
                               f"{r['ms'] / mine['ms']:.2f}x |")
    if compare:
        lines += ["", "| comparison | T | pass | regmem ms | theirs ms | regmem speed-up |",
                  "|---|---:|---|---:|---:|---:|", *compare]
    return "\n".join(lines)
