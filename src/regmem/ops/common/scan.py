"""A generic associative scan over a leading dim (log depth), for scan forms such as HLA's (ops/hla/scan.py).

The chunk forms pass states between chunks with a plain loop instead: with states of K^2 + K V floats per head, the
O(N log N) work of a log-depth scan over N chunks costs more on CPU than N small sequential steps (measured for
hla2 at T = 16384: 1.1 s vs 0.63 s forward+backward)."""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import torch


def map_fields(fn, elems):
    """fn applied to every field of a NamedTuple of tensors."""
    return type(elems)(*(fn(x) for x in elems))


def associative_scan(combine: Callable, elems: NamedTuple, dim: int, *, exclusive: bool = False, identity=None):
    """Prefix combines of `elems` (a NamedTuple of tensors sharing their leading dims) along the leading `dim`:
    inclusive y_i = x_0 ⊕ ... ⊕ x_i, or exclusive y_i = x_0 ⊕ ... ⊕ x_{i-1} with y_0 the identity.

    Hillis-Steele: ceil(log2 n) rounds, each one vectorised `combine(earlier, later)` over all positions (so
    `combine` must work elementwise over leading dims); O(n log n) work. `combine` must be associative; it need not
    commute. identity: the neutral element with size 1 along `dim` (broadcast to one slice), None for all zeros.
    """
    if not isinstance(dim, int) or isinstance(dim, bool) or not 0 <= dim < min(x.ndim for x in elems):
        raise ValueError(f"dim must be a non-negative leading dim shared by every field, got {dim!r}")
    n = elems[0].shape[dim]
    if any(x.shape[dim] != n for x in elems):
        raise ValueError(f"every field of elems must have the same size along dim {dim}")
    x, offset = elems, 1
    while offset < n:
        earlier = map_fields(lambda f, o=offset: f.narrow(dim, 0, n - o), x)
        later = map_fields(lambda f, o=offset: f.narrow(dim, o, n - o), x)
        merged = combine(earlier, later)  # position i gets x[i - offset] ⊕ x[i]
        x = type(x)(*(torch.cat([f.narrow(dim, 0, offset), g], dim) for f, g in zip(x, merged, strict=True)))
        offset *= 2
    if not exclusive or n == 0:
        return x
    first = map_fields(lambda f: f.narrow(dim, 0, 1), elems)
    identity = map_fields(torch.zeros_like, first) if identity is None else identity
    return type(x)(
        *(
            torch.cat([e.expand_as(f0), f.narrow(dim, 0, n - 1)], dim)
            for e, f0, f in zip(identity, first, x, strict=True)
        )
    )
