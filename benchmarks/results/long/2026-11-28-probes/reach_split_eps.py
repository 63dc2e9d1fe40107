import dataclasses
import sys, torch
torch.set_num_threads(1)
from regmem.layers import build_mixer
from regmem.nested import self_modifying as sm
from regmem.ops import InnerModel
orig = sm.SelfModifyingConfig.model
MODE = {"m": None}
def model(self, name, d):
    im = orig(self, name, d)
    mode = MODE["m"]
    if mode is None or not isinstance(im, InnerModel):
        return im
    eps = mode[0] if name == "memory" else mode[1]
    return dataclasses.replace(im, ln_eps=eps)
sm.SelfModifyingConfig.model = model
T, D, H = 256, 64, 4
for label, mode in (("main 1, gens 1e-6", (1.0, 1e-6)), ("main 1e-6, gens 1", (1e-6, 1.0)),
                    ("main 0.1, gens 1", (0.1, 1.0)), ("main 0.01, gens 1", (0.01, 1.0)), ("main 0.01, gens 0.01", (0.01, 0.01))):
    MODE["m"] = mode
    vals = []
    for seed in range(2):
        torch.manual_seed(seed)
        m = build_mixer("hope", D, H)
        x = torch.randn(1, T, D, requires_grad=True)
        y, _ = m(x)
        g, = torch.autograd.grad(y[0, -1].norm(), x)
        n = g[0].norm(dim=-1)
        vals.append((float(n[0]), float(n[128]), float(n[254])))
    print(f"{label:28s} " + " ".join(f"{sum(v[i] for v in vals)/len(vals):9.2e}" for i in range(3)), flush=True)
