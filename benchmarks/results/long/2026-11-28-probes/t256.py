import sys
from regmem.lab.experiments import presets
presets.PRESETS["long256"] = presets.long_preset(seq_len=int(sys.argv[1]))
sys.argv = ["x", "long256"] + sys.argv[2:]
exec(open(__file__.replace("t256.py", "long_run.py")).read())
