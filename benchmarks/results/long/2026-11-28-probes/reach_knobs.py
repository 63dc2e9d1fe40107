"""Issue 45 probe (benchmarks/nested-learning.md, "Hope's backward at initialisation"): Hope's knobs against the
sensitivity of the last output to input tokens 0, 128 and 254 at T 256 (as reach.py; mean over two inits)."""
import torch
torch.set_num_threads(1)
from regmem.layers import build_mixer
T, D, H = 256, 64, 4
cases = {
    "hope": {},
    "eta_max 0.3": {"eta_max": 0.3},
    "eta_max 0.1": {"eta_max": 0.1},
    "eta_max 0.03": {"eta_max": 0.03},
    "eta_max 0.1, no decay": {"eta_max": 0.1, "weight_decay": False},
    "step_rule explicit": {"step_rule": "explicit"},
    "static k,v,q": {"static": ("k", "v", "q")},
    "adaptive_q False": {"adaptive_q": False},
    "read anchor": {"read": "anchor"},
    "mini_batch 32": {"mini_batch": 32},
    "mini_batch 64": {"mini_batch": 64},
    "mini_batch 32, main 16": {"mini_batch": 32, "mini_batch_memory": 16},
    "mini_batch 16, main 64": {"mini_batch_memory": 64},
    "cms False": {"cms": False},
    "decay spread": {"decay_init": (1e-4, 1e-2)},
    "momentum False": {"momentum": False},
    "self_values False": {"self_values": False},
}
for label, opts in cases.items():
    vals = []
    for seed in range(2):
        torch.manual_seed(seed)
        try:
            m = build_mixer("hope", D, H, **opts)
        except Exception as e:
            print(label, "ERR", e); break
        x = torch.randn(1, T, D, requires_grad=True)
        y, _ = m(x)
        g, = torch.autograd.grad(y[0, -1].norm(), x)
        n = g[0].norm(dim=-1)
        vals.append((float(n[0]), float(n[128]), float(n[254])))
    if vals:
        print(f"{label:22s} " + " ".join(f"{sum(v[i] for v in vals)/len(vals):9.2e}" for i in range(3)), flush=True)
