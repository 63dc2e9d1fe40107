"""Input validation shared by every op: fail fast with a ValueError that names the argument, its shape and
what was expected (the op contract, `regmem/ops/__init__.py`).

Shape, dtype and device checks always run: they read only metadata. Checks that read tensor *values* (a gate
<= 0, a step size >= 0, a ridge > 0, integer offsets; a NaN fails every one of them) copy from the device to the
host, which on a GPU stalls the training step and under `torch.compile` breaks the graph. They run only where that
is free:
  - by default on CPU tensors only (nothing to copy);
  - never while `torch.compile` traces (the branch is not part of the graph) or a CUDA graph is captured;
  - `set_value_checks(True)` runs them on every device (a debugging switch), `set_value_checks(False)` nowhere;
    `value_checks(...)` does the same for a `with` block, and the environment variable
    `REGMEM_VALUE_CHECKS` = `1` | `0` | `cpu` sets the default at import.
"""

from __future__ import annotations

import contextlib
import math
import os
import warnings
from collections.abc import Iterator, Sequence
from typing import Literal, get_args

import torch

Mode = Literal["reference", "recurrent", "chunk"]  # the forms of every op
MODES = get_args(Mode)
_SETTINGS = {"1": True, "0": False, "cpu": None}
_env = os.environ.get("REGMEM_VALUE_CHECKS", "cpu").lower()
if _env not in _SETTINGS:
    raise ValueError(f"REGMEM_VALUE_CHECKS must be one of {sorted(_SETTINGS)}, got {_env!r}")
_value_checks: bool | None = _SETTINGS[_env]  # None: CPU tensors only


def set_value_checks(enabled: bool | None) -> None:
    """True: value checks on every device (syncs a GPU); False: none; None: on CPU tensors only (the default)."""
    global _value_checks
    if enabled not in (True, False, None):
        raise ValueError(f"enabled must be True, False or None, got {enabled!r}")
    _value_checks = enabled


@contextlib.contextmanager
def value_checks(enabled: bool | None) -> Iterator[None]:
    """`set_value_checks(enabled)` for the duration of a `with` block."""
    previous = _value_checks
    set_value_checks(enabled)
    try:
        yield
    finally:
        set_value_checks(previous)


def checks_values(x: torch.Tensor) -> bool:
    """Whether a check may read the values of x on the host now (module docstring)."""
    if torch.compiler.is_compiling() or (x.is_cuda and torch.cuda.is_current_stream_capturing()):
        return False  # a traced graph or a CUDA graph being captured: no host read can happen now
    return x.device.type == "cpu" if _value_checks is None else _value_checks


def _shape(x: torch.Tensor) -> str:
    return str(list(x.shape))


def check_tensor(name: str, x, ndim: int, doc: str) -> None:
    """`x` must be a floating-point tensor of rank `ndim`; `doc` is the documented shape, e.g. "[B, T, H, K]"."""
    if not isinstance(x, torch.Tensor):
        raise ValueError(f"{name} must be a torch.Tensor of shape {doc}, got {type(x).__name__}")
    if not x.is_floating_point():
        raise ValueError(f"{name} must be a floating-point tensor of shape {doc}, got dtype {x.dtype}")
    if x.ndim != ndim:
        raise ValueError(f"{name} must have shape {doc} (rank {ndim}), got shape {_shape(x)}")


def check_shape(name: str, x: torch.Tensor, expected: Sequence[int], doc: str) -> None:
    if tuple(x.shape) != tuple(expected):
        raise ValueError(f"{name} must have shape {doc} = {list(expected)}, got shape {_shape(x)}")


def check_qkv(q, k, v) -> tuple[int, int, int, int, int]:
    """Checks q, k: [B, T, H, K] and v: [B, T, H, V] on one device; returns (B, T, H, K, V)."""
    tensor = torch.Tensor
    if not (isinstance(q, tensor) and isinstance(k, tensor) and isinstance(v, tensor) and q.is_floating_point()
            and q.ndim == 4 and v.ndim == 4 and q.shape == k.shape and q.shape[:3] == v.shape[:3]
            and q.dtype == k.dtype == v.dtype and q.device == k.device == v.device):
        _explain_qkv(q, k, v)  # the one-pass test above failed: name the argument
    B, T, H, K = q.shape
    return B, T, H, K, v.shape[-1]


def _explain_qkv(q, k, v) -> None:
    """Raises the ValueError that names what check_qkv's one-pass test found wrong."""
    check_tensor("q", q, 4, "[B, T, H, K]")
    check_tensor("k", k, 4, "[B, T, H, K]")
    check_tensor("v", v, 4, "[B, T, H, V]")
    B, T, H, K = q.shape
    check_shape("k", k, (B, T, H, K), "[B, T, H, K]")
    if tuple(v.shape[:3]) != (B, T, H):
        raise ValueError(f"v must have shape [B, T, H, V] with B, T, H = {[B, T, H]} (from q), got {_shape(v)}")
    for name, x in (("k", k), ("v", v)):
        if x.dtype != q.dtype:
            raise ValueError(f"{name} must have the dtype of q ({q.dtype}), got {x.dtype}")
    check_same_device(q=q, k=k, v=v)


def renamed_argument(op_name: str, new: str, new_value, old: str, old_value, *, stacklevel: int = 4):
    """The value of argument `new`, given under its old name `old` for one release: a DeprecationWarning pointing
    at the caller names both (stacklevel 4: the caller of an op, through `Op.__call__` and the op's prepare
    function); both given is a ValueError (CHANGELOG.md lists every renamed argument)."""
    if old_value is None:
        return new_value
    if new_value is not None:
        raise ValueError(f"{op_name}: {old} is the old name of {new}; give {new} only")
    warnings.warn(f"{op_name}: the argument {old}= is renamed {new}=; {old}= will be removed in the next release",
                  DeprecationWarning, stacklevel=stacklevel)
    return old_value


def check_same_device(**tensors: torch.Tensor | None) -> None:
    first_name = first = None
    for name, t in tensors.items():
        if t is None:
            continue
        if first is None:
            first_name, first = name, t
        elif t.device != first.device:
            raise ValueError(
                f"{name} is on {t.device} but {first_name} is on {first.device}; all inputs must share a device"
            )


def check_log_gate(name: str, g, B: int, T: int, H: int, K: int, kinds: Sequence[str]) -> str:
    """A log-space gate is scalar [B, T, H] or diagonal [B, T, H, K]; returns "scalar" or "diagonal".

    Gates are log retention (decay) factors, so every entry must be <= 0 (retention <= 1)."""
    kind = None
    if isinstance(g, torch.Tensor) and g.is_floating_point():
        if g.ndim == 3 and "scalar" in kinds and g.shape == (B, T, H):
            kind = "scalar"
        elif g.ndim == 4 and "diagonal" in kinds and g.shape == (B, T, H, K):
            kind = "diagonal"
    if kind is None:
        docs = {"scalar": "[B, T, H]", "diagonal": "[B, T, H, K]"}
        shapes = {"scalar": (B, T, H), "diagonal": (B, T, H, K)}
        allowed = " or ".join(f"{docs[k]} = {list(shapes[k])}" for k in kinds)
        if not isinstance(g, torch.Tensor) or not g.is_floating_point():
            got = f"dtype {g.dtype}" if isinstance(g, torch.Tensor) else type(g).__name__
            raise ValueError(f"{name} must be a floating-point tensor of shape {allowed}, got {got}")
        raise ValueError(f"{name} must have shape {allowed}, got shape {_shape(g)}")
    check_at_most(name, g, 0.0, "is a log retention factor and must be <= 0 everywhere")
    return kind


def check_token_scalar(name: str, x, B: int, T: int, H: int, *, extra: Sequence[int] = (), doc: str = "[B, T, H]",
                       low: float | None = None, high: float | None = None) -> None:
    """A per-token, per-head scalar such as a step size beta: [B, T, H] (+ `extra` trailing dims), optionally
    bounded to [low, high]."""
    if not (isinstance(x, torch.Tensor) and x.is_floating_point() and x.shape == (B, T, H, *extra)):
        check_tensor(name, x, 3 + len(extra), doc)  # the one-pass test failed: name what is wrong
        check_shape(name, x, (B, T, H, *extra), doc)
    if low is not None:
        check_at_least(name, x, low, f"must be >= {low} everywhere")
    if high is not None:
        check_at_most(name, x, high, f"must be <= {high} everywhere")


def check_at_most(name: str, x: torch.Tensor, high: float, message: str) -> None:
    """A value check (module docstring): every entry of x must be <= high, so a NaN fails it too."""
    if checks_values(x) and x.numel() and not bool((x <= high).all()):  # a comparison records no graph
        raise ValueError(f"{name} {message}, got {_extreme(x, 'max')}")  # `<=`, not `>`: NaN fails it too


def check_at_least(name: str, x: torch.Tensor, low: float, message: str) -> None:
    """A value check (module docstring): every entry of x must be >= low, so a NaN fails it too."""
    if checks_values(x) and x.numel() and not bool((x >= low).all()):  # a comparison records no graph
        raise ValueError(f"{name} {message}, got {_extreme(x, 'min')}")  # `>=`, not `<`: NaN fails it too


def _extreme(x: torch.Tensor, which: str) -> str:
    """What a failed value check reports: NaN if x has one, else its max or min."""
    if bool(x.isnan().any()):
        return "NaN"
    return f"{which} {getattr(x, which)().item():.3g}"


def check_state(name: str, state, expected: Sequence[int], doc: str) -> None:
    if not (isinstance(state, torch.Tensor) and state.is_floating_point() and state.shape == tuple(expected)):
        check_tensor(name, state, len(expected), doc)  # the one-pass test failed: name what is wrong
        check_shape(name, state, expected, doc)


def check_state_tuple(initial_state, cls, shapes, q: torch.Tensor, *, context: str = "") -> None:
    """An optional NamedTuple state of type `cls` on the device of q; `shapes` maps each field name to its
    (expected shape, documented shape), e.g. {"R": ((N, H, K, K), "[N, H, K, K]"), ...}."""
    if initial_state is None:
        return
    if not isinstance(initial_state, cls):
        fields = ", ".join(f"{name} {doc}" for name, (_, doc) in shapes.items())
        raise ValueError(f"initial_state must be a {cls.__name__}({fields}){context}, "
                         f"got {type(initial_state).__name__}")
    for name, field in zip(cls._fields, initial_state, strict=True):
        shape, doc = shapes[name]
        check_state(f"initial_state.{name}", field, shape, doc)
        if field.device != q.device:
            check_same_device(q=q, **{f"initial_state.{name}": field})


def check_cu_seqlens(cu_seqlens, B: int, T: int) -> int:
    """cu_seqlens: [N + 1] integer offsets into a packed batch (B = 1), from 0 to T; returns N."""
    if not isinstance(cu_seqlens, torch.Tensor) or cu_seqlens.is_floating_point() or cu_seqlens.ndim != 1:
        raise ValueError("cu_seqlens must be a 1-D integer tensor of shape [N + 1]")
    if B != 1:
        raise ValueError(f"cu_seqlens packs sequences into one row: q must have B = 1, got B = {B}")
    if len(cu_seqlens) < 2:
        raise ValueError(f"cu_seqlens must hold N + 1 >= 2 offsets, got {len(cu_seqlens)}")
    if checks_values(cu_seqlens):
        offsets = cu_seqlens.tolist()
        if offsets[0] != 0 or offsets[-1] != T:
            raise ValueError(f"cu_seqlens must start at 0 and end at T = {T}, got {offsets}")
        if any(b < a for a, b in zip(offsets, offsets[1:], strict=False)):
            raise ValueError(f"cu_seqlens must be non-decreasing, got {offsets}")
    return len(cu_seqlens) - 1


def num_states(B: int, T: int, cu_seqlens) -> int:
    """N, the number of sequences (and of states): B, or len(cu_seqlens) - 1 for a packed batch (validated)."""
    return check_cu_seqlens(cu_seqlens, B, T) if cu_seqlens is not None else B


def check_initial_state(initial_state, expected: Sequence[int], doc: str, q: torch.Tensor) -> None:
    """An optional state tensor of shape `expected` (documented as `doc`) on the device of q."""
    if initial_state is None:
        return
    if not (isinstance(initial_state, torch.Tensor) and initial_state.is_floating_point()
            and initial_state.shape == tuple(expected) and initial_state.device == q.device):
        check_state("initial_state", initial_state, expected, doc)  # the one-pass test failed: name what is wrong
        check_same_device(q=q, initial_state=initial_state)


def check_chunk_size(chunk_size, name: str = "chunk_size") -> None:
    if not isinstance(chunk_size, int) or chunk_size < 1 or chunk_size & (chunk_size - 1):
        raise ValueError(f"{name} must be a positive power of two, got {chunk_size!r}")


def check_scale(scale) -> None:
    """None or a finite float: a NaN or infinite scale makes every output NaN (a Python float: free to check)."""
    if scale is not None and not isinstance(scale, int | float):
        raise ValueError(f"scale must be a float or None, got {type(scale).__name__}")
    if scale is not None and not math.isfinite(scale):
        raise ValueError(f"scale must be finite, got {scale!r}")


def check_key_mask(key_mask, B: int, L: int) -> None:
    """key_mask: None or a bool tensor [B, S + T] (S cached pairs, T new tokens; True = the pair takes part)."""
    if key_mask is None:
        return
    doc = f"[B, S + T] = {[B, L]} (S cached pairs, T new tokens)"
    if not isinstance(key_mask, torch.Tensor) or key_mask.dtype != torch.bool:
        got = key_mask.dtype if isinstance(key_mask, torch.Tensor) else type(key_mask).__name__
        raise ValueError(f"key_mask must be a bool tensor of shape {doc}, got {got}")
    if tuple(key_mask.shape) != (B, L):
        raise ValueError(f"key_mask must have shape {doc}, got shape {list(key_mask.shape)}")
