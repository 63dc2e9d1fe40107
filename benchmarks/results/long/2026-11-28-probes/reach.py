"""Issue 45 probe (benchmarks/nested-learning.md, "Hope's backward at initialisation"): how much the layer's output at the last token depends on earlier inputs, at initialisation: ||d y_T / d x_s||."""
import torch, json, sys
torch.set_num_threads(1)
from regmem.layers import build_mixer
T, D, H = 256, 64, 4
cases = {
    "gated_deltanet": ("gated_deltanet", {}),
    "ttt_mlp": ("ttt_mlp", {}),
    "titans_mlp": ("titans_mlp", {}),
    "titans_mlp decay spread": ("titans_mlp", {"decay_init": (1e-4, 1e-2)}),
    "titans_mlp w/o decay": ("titans_mlp", {"weight_decay": False}),
    "self_modifying_titans": ("self_modifying_titans", {}),
    "smt w/o decay": ("self_modifying_titans", {"weight_decay": False}),
    "smt w/o decay, w/o self values": ("self_modifying_titans", {"weight_decay": False, "self_values": False}),
    "smt w/o decay, w/o DGD": ("self_modifying_titans", {"weight_decay": False, "dgd": False}),
    "hope": ("hope", {}),
    "hope w/o decay": ("hope", {"weight_decay": False}),
    "hope w/o DGD": ("hope", {"dgd": False}),
    "hope w/o decay, w/o DGD": ("hope", {"weight_decay": False, "dgd": False}),
    "hope w/o DGD, w/o self values": ("hope", {"dgd": False, "self_values": False}),
    "hope_standin": ("hope_standin", {}),
}
sources = [0, 32, 128, 224, 254]
for label, (name, opts) in cases.items():
    rows = []
    for seed in range(2):
        torch.manual_seed(seed)
        m = build_mixer(name, D, H, **opts)
        x = torch.randn(1, T, D, requires_grad=True)
        y, _ = m(x)
        g, = torch.autograd.grad(y[0, -1].square().sum() ** 0.5, x)  # grad of ||y_T|| (a scalar) w.r.t. every x_s
        n = g[0].norm(dim=-1)
        rows.append([float(n[s]) for s in sources])
    mean = [sum(r[i] for r in rows) / len(rows) for i in range(len(sources))]
    print(f"{label:34s} " + " ".join(f"{v:9.2e}" for v in mean), flush=True)
