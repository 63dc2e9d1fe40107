"""The one shape of every op in `regmem.ops`: a public signature, three forms, one frame.

An op is declared by its *prepare* function and one *core* per form:

    @op(reference=delta_reference_core, recurrent=delta_recurrent_core, chunk=delta_chunk_core)
    def delta_rule(q, k, v, beta, *, scale=None, initial_state=None, cu_seqlens=None) -> Call:
        '''The public docstring.'''
        ...validate the arguments, derive the core's inputs...
        return Call({"q": q_scaled, "k": k, "v": v, "g": None, "beta": beta}, q.dtype, initial_state,
                    cu_seqlens=cu_seqlens)

The decorator returns an `Op`. Calling it runs prepare, then the frame, then the core of the form named by
`mode`; `delta_rule.reference(...)`, `.recurrent(...)` and `.chunk(...)` run one form by name. From the public call
to the math there are two frames, `Op.__call__` and the core: prepare and the frame's helpers return before the
core starts.

The frame (the op contract of `regmem/ops/__init__.py`):
  - inputs in bf16/fp16/fp32 compute in float32, float64 stays float64; the state comes back in the compute
    dtype, the output in the input dtype;
  - with `cu_seqlens` the packed row [1, total, ...] becomes a padded batch [N, T_max, ...] of neutral tokens
    (varlen.py) and the output is packed back;
  - `Call.finish` post-processes (o, state) in the compute dtype (a normalised read-out, an interleaved sequence);
  - an empty batch or sequence (B = 0 or T = 0) runs the reference core whatever `mode` and `backend` say: with
    nothing to compute, every form's result is the same empty output [B, T, ...] and the state it started from
    (the op's initial state when none is given), and no form needs an edge case of its own;
  - the final state is dropped unless `output_final_state`;
  - `backend` picks whose kernel runs the form: "torch" (the cores above), a library's (backends.py: "fla" on
    CUDA), or "auto" (the default): the first library backend that can run this call, else torch.

A core is `core(**call.tokens, initial_state=S0, **call.options, **form_options) -> (o, S_T)` on a plain batch,
every per-token tensor [B, T, H, ...] in the compute dtype, the state always returned. Keyword-only parameters of
a core that have defaults are options of that form alone (`chunk_size` of every chunk form, `solver` of the least
squares chunk form): the op accepts them by keyword and hands them to that form only.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import torch

from regmem.ops.common.backends import Backend, warn_once
from regmem.ops.common.validate import MODES, Mode, check_chunk_size
from regmem.ops.common.varlen import Packing


def compute_dtype(x: torch.Tensor) -> torch.dtype:
    """float64 stays float64; every other floating dtype computes in float32."""
    return torch.float64 if x.dtype == torch.float64 else torch.float32


def scaled_queries(q: torch.Tensor, scale: float | None) -> torch.Tensor:
    """q in the compute dtype times `scale`; None means K ** -0.5 (the op contract)."""
    dtype = torch.float64 if q.dtype == torch.float64 else torch.float32  # compute_dtype(q), without its call
    return q.to(dtype) * (q.shape[-1] ** -0.5 if scale is None else scale)


def map_state(fn: Callable[[torch.Tensor], torch.Tensor], state):
    """Applies fn to a state that is None, a tensor, or a NamedTuple of tensors."""
    if state is None:
        return None
    if isinstance(state, torch.Tensor):
        return fn(state)
    return type(state)(*(fn(s) for s in state))


@dataclass(frozen=True)
class Call:
    """What an op's prepare function hands to the frame: the core's inputs, validated."""

    tokens: Mapping[str, torch.Tensor | None]  # per-token inputs [B, T, H, ...] by the core's names; None passes
    out_dtype: torch.dtype  # the dtype of the output: the dtype of the op's inputs
    initial_state: Any = None  # a tensor, a NamedTuple of tensors, or None
    options: Mapping[str, Any] = field(default_factory=dict)  # further keyword arguments of every core
    cu_seqlens: torch.Tensor | None = None  # [N + 1] offsets of packed sequences (validated by prepare)
    finish: Callable | None = None  # (o, state) -> (o, state) in the compute dtype, after unpacking
    torch_only: bool = False  # options only the torch cores implement: backend="auto" runs torch


class Op:
    """A public op: `op(*args, mode="chunk", chunk_size=64, output_final_state=False, backend="auto", **kwargs)`.

    `op.reference`, `op.recurrent`, `op.chunk`: the same call with the form fixed. `op.forms`: the cores by mode.
    `backends`: kernels of other libraries by name, {"fla": Backend}, run by `backend=` that name or "auto"."""

    def __init__(self, prepare: Callable[..., Call], *, reference: Callable, recurrent: Callable, chunk: Callable,
                 backends: Mapping[str, Backend] | None = None):
        self.prepare = prepare
        self.forms = {"reference": reference, "recurrent": recurrent, "chunk": chunk}
        self.backends = dict(backends or {})
        functools.update_wrapper(self, prepare)
        self.form_options = {mode: _form_options(core) for mode, core in self.forms.items()}
        self._form_option_names = frozenset(name for names in self.form_options.values() for name in names)
        # frame keywords a prepare names in its signature reach it too, so it can veto combinations
        self._frame_keywords = {"output_final_state", "backend"} & set(inspect.signature(prepare).parameters)
        self.__signature__ = _public_signature(prepare, self.form_options, self.backends)
        for mode in MODES:
            form = functools.partial(self, mode=mode)
            form.__doc__ = f"`{self.__name__}` in its {mode} form; arguments as `{self.__name__}`."
            setattr(self, mode, form)

    def __repr__(self) -> str:
        return f"<op {self.__module__}.{self.__name__}>"

    def __call__(self, *args, mode: Mode = "chunk", chunk_size: int = 64, output_final_state: bool = False,
                 backend: str = "auto", **kwargs):
        # One pass over the frame's arguments; the helpers named run only where a value needs explaining or work
        if mode not in MODES or backend not in ("auto", "torch"):
            self._check_backend(mode, backend)
        if not (type(chunk_size) is int and chunk_size >= 1 and not chunk_size & (chunk_size - 1)):
            check_chunk_size(chunk_size)
        options = {}
        if kwargs and not self._form_option_names.isdisjoint(kwargs):
            options = self._take_form_options(mode, kwargs)
        if mode == "chunk":
            options["chunk_size"] = chunk_size
        if self._frame_keywords:
            frame = {"output_final_state": output_final_state, "backend": backend}
            for name in self._frame_keywords:
                kwargs[name] = frame[name]
        call = self.prepare(*args, **kwargs)
        tokens, initial_state, packing, empty = _enter(call)
        core = self.forms[mode] if backend == "torch" or not self.backends else self._core(mode, backend, call,
                                                                                            tokens, options)
        if empty:  # nothing to compute: every form gives the same empty output and unchanged state
            o, state = self.forms["reference"](**tokens, initial_state=initial_state, **call.options)
            return _leave(call, o, state, packing, output_final_state)
        try:
            o, state = core(**tokens, initial_state=initial_state, **call.options, **options)
        except Exception as err:  # a library's kernel refused the call: "auto" falls back, a named backend raises
            if backend != "auto" or core is self.forms[mode]:
                raise
            reason = f"{type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''}"
            warn_once(f"{self.__name__}: the {core.__module__} kernel failed ({reason}); "
                      "backend='auto' runs the torch form (a backend named explicitly raises instead)")
            o, state = self.forms[mode](**tokens, initial_state=initial_state, **call.options, **options)
        return _leave(call, o, state, packing, output_final_state)

    def _check_backend(self, mode: str, backend: str) -> None:
        if mode not in MODES:
            raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
        if backend in ("auto", "torch"):
            return
        if backend not in self.backends:
            known = ("auto", "torch", *self.backends)
            raise ValueError(f"backend must be one of {known} for {self.__name__}, got {backend!r}")
        forms = self.backends[backend].forms
        if mode not in forms:
            raise ValueError(f"backend={backend!r} provides the {' and '.join(forms)} form only, got mode={mode!r}")

    def _core(self, mode: str, backend: str, call: Call, tokens: Mapping[str, torch.Tensor | None],
              options: Mapping[str, Any]) -> Callable:
        """The core that runs: the named backend's, or for "auto" the first backend able to run this call (its
        tensors, dtype and options), else the torch form's."""
        if backend == "torch":
            return self.forms[mode]
        if backend != "auto":
            reason = self.backends[backend].refusal(options)
            if reason is not None:
                raise ValueError(reason)
            return self.backends[backend].forms[mode]
        for library in self.backends.values():
            if mode not in library.forms or call.torch_only:
                continue
            usable, warning = library.usable(tokens)  # first: off CUDA it answers at once
            if usable and library.refusal(options) is None:
                return library.forms[mode]
            if warning is not None:
                warn_once(warning)
        return self.forms[mode]

    def _take_form_options(self, mode: str, kwargs: dict) -> dict:
        """Pops the options of `mode`'s core out of kwargs; an option of another form only is an error."""
        options = {name: kwargs.pop(name) for name in self.form_options[mode] if name in kwargs}
        for other, names in self.form_options.items():
            for name in names:
                if name in kwargs:
                    raise ValueError(f"{name} is an option of the {other} form of {self.__name__}, "
                                     f"got mode={mode!r}")
        return options


def op(*, reference: Callable, recurrent: Callable, chunk: Callable,
       backends: Mapping[str, Backend] | None = None) -> Callable[[Callable[..., Call]], Op]:
    """Declares an op: decorates its prepare function (see the module docstring)."""
    return functools.partial(Op, reference=reference, recurrent=recurrent, chunk=chunk, backends=backends)


def _enter(call: Call):
    """The core's inputs in the compute dtype, padded from the packed row when the call has `cu_seqlens`, and
    whether the batch or the sequence is empty (B = 0 or T = 0: every per-token tensor is [B, T, ...])."""
    tokens, first = {}, None
    packing = Packing(call.cu_seqlens) if call.cu_seqlens is not None else None
    for name, t in call.tokens.items():
        if t is not None:
            if first is None:  # the first tensor sets the compute dtype (`compute_dtype`)
                dtype = torch.float64 if t.dtype == torch.float64 else torch.float32
            t = t.to(dtype)
            if packing is not None:
                t = packing.pad(t)  # [N, T_max, H, ...]
            if first is None:
                first = t
        tokens[name] = t
    if first is None:
        raise ValueError("a call needs at least one per-token tensor")
    initial_state = call.initial_state
    if isinstance(initial_state, torch.Tensor):
        initial_state = initial_state.to(dtype)
    elif initial_state is not None:  # a NamedTuple of tensors
        initial_state = map_state(lambda s: s.to(dtype), initial_state)
    return tokens, initial_state, packing, first.shape[0] == 0 or first.shape[1] == 0


def _leave(call: Call, o: torch.Tensor, state, packing: Packing | None, output_final_state: bool):
    if packing is not None:
        o = packing.unpad(o)  # [1, total, H, V]
    if call.finish is not None:
        o, state = call.finish(o, state)
    return o.to(call.out_dtype), (state if output_final_state else None)


def _form_options(core: Callable) -> dict[str, Any]:
    """A core's form options: its keyword-only parameters with defaults, `chunk_size` aside (the op's own)."""
    return {
        name: p.default for name, p in inspect.signature(core).parameters.items()
        if p.kind is p.KEYWORD_ONLY and p.default is not p.empty and name != "chunk_size"
    }


def _public_signature(prepare: Callable, form_options: Mapping[str, Mapping[str, Any]],
                      backends: Mapping) -> inspect.Signature:
    """prepare's signature plus the frame's keywords and every form's options, for help() and inspect."""
    params = list(inspect.signature(prepare).parameters.values())
    taken = {p.name for p in params}
    extra = {"output_final_state": False, "mode": "chunk", "chunk_size": 64}
    if backends:
        extra["backend"] = "auto"
    for options in form_options.values():
        extra |= options
    kw = inspect.Parameter.KEYWORD_ONLY
    params += [inspect.Parameter(name, kw, default=default) for name, default in extra.items() if name not in taken]
    return inspect.Signature(params)
