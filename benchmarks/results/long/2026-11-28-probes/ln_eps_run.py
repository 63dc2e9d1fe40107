"""Issue 45 probe: diag.py with the deep memories' layer-norm epsilon set first (argv[1]), the rest diag.py's
arguments. Usage: ln_eps_run.py EPS SEQ_LEN MIXER LR SEED OPTIONS_JSON OUT_DIR STEPS."""
import importlib
import sys

importlib.import_module("regmem.ops.ttt.model").LN_EPS = float(sys.argv[1])
del sys.argv[1]
__file__ = __file__.replace("ln_eps_run.py", "diag.py")
exec(open(__file__).read())
