import torch
torch.set_num_threads(1)
from regmem.layers import build_mixer
T, D, H = 256, 64, 4
for label, opts in (("hope", {}), ("hope ln_eps 1", {"ln_eps": 1.0}), ("hope ln_eps 0.1", {"ln_eps": 0.1}),
                    ("hope ln_eps 1, eta_max 0.1", {"ln_eps": 1.0, "eta_max": 0.1}), ("smt ln_eps 1", {"ln_eps": 1.0})):
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
    print(f"{label:28s} " + " ".join(f"{sum(v[i] for v in vals)/len(vals):9.2e}" for i in range(3)), flush=True)
