"""Kernels of other libraries behind an op's `backend=` argument, and how `backend="auto"` picks one.

A `Backend` names a library's cores by mode (each with the torch core's contract: same inputs, already validated,
scaled and in the compute dtype; same outputs) and a test of whether it can run a given call. `backend="auto"`,
every op's default, runs the first backend whose test passes and the torch form otherwise, so a CPU machine, a
float64 call or a machine without the library always gets the torch form, without importing the library.

Two kinds today, both Triton kernels for CUDA (`pip install 'regmem[cuda]'`): fla's (flash-linear-attention) for
the ops it has, and regmem's own (backend="triton") where fla has none. regmem's run on the CPU too under Triton's
interpreter (TRITON_INTERPRET=1, set before anything imports triton, which torch.compile does), which is how the tests
check them without a GPU.
"""

from __future__ import annotations

import functools
import importlib
import importlib.util
import os
import warnings
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import torch

Tokens = Mapping[str, torch.Tensor | None]


@dataclass(frozen=True)
class Backend:
    """forms: mode -> core; usable(tokens) -> (runs this call, a warning to give when it does not, or None);
    refuses(form options) -> why the backend cannot run a call with these options of the form, or None: "auto" then
    runs the torch form, a backend named explicitly raises ValueError with the reason (None: it takes every option)."""

    forms: Mapping[str, Callable]
    usable: Callable[[Tokens], tuple[bool, str | None]]
    refuses: Callable[[Mapping[str, Any]], str | None] | None = None

    def refusal(self, options: Mapping[str, Any]) -> str | None:
        return None if self.refuses is None else self.refuses(options)


_WARNED: set[str] = set()


def warn_once(message: str) -> None:
    """A RuntimeWarning the first time `message` comes up in this process (a training loop calls an op per step)."""
    if message not in _WARNED:
        _WARNED.add(message)
        warnings.warn(message, RuntimeWarning, stacklevel=4)


FLA_DTYPES = (torch.float32, torch.bfloat16, torch.float16)


def fla_usable(tokens: Tokens) -> tuple[bool, str | None]:
    """fla runs a call whose tensors are on CUDA in a dtype its kernels take, when it is installed, unless its own
    version checks refuse the call's backward (fla 0.6 refuses the gated kernels' backward on Hopper with Triton
    >= 3.4, < 3.7.1, which compute wrong gradients there): then the torch form runs, with one warning."""
    for first in tokens.values():  # the first tensor (a loop, not a call: this runs on every op call)
        if first is not None:
            break
    if not first.is_cuda or first.dtype not in FLA_DTYPES or not _installed("fla"):
        return False, None
    gated = tokens.get("g") is not None
    needs_grad = torch.is_grad_enabled() and any(t is not None and t.requires_grad for t in tokens.values())
    if gated and needs_grad and _fla_refuses_gated_backward():
        return False, ("fla refuses the backward of its gated kernels on this GPU with this Triton (Hopper needs "
                       "Triton >= 3.7.1); backend='auto' runs the torch form. Fix: pip install 'triton>=3.7.1'")
    return True, None


@functools.cache
def _installed(package: str) -> bool:
    return importlib.util.find_spec(package) is not None


@functools.cache
def _fla_refuses_gated_backward() -> bool:
    """fla's own flags (fla.utils), read rather than re-derived, so a newer fla that lifts the check is used."""
    env = importlib.import_module("fla.utils")
    hopper = getattr(env, "IS_NVIDIA_HOPPER", False)
    return bool(hopper and getattr(env, "TRITON_ABOVE_3_4_0", False) and not getattr(env, "TRITON_ABOVE_3_7_1", True))


def fla_kernel(module: str, name: str) -> Callable:
    """fla's `module.name`, or an ImportError that says how to install it."""
    try:
        return getattr(importlib.import_module(module), name)
    except ImportError as err:
        raise ImportError("backend='fla' needs flash-linear-attention and triton: pip install 'regmem[cuda]'") from err


def check_cuda(q: torch.Tensor) -> None:
    if not q.is_cuda:
        raise ValueError(f"backend='fla' needs CUDA tensors, got q on {q.device}")


def fla_backend(**forms: Callable) -> Backend:
    return Backend(forms, fla_usable)


TRITON_DTYPES = FLA_DTYPES  # the frame hands bf16 / fp16 calls to the cores in float32


def triton_interpreting() -> bool:
    """Whether Triton kernels run under its CPU interpreter (TRITON_INTERPRET=1)."""
    return os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")


def triton_usable(tokens: Tokens) -> tuple[bool, str | None]:
    """regmem's Triton kernels run a call whose tensors are on CUDA in a dtype they take, when triton is installed."""
    for first in tokens.values():
        if first is not None:
            break
    return first.is_cuda and first.dtype in TRITON_DTYPES and _installed("triton"), None


def triton_module(module: str):
    """regmem's module of Triton kernels `module`, or an ImportError that says how to install Triton."""
    if not _installed("triton"):
        raise ImportError("backend='triton' needs triton: pip install 'regmem[cuda]'")
    return importlib.import_module(module)


def check_triton_device(q: torch.Tensor) -> None:
    if not q.is_cuda and not triton_interpreting():
        raise ValueError(f"backend='triton' needs CUDA tensors (or TRITON_INTERPRET=1, Triton's CPU interpreter), "
                         f"got q on {q.device}")


def triton_backend(**forms: Callable) -> Backend:
    return Backend(forms, triton_usable)


def triton_key_mask(key_mask: torch.Tensor | None, like: torch.Tensor) -> torch.Tensor:
    """A key mask [B, L] as int32 for regmem's Triton kernels (with int8, Triton 3.7-3.8 fail to compile their float64
    variants: "fp64 don't support largeK MMA"); a one-element placeholder, never read, when there is none."""
    if key_mask is None:
        return torch.ones(1, dtype=torch.int32, device=like.device)
    return key_mask.to(torch.int32).contiguous()
