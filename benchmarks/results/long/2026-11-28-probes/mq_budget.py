# usage: mq_budget.py MIXER LR SEED OPTIONS_JSON OUT_DIR STEPS [PAIRS]: the long preset's MQAR (T 1024, 32 pairs
# unless PAIRS) with num_train = STEPS x 8 fresh sequences (the suite's 500-step budget times STEPS/500), then
# long_run.py's test on 256 held-out sequences
import sys, dataclasses
from regmem.lab.experiments import presets
steps = int(sys.argv[6])
p = presets.PRESETS["long"]
task = {**p.task, "num_kv_pairs": int(sys.argv[7])} if len(sys.argv) > 7 else p.task
presets.PRESETS["mqbudget"] = dataclasses.replace(p, num_train=steps * p.batch_size, task=task)
sys.argv = ["x", "mqbudget", sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4], "mqar", sys.argv[5], str(steps)]
exec(open(__file__.replace("mq_budget.py", "long_run.py")).read())
