import torch, sys
torch.set_num_threads(1)
from regmem.layers import build_mixer
T, D, H = 256, 64, 4
cases = {
    "hope": ("hope", {}),
    "hope target_stop_grad": ("hope", {"target_stop_grad": True}),
    "smt target_stop_grad": ("self_modifying_titans", {"target_stop_grad": True}),
    "smt static all, tsg": ("self_modifying_titans", {"target_stop_grad": True, "static": ("k", "v", "q", "eta", "alpha")}),
    "hope tsg mb1 main": ("hope", {"target_stop_grad": True, "mini_batch_memory": 1}),
}
for label, (name, opts) in cases.items():
    vals = []
    for seed in range(2):
        torch.manual_seed(seed)
        m = build_mixer(name, D, H, **opts)
        x = torch.randn(1, T, D, requires_grad=True)
        y, _ = m(x)
        g, = torch.autograd.grad(y[0, -1].norm(), x)
        n = g[0].norm(dim=-1)
        vals.append((float(n[0]), float(n[128]), float(n[254])))
    print(f"{label:34s} " + " ".join(f"{sum(v[i] for v in vals)/len(vals):9.2e}" for i in range(3)), flush=True)
