# usage: diag.py SEQ_LEN MIXER LR SEED OPTIONS_JSON OUT_DIR STEPS
import sys, dataclasses
from regmem.lab.experiments import presets
seq, steps = int(sys.argv[1]), int(sys.argv[7])
p = presets.long_preset(seq_len=seq)
presets.PRESETS["diag"] = dataclasses.replace(p, num_train=steps * p.batch_size)
sys.argv = ["x", "diag", sys.argv[2], sys.argv[3], sys.argv[4], sys.argv[5], "niah_single", sys.argv[6], str(steps)]
exec(open(__file__.replace("diag.py", "long_run.py")).read())
