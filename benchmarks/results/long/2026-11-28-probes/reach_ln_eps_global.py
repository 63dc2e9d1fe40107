import torch, sys
torch.set_num_threads(1)
import importlib, regmem.ops
model_mod = importlib.import_module("regmem.ops.ttt.model")
from regmem.layers import build_mixer
T, D, H = 256, 64, 4
ALL = ("k", "v", "q", "eta", "alpha")
for eps in (1e-6, 1e-2, 1.0):
    model_mod.LN_EPS = eps
    for label, opts in (("smt static all", {"static": ALL}), ("hope", {})):
        name = "self_modifying_titans" if label.startswith("smt") else "hope"
        vals = []
        for seed in range(2):
            torch.manual_seed(seed)
            m = build_mixer(name, D, H, **opts)
            x = torch.randn(1, T, D, requires_grad=True)
            y, _ = m(x)
            g, = torch.autograd.grad(y[0, -1].norm(), x)
            n = g[0].norm(dim=-1)
            vals.append((float(n[0]), float(n[128]), float(n[254])))
        print(f"eps {eps:g} {label:16s} " + " ".join(f"{sum(v[i] for v in vals)/len(vals):9.2e}" for i in range(3)), flush=True)
