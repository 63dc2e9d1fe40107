"""Two gloo ranks under torchrun end with the parameters of one process trained on the same global batch.

The test launches this file with `python -m torch.distributed.run --nproc-per-node 2`; each rank runs `main`,
which is the single-process code unchanged: the Trainer reads WORLD_SIZE from the environment torchrun sets.
"""

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file
from test_trainer import EVAL, TRAIN, ToyLM, accuracy, config

from regmem.train import Trainer, distributed

FINAL_FILE = "final.safetensors"


def run_config(out_dir: Path):
    # No dropout: the ranks draw different masks than one process would, by design.
    return config(steps=6, checkpoint_every=3, out_dir=str(out_dir))


def main(out_dir: Path) -> None:
    """One rank of the DDP run (also what the single process runs, minus torchrun)."""
    torch.set_num_threads(1)
    # float64, so that the ranks' other summation order moves the result by ~1e-15 rather than float32 rounding,
    # which AdamW's g / sqrt(v) can amplify to the size of the tolerance.
    trainer = Trainer(ToyLM(dropout=0.0).double(), run_config(out_dir), TRAIN, EVAL, accuracy)
    trainer.fit()
    if distributed.is_main():
        save_file({name: t.contiguous() for name, t in trainer.module.state_dict().items()}, out_dir / FINAL_FILE)
    distributed.cleanup()


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def train_losses(out_dir: Path) -> list[float]:
    records = [json.loads(line) for line in (out_dir / "metrics.jsonl").read_text().splitlines()]
    return [r["loss"] for r in records if r["event"] == "train"]


def test_two_gloo_ranks_match_one_process(tmp_path):
    ddp_dir, single_dir = tmp_path / "ddp", tmp_path / "single"
    command = [sys.executable, "-m", "torch.distributed.run", "--nnodes", "1", "--nproc-per-node", "2"]
    command += ["--master-addr", "127.0.0.1", "--master-port", str(free_port()), __file__, str(ddp_dir)]
    env = os.environ | {"OMP_NUM_THREADS": "1"}
    launched = subprocess.run(command, env=env, capture_output=True, text=True, timeout=120)
    assert launched.returncode == 0, launched.stderr[-4000:]

    main(single_dir)
    ddp, single = load_file(ddp_dir / FINAL_FILE), load_file(single_dir / FINAL_FILE)
    assert ddp.keys() == single.keys()
    for name in single:
        # The all-reduce sums in another order than one process does: equal up to float64 rounding.
        torch.testing.assert_close(ddp[name], single[name], rtol=0, atol=1e-10, msg=lambda m, n=name: f"{n}: {m}")
    ddp_losses, single_losses = train_losses(ddp_dir), train_losses(single_dir)
    torch.testing.assert_close(torch.tensor(ddp_losses), torch.tensor(single_losses), rtol=1e-12, atol=0)
    meta = json.loads((ddp_dir / "checkpoint" / "trainer.json").read_text())
    assert meta["step"] == 6 and len(meta["rng"]) == 2  # one RNG state per rank


if __name__ == "__main__":
    main(Path(sys.argv[1]))
