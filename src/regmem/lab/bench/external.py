"""Public implementations users compare regmem against, as optional `regmem bench ops` cases.

Never needed by the tests or the library: they load only when a case is asked for, from packages of the `bench`
extra (`pip install 'regmem[bench]'`). Each runs its own chunk algorithm on the same inputs as regmem's case of the
same op, so a row of the table reads as the ratio of the two in one run.

- `fla_naive_gated_delta_rule`: `naive_chunk_gated_delta_rule` of flash-linear-attention (fla-core >= 0.6,
  `fla/ops/gated_delta_rule/naive.py`), the pure-torch chunked Gated DeltaNet (arXiv:2412.06464) that fla's kernels
  are tested against. Loaded from its file: importing the `fla` package itself needs triton.
"""

from __future__ import annotations

import functools
import importlib.util
from pathlib import Path
from types import ModuleType


@functools.cache
def load_fla_file(relative: str) -> ModuleType:
    """A module of the installed `fla` package by its file (e.g. "ops/gated_delta_rule/naive.py"), without running
    `fla/__init__.py`. Raises ImportError with the extra to install when fla-core is absent."""
    spec = importlib.util.find_spec("fla")
    if spec is None or not spec.submodule_search_locations:
        raise ImportError("this bench case needs fla-core: pip install 'regmem[bench]'")
    path = Path(next(iter(spec.submodule_search_locations))) / relative
    if not path.is_file():
        raise ImportError(f"fla-core has no {relative} (found fla at {path.parents[len(Path(relative).parts) - 1]}); "
                          "pip install 'regmem[bench]' for fla-core >= 0.6")
    module_spec = importlib.util.spec_from_file_location(f"_regmem_bench_fla_{path.stem}", path)
    module = importlib.util.module_from_spec(module_spec)
    module_spec.loader.exec_module(module)
    return module


def fla_naive_gated_delta_rule(q, k, v, g, beta, *, mode, chunk_size=64):
    """fla's pure-torch chunk Gated DeltaNet on regmem's layout ([B, T, H, K], g and beta [B, T, H]); its default
    scale K^-0.5 is regmem's. Chunk form only."""
    if mode != "chunk":
        raise ValueError(f"fla_naive_gated_delta_rule has a chunk form only, got mode={mode!r}")
    naive = load_fla_file("ops/gated_delta_rule/naive.py")
    return naive.naive_chunk_gated_delta_rule(q, k, v, g, beta, chunk_size=chunk_size)
