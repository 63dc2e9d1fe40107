"""Reproductions of the seeds' figures: `regmem repro NAME` runs one, prints the paper's claim beside the
measured result and writes a markdown report, JSON and a plot.

    ttr-online-regression   Test-time regression, Fig. 2 (Sec. 5): parameter-free online regression
    ttr-mqar                Test-time regression, Fig. 3 (Sec. 6): one layer + key conv on MQAR, LA vs RLS
"""

from __future__ import annotations

from pathlib import Path


def run_repro(name: str, out_dir: str | Path = "results/repro", *, quick: bool = False, paper_scale: bool = False,
              log=print) -> dict:
    """Runs reproduction `name`, logs its report and writes its outputs under `out_dir`; returns the paths.
    `quick` shrinks the run to a smoke test (tests and CI), not a reproduction; `paper_scale` runs ttr-mqar at
    the paper's d_model 64 and P in {64, 128} instead of the 10-minute scaled default."""
    out_dir = Path(out_dir)
    if name == "ttr-online-regression":
        from regmem.experiments.repro import ttr_online as repro

        settings = repro.OnlineSettings(num_sequences=2) if quick else repro.OnlineSettings()
        result = repro.run_online_regression(settings)
    elif name == "ttr-mqar":
        from regmem.experiments.repro import ttr_mqar as repro

        settings = repro.PAPER_SCALE if paper_scale else repro.MQARSettings()
        if quick:
            settings = repro.MQARSettings(cells=((8, 32), (16, 64)), d_model=16, vocab_size=128, steps=4,
                                          batch_size=8, num_eval=8)
        result = repro.run_mqar(settings, log=log)
    else:
        raise ValueError(f"unknown reproduction {name!r}; known: {REPROS}")
    paths = repro.write_outputs(result, out_dir)
    log(repro.format_report(result))
    log(f"wrote {', '.join(str(p) for p in paths.values())}")
    return paths


REPROS = ("ttr-online-regression", "ttr-mqar")
