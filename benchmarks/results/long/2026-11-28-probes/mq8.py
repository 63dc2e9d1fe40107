import sys, dataclasses
from regmem.lab.experiments import presets
p = presets.PRESETS["long"]
presets.PRESETS["long8"] = dataclasses.replace(p, task={**p.task, "num_kv_pairs": int(sys.argv[1])})
sys.argv = ["x", "long8"] + sys.argv[2:]
exec(open(__file__.replace("mq8.py", "long_run.py")).read())
