import sys, json, time, dataclasses, torch
torch.set_num_threads(1)
from regmem.lab.experiments.presets import PRESETS
from regmem.lab.experiments.runs import Run, train_and_evaluate
preset_name, mixer, lr, seed, opts = sys.argv[1], sys.argv[2], float(sys.argv[3]), int(sys.argv[4]), json.loads(sys.argv[5])
task = sys.argv[6] if len(sys.argv) > 6 else "mqar"
steps = int(sys.argv[7]) if len(sys.argv) > 7 else None
preset = PRESETS[preset_name]
preset = dataclasses.replace(preset, mixer_kwargs={**preset.mixer_kwargs, mixer: {**preset.mixer_kwargs.get(mixer, {}), **opts}})
t = time.time()
r = train_and_evaluate(Run(task, mixer, lr=lr, seed=seed, steps=steps), preset, progress=False)
print(json.dumps({"mixer": mixer, "opts": opts, "lr": lr, "seed": seed, "acc": r.accuracy, "steps": r.steps, "div": r.diverged_at_step, "skip": None, "s": round(time.time()-t)}), flush=True)
