import torch, sys
torch.set_num_threads(1)
from regmem.layers import build_mixer
T, D, H = 256, 64, 4
ALL = ("k", "v", "q", "eta", "alpha")
cases = {
    "smt": ("self_modifying_titans", {}),
    "smt static all": ("self_modifying_titans", {"static": ALL}),
    "smt static all, self_values F": ("self_modifying_titans", {"static": ALL, "self_values": False}),
    "smt static all, dgd F": ("self_modifying_titans", {"static": ALL, "dgd": False}),
    "smt static all, wd F": ("self_modifying_titans", {"static": ALL, "weight_decay": False}),
    "smt static all, mom F": ("self_modifying_titans", {"static": ALL, "momentum": False}),
    "smt static all, ln F": ("self_modifying_titans", {"static": ALL, "layer_norm": False}),
    "smt static all, mb1": ("self_modifying_titans", {"static": ALL, "mini_batch": 1}),
}
for label, (name, opts) in cases.items():
    vals = []
    for seed in range(2):
        torch.manual_seed(seed)
        try:
            m = build_mixer(name, D, H, **opts)
        except Exception as e:
            print(label, "ERR", e); break
        x = torch.randn(1, T, D, requires_grad=True)
        y, _ = m(x)
        g, = torch.autograd.grad(y[0, -1].norm(), x)
        n = g[0].norm(dim=-1)
        vals.append((float(n[0]), float(n[128]), float(n[254])))
    if vals:
        print(f"{label:34s} " + " ".join(f"{sum(v[i] for v in vals)/len(vals):9.2e}" for i in range(3)), flush=True)
