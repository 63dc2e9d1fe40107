"""Data-parallel plumbing, so that the Trainer runs unchanged under `torchrun --nproc_per_node N`.

torchrun starts one process per rank and sets RANK, LOCAL_RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT
(https://pytorch.org/docs/stable/elastic/run.html). With WORLD_SIZE > 1, `setup` joins the process group from
those variables: gloo for a model on the CPU, nccl for one on CUDA (one GPU per local rank). Without them every
helper answers as a single process (rank 0 of 1) and no collective is issued.
"""

from __future__ import annotations

import atexit
import datetime
import os
from typing import Any

import torch
import torch.distributed as dist


def _initialized() -> bool:
    return dist.is_available() and dist.is_initialized()


def rank() -> int:
    """Global rank of this process: the process group's, else $RANK, else 0."""
    return dist.get_rank() if _initialized() else int(os.environ.get("RANK", "0"))


def world_size() -> int:
    """Number of processes: the process group's, else $WORLD_SIZE, else 1."""
    return dist.get_world_size() if _initialized() else int(os.environ.get("WORLD_SIZE", "1"))


def local_rank() -> int:
    """Rank within this machine ($LOCAL_RANK), which picks the GPU."""
    return int(os.environ.get("LOCAL_RANK", "0"))


def is_main() -> bool:
    """True on the one process that logs and writes checkpoints."""
    return rank() == 0


def setup(device: torch.device) -> torch.device:
    """Joins the process group when WORLD_SIZE > 1 and none exists yet; returns the device this rank trains on.

    `device` is where the model lives. A CUDA model trains on cuda:LOCAL_RANK under DDP; anything else stays put.
    A group created here is destroyed at interpreter exit; one the caller created stays the caller's.
    """
    if world_size() > 1 and device.type == "cuda":
        torch.cuda.set_device(local_rank())
        device = torch.device("cuda", local_rank())
    if world_size() > 1 and not _initialized():
        dist.init_process_group(backend="nccl" if device.type == "cuda" else "gloo")
        atexit.register(cleanup)
    return device


def cleanup() -> None:
    """Destroys the process group if one exists; with gloo, after a barrier bounded to 60 s. Without it, a rank that
    tore its gloo group down while another was still busy (rank 0 saving the final weights) aborted at exit now and
    then ("terminate called without an active exception": 2 runs in 35 on a loaded 2-core CPU,
    tests/train/test_ddp.py; none in 60 with the barrier)."""
    if _initialized():
        if dist.get_backend() == "gloo":
            try:  # bounded: a rank that failed and never arrives must not hang the others at exit
                dist.monitored_barrier(timeout=datetime.timedelta(seconds=60))
            except RuntimeError:
                pass
        dist.destroy_process_group()


def all_reduce_sum(tensor: torch.Tensor) -> torch.Tensor:
    """Sums `tensor` over ranks in place (a no-op in a single process) and returns it."""
    if _initialized() and world_size() > 1:
        dist.all_reduce(tensor, op=dist.ReduceOp.SUM)
    return tensor


def gather_objects(obj: Any) -> list[Any]:
    """[obj of rank 0, obj of rank 1, ...] on every rank; [obj] in a single process."""
    if not (_initialized() and world_size() > 1):
        return [obj]
    gathered: list[Any] = [None] * world_size()
    dist.all_gather_object(gathered, obj)
    return gathered
