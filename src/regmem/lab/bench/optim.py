"""`regmem bench optim`: the time of one optimiser step on the same model and gradients, for Nested Learning's
optimisers-as-memories (arXiv:2512.24695, Sec. 4 and 7.2; `regmem.optim`) beside their torch.optim counterparts.

Fig. 12 of the paper states M3's step "on par with AdaMuon": `adamuon` (`regmem.optim.AdaMuon`, Newton-Schulz in
bfloat16 as its authors run it) is timed, and M3 reported against it.

Targets: M3 <= 1.5x `torch.optim.Muon` (both Newton-Schulz in bfloat16; issue 46), M3 in float32 <= 1.5x
`MuonMemory` in float32, DeltaMomentum <= 1.5x `torch.optim.SGD(momentum)` (issue 17); DeepMomentum's
overhead is reported. Muon-family optimisers step the 2-D weights of the model (both models below are made of them
apart from biases and norms, which they leave to AdamW in training; here every timed optimiser gets the same
parameters: the 2-D ones). Each case builds its optimiser, takes a few warm-up steps (lazy state), then times
`step()` alone on fixed gradients.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn

from regmem.lab.bench.timing import median_seconds
from regmem.models import LM, LMConfig


def lm_model() -> nn.Module:
    """A 4-layer d_model 256 LM (GLA mixers, SwiGLU FFNs, vocabulary 256)."""
    torch.manual_seed(0)
    return LM(LMConfig(vocab_size=256, d_model=256, n_layers=4, n_heads=4, mixer="gla"))


def mlp_model() -> nn.Module:
    """A 1M-parameter MLP: 784 -> 1024 -> 192 -> 10 (about 1.0M weights)."""
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(784, 1024), nn.ReLU(), nn.Linear(1024, 192), nn.ReLU(), nn.Linear(192, 10))


MODELS: dict[str, Callable[[], nn.Module]] = {"lm-4x256": lm_model, "mlp-1M": mlp_model}


OPTIMIZERS = ("sgd_momentum", "delta_momentum", "deep_momentum", "adamw", "muon", "muon_memory", "muon_memory_fp32",
              "m3", "m3_fp32", "adamuon")  # the names `_optimizers` builds (their classes are imported on first use)


def _optimizers() -> dict[str, Callable[[list], torch.optim.Optimizer]]:
    from regmem.optim import M3, AdaMuon, DeepMomentum, DeltaMomentum, MuonMemory

    builders = {
        "sgd_momentum": lambda ps: torch.optim.SGD(ps, lr=0.01, momentum=0.9),
        "delta_momentum": lambda ps: DeltaMomentum(ps, lr=0.01, momentum=0.9),
        "deep_momentum": lambda ps: DeepMomentum(ps, lr=0.01, momentum=0.9),
        "adamw": lambda ps: torch.optim.AdamW(ps, lr=1e-3),
        "muon": lambda ps: torch.optim.Muon(ps, lr=0.02),
        "muon_memory": lambda ps: MuonMemory(ps, lr=0.02),
        # Newton-Schulz in float32, as M3 runs it: torch's Muon casts to bfloat16, slow on CPUs without bf16 units
        "muon_memory_fp32": lambda ps: MuonMemory(ps, lr=0.02, ns_dtype=None),
        "m3": lambda ps: M3(ps, lr=0.02, ns_dtype=torch.bfloat16),  # Newton-Schulz in bfloat16, as torch.optim.Muon
        "m3_fp32": lambda ps: M3(ps, lr=0.02, ns_dtype=None),
        "adamuon": lambda ps: AdaMuon(ps, lr=0.02),  # Newton-Schulz in bfloat16, its authors' default
    }
    return builders


PAIRS = (("m3", "muon", 1.5), ("m3_fp32", "muon_memory_fp32", 1.5), ("m3_fp32", "muon", None),
         ("delta_momentum", "sgd_momentum", 1.5),
         ("deep_momentum", "sgd_momentum", None), ("muon_memory", "muon", None), ("m3", "adamuon", None),
         ("adamuon", "muon", None))


def run_optim_timing(models, optimizers, *, min_run_time: float = 1.0, progress=print) -> dict:
    """Times `step()` of each optimiser on each model's 2-D parameters with fixed random gradients."""
    builders = _optimizers()
    unknown = sorted(set(optimizers) - set(builders))
    if unknown:
        raise ValueError(f"optimizers must be among {sorted(builders)}, got {unknown}")
    rows = []
    for model_name in models:
        model = MODELS[model_name]()
        params = [p for p in model.parameters() if p.ndim == 2]
        gen = torch.Generator().manual_seed(0)
        for p in params:
            p.grad = torch.randn(p.shape, generator=gen) * 1e-2
        for name in optimizers:
            opt = builders[name](params)
            for _ in range(3):  # lazy state
                opt.step()
            seconds = median_seconds(opt.step, min_run_time=min_run_time)
            rows.append({"model": model_name, "optimizer": name, "ms": seconds * 1e3,
                         "parameters": sum(p.numel() for p in params)})
            progress(f"{model_name:>9} {name:>15}: {seconds * 1e3:8.2f} ms / step")
    return {"meta": {"threads": torch.get_num_threads(), "torch": torch.__version__}, "rows": rows}


def optim_timing_table(result: dict) -> str:
    rows = {(r["model"], r["optimizer"]): r for r in result["rows"]}
    models = list(dict.fromkeys(r["model"] for r in result["rows"]))
    lines = [f"Threads: {result['meta']['threads']} (torch {result['meta']['torch']}).", "",
             "| model | 2-D params | optimizer | ms / step |", "|---|---:|---|---:|"]
    lines += [f"| {r['model']} | {r['parameters']:,} | {r['optimizer']} | {r['ms']:.2f} |" for r in result["rows"]]
    lines += ["", "| model | optimizer / baseline | ratio | target |", "|---|---|---:|---|"]
    for model in models:
        for name, base, target in PAIRS:
            if (model, name) in rows and (model, base) in rows:
                ratio = rows[(model, name)]["ms"] / rows[(model, base)]["ms"]
                verdict = "reported" if target is None else f"<= {target:g}x: {'ok' if ratio <= target else 'MISSED'}"
                lines.append(f"| {model} | {name} / {base} | {ratio:.2f}x | {verdict} |")
    return "\n".join(lines)
