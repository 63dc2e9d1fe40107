import sys, torch
torch.set_num_threads(1)
from regmem.layers import build_mixer
T, D, H = 256, 64, 4
for c in (1.0, 2.0, 4.0, 8.0):
  for eps in (1e-6, 0.1):
    vals = []
    for seed in range(2):
        torch.manual_seed(seed)
        m = build_mixer("hope", D, H, ln_eps=eps)
        with torch.no_grad():
            for n, p in m.named_parameters():
                if "memory_init" in n: p.mul_(c)
        x = torch.randn(1, T, D, requires_grad=True)
        y, _ = m(x)
        g, = torch.autograd.grad(y[0, -1].norm(), x)
        nn_ = g[0].norm(dim=-1)
        vals.append((float(nn_[0]), float(nn_[128]), float(nn_[254])))
    print(f"init x{c} eps {eps}: " + " ".join(f"{sum(v[i] for v in vals)/len(vals):9.2e}" for i in range(3)), flush=True)
