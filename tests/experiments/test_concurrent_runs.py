"""Two commands on one run directory (lab/experiments/protocol.py): each run is trained once, by whichever process
claims its lock first, and both commands end with every result; saves of one run by two processes never collide
(each writes a temporary file of its own name, then renames it into place)."""

import json
import os
import subprocess
import sys
from pathlib import Path

HELPER = Path(__file__).with_name("concurrent_runs.py")


def start(*args: str, log: Path | None = None) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(HELPER.parent), *sys.path])}
    if log is not None:
        env["REGMEM_TEST_LOG"] = str(log)
    return subprocess.Popen([sys.executable, str(HELPER), *args], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def finish(process: subprocess.Popen) -> str:
    out, err = process.communicate(timeout=300)
    assert process.returncode == 0, err
    return out


def test_two_processes_on_one_run_directory_train_each_run_once_and_both_see_every_result(tmp_path):
    log = tmp_path / "trained.log"
    first = start("sweep", str(tmp_path / "sweep"), "1", log=log)
    second = start("sweep", str(tmp_path / "sweep"), "2", log=log)  # a pool of two workers
    seen = [json.loads(finish(first)), json.loads(finish(second))]
    trained = [line.split() for line in log.read_text().splitlines()]
    assert sorted(int(seed) for _, seed in trained) == list(range(6)), trained  # each run once
    assert seen == [list(range(6)), list(range(6))]
    assert not list((tmp_path / "sweep" / "runs").glob("*.lock"))  # finished runs leave no lock
    assert not list((tmp_path / "sweep" / "runs").glob(".*.tmp"))


def test_two_processes_saving_one_run_never_collide(tmp_path):
    processes = [start("save_many", str(tmp_path), "1500") for _ in range(2)]
    for process in processes:
        finish(process)
    (stored,) = (tmp_path / "runs").glob("*.json")
    assert json.loads(stored.read_text())["result"]["score"] == 1499
    assert not list((tmp_path / "runs").glob(".*.tmp"))
