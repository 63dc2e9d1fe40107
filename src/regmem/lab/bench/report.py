"""Bench results as JSON and a markdown table, plus the targets each issue sets, checked on the numbers."""

from __future__ import annotations

import json
from pathlib import Path

from regmem.lab.bench.cases import MIRRORS


def markdown_table(result: dict) -> str:
    meta = result["meta"]
    memory = any("peak_mb" in r for r in result["rows"])
    lines = [
        f"Dense matmul reference: {meta['matmul_gflops']:.1f} GFLOP/s ({meta['threads']} threads, "
        f"torch {meta['torch']}).",
        "",
        "| op | form | pass | T | ms | tokens/s | GFLOP/s | / matmul |" + (" peak MiB |" if memory else ""),
        "|---|---|---|---:|---:|---:|---:|---:|" + ("---:|" if memory else ""),
    ]
    for r in result["rows"]:
        lines.append(
            f"| {r['op']} | {r['form']} | {r['pass']} | {r['T']} | {r['ms']:.2f} | {r['tokens_per_s']:,.0f} | "
            f"{r['gflops']:.2f} | {r['matmul_ratio']:.3f} |" + (f" {r.get('peak_mb', 0):.0f} |" if memory else "")
        )
    return "\n".join(lines)


def _find(rows, **match):
    found = [r for r in rows if all(r[k] == v for k, v in match.items())]
    return found[0] if found else None


# Chunk vs recurrent fwd+bwd at T = 4096: 20x for the linear memories, 10x for the deep memories, whose recurrent
# form already spends its time in per-token matmuls of the MLP (docs/deep-memories.md).
SPEEDUP_TARGETS = {"ttt_mlp": 10, "titans_mlp": 10}


def targets_table(result: dict) -> str:
    """Targets per op: chunk fwd+bwd >= 20x recurrent at T=4096 (SPEEDUP_TARGETS where another applies);
    time(16384)/time(4096) <= 4.5 for chunk fwd+bwd; best chunk matmul ratio >= 0.3."""
    rows = result["rows"]
    lines = [
        "| op | chunk vs recurrent, fwd+bwd, T=4096 (target) | chunk t(16384)/t(4096) (<= 4.5) | "
        "chunk / matmul, best (>= 0.3) |",
        "|---|---:|---:|---:|",
    ]
    for op in dict.fromkeys(r["op"] for r in rows):
        chunk4k = _find(rows, op=op, form="chunk", T=4096, **{"pass": "fwdbwd"})
        rec4k = _find(rows, op=op, form="recurrent", T=4096, **{"pass": "fwdbwd"})
        chunk16k = _find(rows, op=op, form="chunk", T=16384, **{"pass": "fwdbwd"})
        target = f"(>= {SPEEDUP_TARGETS.get(op, 20)}x)"
        speedup = f"{rec4k['ms'] / chunk4k['ms']:.1f}x {target}" if chunk4k and rec4k else f"n/a {target}"
        scaling = f"{chunk16k['ms'] / chunk4k['ms']:.2f}" if chunk4k and chunk16k else "n/a"
        ratios = [r["matmul_ratio"] for r in rows if r["op"] == op and r["form"] == "chunk"]
        best = f"{max(ratios):.3f}" if ratios else "n/a"
        lines.append(f"| {op} | {speedup} | {scaling} | {best} |")
    return "\n".join(lines)


def comparison_table(result: dict) -> str:
    """regmem's chunk form against each public implementation timed in the same run (bench/external.py), per T and
    pass; empty when the run had none."""
    rows = result["rows"]
    lines = []
    for theirs, ours in MIRRORS.items():
        for row in (r for r in rows if r["op"] == theirs and r["form"] == "chunk"):
            mine = _find(rows, op=ours, form="chunk", T=row["T"], **{"pass": row["pass"]})
            if mine:
                lines.append(f"| {ours} vs {theirs} | {row['T']} | {row['pass']} | {mine['ms']:.1f} | "
                             f"{row['ms']:.1f} | {row['ms'] / mine['ms']:.1f}x |")
    if not lines:
        return ""
    return "\n".join(["| comparison | T | pass | regmem ms | theirs ms | regmem speed-up |",
                      "|---|---:|---|---:|---:|---:|", *lines])


def write(result: dict, out_dir: Path, stem: str, markdown: str | None = None) -> tuple[Path, Path]:
    """Writes <stem>.json and <stem>.md; the markdown is the ops table and its targets unless given."""
    out_dir.mkdir(parents=True, exist_ok=True)
    json_path = out_dir / f"{stem}.json"
    md_path = out_dir / f"{stem}.md"
    json_path.write_text(json.dumps(result, indent=1))
    if markdown is None:
        markdown = f"{markdown_table(result)}\n\n## Targets\n\n{targets_table(result)}"
        if comparison := comparison_table(result):
            markdown += f"\n\n## Against public implementations\n\n{comparison}"
    md_path.write_text(f"# {stem}\n\n{markdown}\n")
    return json_path, md_path
