"""`regmem bench decode`: the latency of one decoding step after a context of T tokens.

A step is the op's recurrent form on one token with the state of the context (prefilled by the chunk form, not
timed). For a memory with a fixed-size state (linear attention, the delta rules, HLA2, AHLA, ...) the step costs
the same at every T; softmax attention's state is the KV cache, which grows with T, and so does its step."""

from __future__ import annotations

import torch

from regmem.lab.bench.cases import CASES, Shape, case_inputs
from regmem.lab.bench.timing import median_seconds


def _time_slice(tokens: dict, start: int, stop: int) -> dict:
    """Tokens start:stop of every per-token input [B, T, ...]."""
    return {name: t[:, start:stop] for name, t in tokens.items()}


def state_floats(state) -> int:
    """Floats of an op state (a tensor or a tuple of tensors) per sequence."""
    tensors = [state] if isinstance(state, torch.Tensor) else [t for t in state if isinstance(t, torch.Tensor)]
    return sum(t[0].numel() for t in tensors)


def run_decode(case_names, context_lens, *, batch, heads, head_dim, dtype, min_run_time, progress=print) -> dict:
    """Times one recurrent step after each context length. Returns {"meta": ..., "rows": [...]}."""
    rows = []
    gen = torch.Generator().manual_seed(0)
    for name in case_names:
        case = CASES[name]
        for T in context_lens:
            shape = Shape(batch, T + 1, heads, head_dim, head_dim, 64)
            tokens, options = case_inputs(case, shape, dtype, gen)
            with torch.no_grad():
                _, state = case.call(**_time_slice(tokens, 0, T), **options, mode="chunk", chunk_size=64,
                                     output_final_state=True)
                token = _time_slice(tokens, T, T + 1)
                seconds = median_seconds(
                    lambda: case.call(**token, **options, mode="recurrent", initial_state=state),  # noqa: B023
                    min_run_time=min_run_time)
            rows.append({"op": name, "context": T, "B": batch, "H": heads, "K": head_dim, "dtype": str(dtype),
                         "ms": seconds * 1e3, "state_floats": state_floats(state)})
            progress(f"{name:>22} context={T:>6}: {seconds * 1e3:8.3f} ms per step, state "
                     f"{rows[-1]['state_floats']:,} floats")
    meta = {"threads": torch.get_num_threads(), "torch": torch.__version__}
    return {"meta": meta, "rows": rows}


def decode_table(result: dict) -> str:
    """Per op: ms per step at each context, and the ratio of the longest context's step to the shortest's."""
    rows = result["rows"]
    contexts = sorted({r["context"] for r in rows})
    lines = ["| op | state floats / seq (at the longest context) | "
             + " | ".join(f"ms @ {c}" for c in contexts) + f" | t({contexts[-1]}) / t({contexts[0]}) |",
             "|---|---:|" + "---:|" * len(contexts) + "---:|"]
    for op in dict.fromkeys(r["op"] for r in rows):
        by_context = {r["context"]: r for r in rows if r["op"] == op}
        times = [f"{by_context[c]['ms']:.3f}" if c in by_context else "n/a" for c in contexts]
        first, last = by_context.get(contexts[0]), by_context.get(contexts[-1])
        ratio = f"{last['ms'] / first['ms']:.2f}" if first and last else "n/a"
        floats = f"{last['state_floats']:,}" if last else "n/a"
        lines.append(f"| {op} | {floats} | " + " | ".join(times) + f" | {ratio} |")
    return "\n".join(lines)
