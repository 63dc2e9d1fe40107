"""Files that never lose work or lie: atomic writes, checksum manifests, verified loads, per-run locks.

- `write_atomic(path, data)` writes a temporary file of a unique name (process id + random) beside `path`, flushes
  it to disk and renames it over `path` (rename(2) is atomic): a reader sees the old file or the new one, never half
  of one, and two processes writing the same path never share a temporary file.
- A directory of saved tensors (a model, a checkpoint) carries `manifest.json`: the sha256 and the byte count of
  every file in it, written after the files are complete. `verify_manifest` recomputes them; a flipped byte, a
  truncated or missing file is a `CorruptFileError` naming the file, before anything is loaded from it.
- `read_json` and `load_safetensors` / `load_safetensors_into` turn a file that is not what it should be (not
  UTF-8, not JSON, not safetensors, truncated) into the same `CorruptFileError` instead of a decoder's traceback.
- `RunLock` is an exclusive advisory lock on a file (fcntl.flock): the operating system releases it when its
  process ends, killed or not, so a crashed run never leaves a run locked.

`CorruptFileError` is a `ValueError`, so the command line reports it as one `regmem: error:` line.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import secrets
import warnings
from collections.abc import Iterable
from pathlib import Path
from typing import Any

MANIFEST_FILE = "manifest.json"
MANIFEST_FORMAT = 1  # version of manifest.json's layout


class CorruptFileError(ValueError):
    """A file that is missing, truncated, altered or of the wrong kind; the message starts with its path."""


class UnverifiedWarning(UserWarning):
    """A directory of saved tensors without manifest.json (written before regmem wrote checksums) was loaded."""


def temporary_path(path: str | os.PathLike) -> Path:
    """A name beside `path` that no other process or call picks: `.<name>.<pid>.<random>.tmp`."""
    path = Path(path)
    return path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(6)}.tmp")


def fsync_path(path: str | os.PathLike) -> None:
    """Flushes a file's (or a directory's entries') data to disk."""
    descriptor = os.open(path, os.O_RDONLY)
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)


def write_atomic(path: str | os.PathLike, data: str | bytes) -> None:
    """Writes `data` (text as UTF-8) to `path` whole or not at all: a unique temporary file, fsynced, renamed over."""
    path = Path(path)
    temporary = temporary_path(path)
    try:
        with open(temporary, "wb") as file:
            file.write(data.encode() if isinstance(data, str) else data)
            file.flush()
            os.fsync(file.fileno())
        os.replace(temporary, path)
    finally:
        temporary.unlink(missing_ok=True)


def sha256_of(path: str | os.PathLike) -> str:
    with open(path, "rb") as file:
        return hashlib.file_digest(file, "sha256").hexdigest()


def write_manifest(directory: str | os.PathLike, names: Iterable[str]) -> None:
    """Writes `directory/manifest.json` with the sha256 and size of each named file (call it once they are
    complete)."""
    directory = Path(directory)
    files = {name: {"sha256": sha256_of(directory / name), "bytes": (directory / name).stat().st_size}
             for name in sorted(names)}
    write_atomic(directory / MANIFEST_FILE, json.dumps({"format": MANIFEST_FORMAT, "files": files}, indent=1))


def verify_manifest(directory: str | os.PathLike, required: Iterable[str] = ()) -> bool:
    """Checks every file `directory/manifest.json` lists against its size and sha256, and that the `required` names
    are listed. Returns False, with an `UnverifiedWarning`, for a directory without a manifest (saved before regmem
    wrote them); raises `CorruptFileError` naming the file on any mismatch."""
    directory = Path(directory)
    if not (directory / MANIFEST_FILE).exists():
        warnings.warn(f"{directory} has no {MANIFEST_FILE} (saved before regmem wrote checksums): its files are read "
                      "unverified", UnverifiedWarning, stacklevel=3)
        return False
    manifest = read_json(directory / MANIFEST_FILE)
    files = manifest.get("files") if isinstance(manifest, dict) else None
    if not isinstance(files, dict):
        raise CorruptFileError(f"{directory / MANIFEST_FILE}: not a regmem manifest (no 'files' table)")
    for name in required:
        if name not in files:
            raise CorruptFileError(f"{directory / MANIFEST_FILE}: does not list {name}")
    for name, entry in files.items():
        path = directory / name
        well_formed = isinstance(entry, dict) and isinstance(entry.get("bytes"), int) and "sha256" in entry
        if not well_formed:
            raise CorruptFileError(f"{directory / MANIFEST_FILE}: a malformed entry for {name}")
        if not path.is_file():
            raise CorruptFileError(f"{path}: missing (listed in {MANIFEST_FILE})")
        size = path.stat().st_size
        if size != entry["bytes"]:
            raise CorruptFileError(f"{path}: {size} bytes, the manifest says {entry['bytes']} (truncated or replaced)")
        if sha256_of(path) != entry["sha256"]:
            raise CorruptFileError(f"{path}: checksum mismatch (sha256 differs from {MANIFEST_FILE}): the file was "
                                   "altered after it was saved")
    return True


def read_json(path: str | os.PathLike) -> Any:
    """The JSON value in `path`; `CorruptFileError` naming it when it is missing, not UTF-8 or not JSON."""
    try:
        return json.loads(Path(path).read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise CorruptFileError(f"{path}: missing") from None
    except (UnicodeDecodeError, json.JSONDecodeError) as err:
        raise CorruptFileError(f"{path}: not a JSON file ({err})") from None


def load_safetensors(path: str | os.PathLike, device: str = "cpu") -> dict:
    """safetensors.torch.load_file, with a file that is not one (truncated, a pickle, a bad header) as a
    `CorruptFileError` naming it."""
    from safetensors import SafetensorError
    from safetensors.torch import load_file

    try:
        return load_file(str(path), device=device)
    except (SafetensorError, FileNotFoundError) as err:
        raise CorruptFileError(f"{path}: not a readable safetensors file ({err})") from None


def load_safetensors_into(model, path: str | os.PathLike, device: str = "cpu") -> None:
    """safetensors.torch.load_model(model, path, strict=True), with an unreadable file as `CorruptFileError`; a file
    that reads but does not fit the model (other names or shapes) stays the RuntimeError torch gives."""
    from safetensors import SafetensorError
    from safetensors.torch import load_model

    try:
        load_model(model, str(path), strict=True, device=device)
    except (SafetensorError, FileNotFoundError) as err:
        raise CorruptFileError(f"{path}: not a readable safetensors file ({err})") from None


class RunLock:
    """An exclusive lock on `path` (created if missing) for one process at a time: `acquire(block=False)` returns
    whether it got it. The lock goes with the process: closing, exiting or being killed releases it."""

    def __init__(self, path: str | os.PathLike):
        self.path = Path(path)
        self._file = None

    def acquire(self, block: bool = True) -> bool:
        file = open(self.path, "a+")  # held open for as long as the lock is
        try:
            fcntl.flock(file.fileno(), fcntl.LOCK_EX | (0 if block else fcntl.LOCK_NB))
        except BlockingIOError:
            file.close()
            return False
        self._file = file
        return True

    def release(self, remove: bool = False) -> None:
        """Gives the lock up; `remove` deletes the lock file first. That is safe for a caller whose claimers check,
        once they hold the lock, whether the work is still to do: one that opened the old file and one that makes a
        new one then both find it done."""
        if remove:
            self.path.unlink(missing_ok=True)
        if self._file is not None:
            fcntl.flock(self._file.fileno(), fcntl.LOCK_UN)
            self._file.close()
            self._file = None
