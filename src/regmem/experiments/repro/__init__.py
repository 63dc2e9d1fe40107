"""Reproductions of the seeds' figures: `regmem repro NAME` runs one, prints the paper's claim beside the
measured result and writes a markdown report, JSON and a plot.

    ttr-online-regression   Test-time regression, Fig. 2 (Sec. 5): parameter-free online regression
    ttr-mqar                Test-time regression, Fig. 3 (Sec. 6): one layer + key conv on MQAR, LA vs RLS
    nl-mad                  Nested Learning, Table 4 (Sec. 9.4): MAD's tasks at CPU scale, beside the paper
    nl-niah                 Nested Learning, Table 1's pattern (Sec. 9.2): needle-in-a-haystack heat maps
    lecture-lineage         the lecture's recurrent hierarchy (Mamba / DeltaNet / TTT) on MQAR at equal memory
    nl-formal-languages     Nested Learning, Table 5 (Sec. 9.5): six formal languages, Hope vs LSTM / attention
    am-stress               Associative memory (arXiv:2505.19488), Fig. 5: Theorem 1's swap tracking, linear vs round
    am-swap                 Associative memory, Figs. 4, 6, 8: one-layer DeltaFormer vs Transformer on S5 swaps
    am-dag                  Associative memory, Fig. 7: DAG reachability, DeltaFormer vs Transformer + a hand-set layer
    am-heads                Associative memory, Fig. 2: softmax vs linear attention x 1-8 heads, MQAR and byte text
    nl-optimizers           Nested Learning, Fig. 4 (Sec. 4.3-4.4), Figs. 11-12: psi toy; orthogonal tasks; digits, text
"""

from __future__ import annotations

import dataclasses
from pathlib import Path


def run_repro(name: str, out_dir: str | Path = "results/repro", *, quick: bool = False, paper_scale: bool = False,
              full: bool = False, overrides: dict | None = None, log=print) -> dict:
    """Runs reproduction `name`, logs its report and writes its outputs under `out_dir`; returns the paths.
    `quick` shrinks the run to a smoke test (tests and CI), not a reproduction; `paper_scale` runs ttr-mqar at
    the paper's d_model 64 and P in {64, 128} instead of the 10-minute scaled default; `full` runs
    nl-formal-languages, am-swap, am-dag and am-heads at a larger scale (more steps, lrs and seeds; hours of CPU);
    `overrides` replaces
    fields of the settings (e.g. {"softmax_bandwidth": 0.05} for ttr-online-regression)."""
    out_dir = Path(out_dir)
    if name == "ttr-online-regression":
        from regmem.experiments.repro import ttr_online as repro

        settings = repro.OnlineSettings(num_sequences=2) if quick else repro.OnlineSettings()
        result = repro.run_online_regression(_replace(settings, overrides))
    elif name == "ttr-mqar":
        from regmem.experiments.repro import ttr_mqar as repro

        settings = repro.PAPER_SCALE if paper_scale else repro.MQARSettings()
        if quick:
            settings = repro.MQARSettings(cells=((8, 32), (16, 64)), d_model=16, vocab_size=128, steps=4,
                                          batch_size=8, num_eval=8)
        result = repro.run_mqar(_replace(settings, overrides), log=log)
    elif name == "nl-mad":
        from regmem.experiments.repro import nl_mad as repro

        settings = repro.QUICK if quick else repro.MADSettings()
        points = repro.QUICK_POINTS if quick else None
        result = repro.run_mad(_replace(settings, overrides), out_dir, points=points, progress=not quick, log=log)
    elif name == "nl-niah":
        from regmem.experiments.repro import nl_niah as repro

        settings = repro.QUICK if quick else repro.NIAHSettings()
        result = repro.run_niah_repro(_replace(settings, overrides), out_dir, log=log)
    elif name == "lecture-lineage":
        from regmem.experiments.repro import lecture_lineage as repro

        settings = repro.QUICK if quick else repro.LineageSettings()
        result = repro.run_lineage(_replace(settings, overrides), out_dir, progress=not quick, log=log)
    elif name == "nl-formal-languages":
        from regmem.experiments.repro import nl_formal as repro

        settings = repro.QUICK if quick else repro.FULL if full else repro.FormalSettings()
        result = repro.run_formal(_replace(settings, overrides), out_dir, progress=not quick, log=log)
    elif name == "am-stress":
        from regmem.experiments.repro import am_stress as repro

        settings = repro.QUICK if quick else repro.StressSettings()
        result = repro.run_stress(_replace(settings, overrides), log=log)
    elif name == "am-swap":
        from regmem.experiments.repro import am_swap as repro

        settings = repro.QUICK if quick else repro.FULL if full else repro.SwapSettings()
        result = repro.run_swap(_replace(settings, overrides), out_dir, progress=not quick, log=log)
    elif name == "am-dag":
        from regmem.experiments.repro import am_dag as repro

        settings = repro.QUICK if quick else repro.FULL if full else repro.DAGSettings()
        result = repro.run_dag(_replace(settings, overrides), out_dir, progress=not quick, log=log)
    elif name == "am-heads":
        from regmem.experiments.repro import am_heads as repro

        settings = repro.QUICK if quick else repro.FULL if full else repro.HeadsSettings()
        result = repro.run_heads(_replace(settings, overrides), out_dir, progress=not quick, log=log)
    elif name == "nl-optimizers":
        from regmem.experiments.repro import nl_optimizers as repro

        settings = repro.QUICK if quick else repro.OptimizerToySettings()
        result = repro.run_optimizer_toys(_replace(settings, overrides), log=log)
    else:
        raise ValueError(f"unknown reproduction {name!r}; known: {REPROS}")
    paths = repro.write_outputs(result, out_dir)
    log(repro.format_report(result))
    log(f"wrote {', '.join(str(p) for p in paths.values())}")
    return paths


REPROS = ("ttr-online-regression", "ttr-mqar", "nl-mad", "nl-niah", "lecture-lineage", "nl-formal-languages",
          "am-stress", "am-swap", "am-dag", "am-heads", "nl-optimizers")


def _replace(settings, overrides: dict | None):
    """settings with the fields in `overrides` replaced; unknown fields raise ValueError naming them."""
    if not overrides:
        return settings
    known = {f.name for f in dataclasses.fields(settings)}
    unknown = sorted(set(overrides) - known)
    if unknown:
        raise ValueError(f"unknown settings {unknown}; known: {sorted(known)}")
    return dataclasses.replace(settings, **{k: _as_field(getattr(settings, k), v) for k, v in overrides.items()})


def _as_field(default, value):
    """A `--set` value in the shape of the field it replaces: a tuple field takes a comma-separated list
    (`mixers=attn,linear`, `lrs=0.003,0.01`) or one value, each item converted like the field's first item."""
    if not isinstance(default, tuple):
        return value
    items = str(value).split(",") if isinstance(value, str) else [value]
    kind = type(default[0]) if default else str
    try:
        return tuple(kind(item) for item in items)
    except ValueError:
        raise ValueError(f"setting {value!r}: expected comma-separated {kind.__name__} values") from None
