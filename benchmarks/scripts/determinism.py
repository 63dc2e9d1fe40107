"""How deterministic is one training run on this CPU? Trains the same (task, mixer, preset, seed, lr) run in
fresh processes and prints its accuracy, final loss and a hash of the trained weights.

    python benchmarks/scripts/determinism.py --mixer gated_deltanet --repeats 2 --threads 2,1

Each run is a separate `python -c` process, so nothing is shared between runs but the machine.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys

CHILD = r"""
import hashlib, json, sys, torch
from regmem.lab.experiments.presets import PRESETS
from regmem.lab.experiments.runs import Run, train_and_evaluate
args = json.loads(sys.argv[1])
torch.set_num_threads(args["threads"])
run = Run(args["task"], args["mixer"], lr=args["lr"], seed=args["seed"], setting=args["overrides"])
result = train_and_evaluate(run, PRESETS[args["preset"]], progress=False)
digest = hashlib.sha256()
for tensor in result.model.state_dict().values():
    digest.update(tensor.detach().contiguous().numpy().tobytes())
print(json.dumps({"accuracy": result.accuracy, "loss": result.metrics["loss"], "steps": result.steps,
                  "weights_sha256": digest.hexdigest()[:16]}))
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--task", default="mqar")
    parser.add_argument("--mixer", default="gated_deltanet")
    parser.add_argument("--preset", default="quick")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--lr", type=float, default=None)
    parser.add_argument("--set", dest="overrides", action="append", default=[], help="task field, e.g. num_kv_pairs=16")
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--threads", default="2", help="comma-separated torch thread counts to try")
    args = parser.parse_args()
    overrides = {k: int(v) for k, v in (s.split("=") for s in args.overrides)}
    for threads in [int(t) for t in args.threads.split(",")]:
        for repeat in range(args.repeats):
            spec = {"task": args.task, "mixer": args.mixer, "preset": args.preset, "seed": args.seed, "lr": args.lr,
                    "overrides": overrides, "threads": threads}
            out = subprocess.run([sys.executable, "-c", CHILD, json.dumps(spec)], capture_output=True, text=True,
                                 check=True)
            print(json.dumps({"threads": threads, "repeat": repeat, **json.loads(out.stdout.strip().splitlines()[-1])}),
                  flush=True)


if __name__ == "__main__":
    main()
