"""Helpers of test_concurrent_runs.py that run in other processes (importable there: module level, picklable)."""

import json
import os
import sys
import time

from regmem.lab.experiments.presets import PRESETS
from regmem.lab.experiments.protocol import RunStore, execute
from regmem.lab.experiments.runs import Run

RUNS = [Run("mqar", "attn", 1e-2, seed) for seed in range(6)]


def fake_train(run: Run, preset) -> dict:
    """Notes which process trained the run (one line, appended) and returns a result of the stored shape."""
    with open(os.environ["REGMEM_TEST_LOG"], "a") as log:
        log.write(f"{os.getpid()} {run.seed}\n")
    time.sleep(0.3)
    return {"score": run.seed / 10, "test_score": run.seed / 10, "accuracy": run.seed / 10, "parameters": 1,
            "state_floats": 1, "train_seconds": 0.3, "tokens_per_second": 1.0, "steps": 1, "metrics": {},
            "stopped_early": False, "diverged_at_step": None}


def sweep(run_dir: str, workers: int) -> None:
    """One command's sweep over RUNS into run_dir; prints the seeds of the records it returns."""
    records = execute(RUNS, PRESETS["tiny"], RunStore(run_dir, PRESETS["tiny"]), progress=False,
                      log=lambda *_: None, train=fake_train, workers=workers)
    print(json.dumps([r["seed"] for r in records if r["score"] == r["seed"] / 10]))


def save_many(run_dir: str, times: int) -> None:
    store = RunStore(run_dir, PRESETS["tiny"])
    for i in range(times):
        store.save(RUNS[0], {"score": i, "test_score": i})


if __name__ == "__main__":
    {"sweep": sweep, "save_many": save_many}[sys.argv[1]](sys.argv[2], int(sys.argv[3]))
