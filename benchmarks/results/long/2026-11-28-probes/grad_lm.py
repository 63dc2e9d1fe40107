import torch, dataclasses, json, sys
torch.set_num_threads(1)
from regmem.lab.experiments.presets import PRESETS
from regmem.lab.experiments.runs import build_task, build_model, training_data
from regmem.train.trainer import token_loss
p = PRESETS["long"]
mixer = sys.argv[1]; RNQ = len(sys.argv) > 3
for opts in json.loads(sys.argv[2]):
    out = []
    for T in (64, 256, 1024):
        task = build_task("mqar", p, {"seq_len": T, "num_kv_pairs": min(32, T // 4), "random_non_queries": RNQ})
        x, y = training_data(task, 4, seed=0)
        pp = dataclasses.replace(p, mixer_kwargs={mixer: opts})
        m = build_model(mixer, pp, task.vocab_size, seed=0)
        s, c = token_loss(m(x), y); (s / c).backward()
        out.append(f"{max(float(q.grad.abs().max()) for q in m.parameters() if q.grad is not None):.2g}")
    print(mixer, opts, out, flush=True)
