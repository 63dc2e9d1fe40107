import sys, json, time, dataclasses, torch
torch.set_num_threads(1)
from regmem.lab.experiments.presets import PRESETS
from regmem.lab.experiments.runs import Run, train_and_evaluate, build_task
from regmem.train.trainer import token_loss
preset_name, mixer, lr, seed, opts, task_name, out = sys.argv[1], sys.argv[2], float(sys.argv[3]), int(sys.argv[4]), json.loads(sys.argv[5]), sys.argv[6], sys.argv[7]
steps = int(sys.argv[8]) if len(sys.argv) > 8 else None
preset = PRESETS[preset_name]
preset = dataclasses.replace(preset, mixer_kwargs={**preset.mixer_kwargs, mixer: {**preset.mixer_kwargs.get(mixer, {}), **opts}})
t = time.time()
r = train_and_evaluate(Run(task_name, mixer, lr=lr, seed=seed, steps=steps), preset, progress=False, out_dir=out, overwrite=True)
res = {"mixer": mixer, "opts": opts, "lr": lr, "seed": seed, "acc": r.accuracy, "steps": r.steps, "div": r.diverged_at_step, "s": round(time.time()-t)}
task = build_task(task_name, preset, {})
m = r.model.eval()
def score(x, y):
    with torch.no_grad():
        logits = torch.cat([m(x[i:i+16]) for i in range(0, len(x), 16)])
    s, c = token_loss(logits, y)
    return {"loss": float(s) / int(c), **{k: float(v) for k, v in task.metric(logits, y).items()}}
x, y = task.generate(256, seed=seed + 1000)  # a test set no choice read
res["test"] = score(x, y)
hopes = [mod for mod in m.modules() if hasattr(mod, "cms") and mod.cms is not None]
if hopes:
    for mod in hopes:
        mod.cms.config = dataclasses.replace(mod.cms.config, lr=0.0)
    res["test_cms_frozen"] = score(x, y)
print(json.dumps(res), flush=True)
