"""`regmem repro nl-optimizers` (Nested Learning, arXiv:2512.24695, Sec. 4.3-4.4, Fig. 4): the quick run writes its
report, JSON and plot with the paper's claims beside the measured tables; delta momentum at delta = 0 retraces
standard momentum on psi bit for bit; the two continual-regression tasks live in orthogonal input subspaces."""

import json

import torch

from regmem.lab.experiments.repro import REPROS, run_repro
from regmem.lab.experiments.repro import nl_optimizers as repro


def test_quick_nl_optimizers_prints_the_claims_beside_the_measured_tables(tmp_path):
    assert "nl-optimizers" in REPROS
    lines = []
    paths = run_repro("nl-optimizers", tmp_path, variant="quick", log=lines.append)
    assert {p.name for p in paths.values()} == {"nl-optimizers.md", "nl-optimizers.json", "nl-optimizers.png"}
    report = paths["report"].read_text()
    assert "Paper (a): Fig. 4" in report and "Paper (b): Sec. 4.3" in report and report.strip() in "\n".join(lines)
    result = json.loads(paths["json"].read_text())
    assert [r["method"] for r in result["psi"]] == ["standard momentum", "delta momentum (delta=0.1)"]
    for run in result["psi"]:
        assert len(run["losses"]) == repro.QUICK.psi_steps + 1
        start = repro.psi(torch.tensor([-3.5, 2.0], dtype=torch.float64), 10.0, 0.5, 5.0).item()
        assert run["losses"][0] == float(f"{start:.6g}")  # stored to 6 significant digits
    assert [(r["regime"], r["optimizer"]) for r in result["orthogonal"]] == [
        (regime, name) for regime in ("converged", "early switch") for name in repro.OPTIMISERS]
    for row in result["orthogonal"]:
        assert f"| {row['regime']} | {row['optimizer']} | {row['lr']:g} |" in report
        assert row["loss_a_after_a"] < row["loss_a_init"]  # every optimiser learns something of task A
    real = repro.QUICK
    assert [(r["task"], r["optimizer"]) for r in result["real"]] == [
        (task, name) for task in real.real_tasks for name in real.real_optimizers]
    for row in result["real"]:
        half = "-" if row["adamw_lr"] is None else f"{row['adamw_lr']:g}"
        assert f"| {row['task']} | {row['optimizer']} | {row['lr']:g} | {half} |" in report
        assert len(row["runs"]) == len(real.seeds) and row["step_ms"] > 0  # step_ms: the separate timing pass
        assert row["total_ms"] >= row["run_step_ms"]  # both from the same run: the step is part of the whole
        assert len(row["runs"][0]["train_curve"]) == (real.digits_steps if row["task"] == "digits" else real.lm_steps)
    assert "Paper (c): Sec. 9.7" in report
    # (a): 2 claims, (b): 4, (c): per task, each M3 reading's lowest test and training loss, M3 slower than each Muon
    assert len(result["claims"]) == 6 + 6 * len(real.real_tasks)
    assert all(f"| {c['claim']} |" in report for c in result["claims"])
    assert paths["plot"].read_bytes()[:4] == b"\x89PNG"


def test_delta_momentum_with_zero_delta_retraces_standard_momentum_on_psi():
    settings = repro.OptimizerToySettings(psi_steps=200)
    standard = repro.psi_trajectory(settings, 1e-2, None)
    zero = repro.psi_trajectory(settings, 1e-2, 0.0)
    delta = repro.psi_trajectory(settings, 1e-2, 0.1)
    assert zero["points"] == standard["points"] and zero["losses"] == standard["losses"]
    assert delta["points"][5] != standard["points"][5]  # a positive delta does change the path


def test_the_two_tasks_have_orthogonal_inputs_and_distinct_teachers():
    (xa, ya), (xb, yb) = repro.make_tasks(repro.QUICK, seed=0)
    assert xa.shape == xb.shape == (repro.QUICK.samples, repro.QUICK.dim)
    assert (xa @ xb.T).abs().max() < 1e-4 * xa.norm() * xb.norm()
    assert torch.linalg.matrix_rank(xa) == torch.linalg.matrix_rank(xb) == repro.QUICK.dim // 2
    assert ya.abs().mean() > 0.1 and yb.abs().mean() > 0.1
