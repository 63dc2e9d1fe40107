"""Checkpoints without pickle: tensors in safetensors, everything else in JSON, written atomically.

A checkpoint is the directory `out_dir/checkpoint/`:
    model.safetensors      the model's state dict (safetensors.torch.save_model: tied weights stored once)
    optimizer.safetensors  every tensor of optimizer.state_dict()["state"], named "state.{param_index}.{key}"
    trainer.json           format, step, config, RNG states (one per rank), the optimizer's param_groups
                           and non-tensor state
    manifest.json          the sha256 and size of the three files above (regmem/storage.py), written last
The directory is written as `checkpoint.tmp/`, flushed to disk, then renamed over the old one (the old one is
moved to `checkpoint.old/` first, because rename(2) cannot replace a non-empty directory). A crash at any point
leaves a complete `checkpoint/` or a complete `checkpoint.old/`; `latest_checkpoint` finds it, and a stale
`checkpoint.tmp/` is never read. Loading checks the manifest first: a checkpoint whose bytes changed after it was
written (a flipped bit, a truncated or replaced file) is refused with a `CorruptFileError` naming the file.
"""

from __future__ import annotations

import json
import os
import random
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import torch
from safetensors.torch import save_file, save_model

from regmem.storage import (
    fsync_path,
    load_safetensors,
    load_safetensors_into,
    read_json,
    verify_manifest,
    write_manifest,
)

CHECKPOINT_DIR = "checkpoint"
TEMPORARY_DIR = "checkpoint.tmp"
PREVIOUS_DIR = "checkpoint.old"
MODEL_FILE = "model.safetensors"
OPTIMIZER_FILE = "optimizer.safetensors"
TRAINER_FILE = "trainer.json"


def rng_state() -> dict[str, Any]:
    """This process's torch (CPU and current CUDA device), numpy and Python RNG states as JSON-ready ints."""
    kind, keys, position, has_gauss, cached_gaussian = np.random.get_state()
    version, internal, gauss_next = random.getstate()
    state = {
        "torch": torch.get_rng_state().tolist(),
        "numpy": [kind, keys.tolist(), position, has_gauss, cached_gaussian],
        "python": [version, list(internal), gauss_next],
    }
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        state["cuda"] = torch.cuda.get_rng_state().tolist()
    return state


def set_rng_state(state: dict[str, Any]) -> None:
    """Inverse of `rng_state`."""
    torch.set_rng_state(torch.tensor(state["torch"], dtype=torch.uint8))
    kind, keys, position, has_gauss, cached_gaussian = state["numpy"]
    np.random.set_state((kind, np.array(keys, dtype=np.uint32), position, has_gauss, cached_gaussian))
    version, internal, gauss_next = state["python"]
    random.setstate((version, tuple(internal), gauss_next))
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state(torch.tensor(state["cuda"], dtype=torch.uint8))


def flatten_optimizer_state(state_dict: dict[str, Any]) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
    """Splits optimizer.state_dict() into tensors {"state.{param_index}.{key}": tensor} and a JSON-ready rest."""
    tensors: dict[str, torch.Tensor] = {}
    plain: dict[str, dict[str, Any]] = {}
    for index, entries in state_dict["state"].items():
        for key, value in entries.items():
            if isinstance(value, torch.Tensor):
                tensors[f"state.{index}.{key}"] = value.detach().cpu().contiguous()
            else:
                plain.setdefault(str(index), {})[key] = value
    return tensors, {"state": plain, "param_groups": state_dict["param_groups"]}


def unflatten_optimizer_state(tensors: dict[str, torch.Tensor], rest: dict[str, Any]) -> dict[str, Any]:
    """Inverse of `flatten_optimizer_state`: a state dict for optimizer.load_state_dict."""
    state: dict[int, dict[str, Any]] = {int(index): dict(entries) for index, entries in rest["state"].items()}
    for name, tensor in tensors.items():
        _, index, key = name.split(".", 2)
        state.setdefault(int(index), {})[key] = tensor
    return {"state": state, "param_groups": rest["param_groups"]}


def save_checkpoint(
    out_dir: str | os.PathLike, *, model: torch.nn.Module, optimizer: torch.optim.Optimizer, meta: dict[str, Any]
) -> Path:
    """Writes model, optimizer and `meta` (JSON-ready: step, config, rng, ...) to out_dir/checkpoint atomically."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    temporary, final, previous = out_dir / TEMPORARY_DIR, out_dir / CHECKPOINT_DIR, out_dir / PREVIOUS_DIR
    if temporary.exists():
        shutil.rmtree(temporary)  # left by an interrupted write
    temporary.mkdir()
    save_model(model, str(temporary / MODEL_FILE))
    tensors, optimizer_rest = flatten_optimizer_state(optimizer.state_dict())
    save_file(tensors, str(temporary / OPTIMIZER_FILE))
    (temporary / TRAINER_FILE).write_text(json.dumps({**meta, "optimizer": optimizer_rest}))
    for name in (MODEL_FILE, OPTIMIZER_FILE, TRAINER_FILE):
        fsync_path(temporary / name)
    write_manifest(temporary, (MODEL_FILE, OPTIMIZER_FILE, TRAINER_FILE))  # of the complete files; fsynced itself
    fsync_path(temporary)  # the directory entries listing them
    if final.exists():
        if previous.exists():
            shutil.rmtree(previous)
        os.replace(final, previous)
    os.replace(temporary, final)
    fsync_path(out_dir)
    shutil.rmtree(previous, ignore_errors=True)
    return final


def latest_checkpoint(out_dir: str | os.PathLike) -> Path | None:
    """The newest complete checkpoint directory in out_dir, or None."""
    for name in (CHECKPOINT_DIR, PREVIOUS_DIR):
        candidate = Path(out_dir) / name
        if (candidate / TRAINER_FILE).is_file():
            return candidate
    return None


def checkpoint_step(path: str | os.PathLike) -> int:
    """The step of checkpoint directory `path` (trainer.json's "step"), without loading its tensors."""
    return read_json(Path(path) / TRAINER_FILE)["step"]


def verify_checkpoint(path: str | os.PathLike) -> None:
    """Checks checkpoint directory `path` against its manifest (`CorruptFileError` naming the file that differs);
    a checkpoint written before regmem wrote manifests passes with an `UnverifiedWarning`."""
    verify_manifest(path, required=(MODEL_FILE, OPTIMIZER_FILE, TRAINER_FILE))


def load_checkpoint(
    path: str | os.PathLike, *, model: torch.nn.Module, optimizer: torch.optim.Optimizer
) -> dict[str, Any]:
    """Loads the model and optimizer in place from checkpoint directory `path`, verified first (`verify_checkpoint`);
    returns the rest of trainer.json."""
    path = Path(path)
    verify_checkpoint(path)
    load_safetensors_into(model, path / MODEL_FILE)
    meta = read_json(path / TRAINER_FILE)
    tensors = load_safetensors(path / OPTIMIZER_FILE)
    optimizer.load_state_dict(unflatten_optimizer_state(tensors, meta.pop("optimizer")))
    return meta
