"""Diverged runs in the fair protocol (src/regmem/lab/experiments/protocol.py, runs.py, suite.py, compare.py): a run
whose loss stayed non-finite is stopped by the Trainer, stored with the step, counted as 0 (the worst score) in
every mean, never chosen as a best learning rate over a finite one, and shown as diverged in the tables. The lr
1e10 makes the tiny linear model's loss non-finite from step 2 on, deterministically on CPU: steps 2-9 are skipped
and the eighth skip in a row ends the run (TrainConfig.max_consecutive_skips), at step 9."""

import dataclasses
import json
import math
import warnings

import pytest

from regmem.lab.cli import main
from regmem.lab.experiments.compare import compare
from regmem.lab.experiments.plots import plot_heatmap, plot_results
from regmem.lab.experiments.presets import PRESETS
from regmem.lab.experiments.protocol import RunStore, execute, run_grid, summarize
from regmem.lab.experiments.runs import Run, train_and_evaluate
from regmem.lab.experiments.suite import write_suite
from regmem.lab.experiments.tuned import best_lrs
from regmem.train import DivergenceWarning, checkpoint_step, latest_checkpoint

FAST = dataclasses.replace(PRESETS["tiny"], steps=12, num_train=64, num_eval=32, eval_every=2)
DIVERGING_LR = 1e10


def record(task, mixer, lr, seed, score, loss):
    return {"task": task, "mixer": mixer, "lr": lr, "seed": seed, "setting": {}, "score": score,
            "test_score": score, "metrics": {"loss": loss}, "parameters": 10, "state_floats": 4, "train_seconds": 1.0,
            "tokens_per_second": 5.0}


def test_a_diverged_run_stops_scores_zero_and_keeps_no_model(tmp_path):
    run = Run("mqar", "linear", DIVERGING_LR, 0)
    with pytest.warns(DivergenceWarning, match=r"non-finite for 8 steps in a row from step 2 \(each skipped\); "
                      "stopped at step 9; last good checkpoint: step 8 at "):
        result = train_and_evaluate(run, FAST, out_dir=str(tmp_path), checkpoint_every=1, progress=False)
    assert result.diverged_at_step == 2 and result.steps == 9 and result.accuracy == 0.0 and result.metrics == {}
    assert checkpoint_step(latest_checkpoint(tmp_path)) == 8  # the weights of step 1: every later step was skipped
    assert not (tmp_path / "model").exists()  # no model/ of non-finite weights


def test_a_diverging_model_whose_gates_turn_nan_is_skipped_not_refused_by_the_ops_value_checks():
    """On the CPU the ops check their gates' values by default and refuse a NaN one; inside a diverging model that
    NaN is the Trainer's to skip, so train_and_evaluate trains with the value checks off."""
    with pytest.warns(DivergenceWarning, match="in a row from step 2"):
        result = train_and_evaluate(Run("mqar", "gated_deltanet", DIVERGING_LR, 0), FAST, progress=False)
    assert result.diverged_at_step == 2 and result.accuracy == 0.0


def test_a_grid_with_a_diverged_cell_shows_it_and_counts_it_as_zero(tmp_path):
    def lrs(task, mixer):
        return [DIVERGING_LR] if mixer == "linear" else [1e-2]

    runs = run_grid(["mqar"], ["linear", "attn"], [{}], lrs, [0, 1])
    logs = []
    with pytest.warns(DivergenceWarning, match="in a row from step 2"):
        records = execute(runs, FAST, RunStore(tmp_path, FAST), progress=False, log=logs.append)
    assert [(r["mixer"], r["diverged_at_step"], r["score"]) for r in records if r["mixer"] == "linear"] == [
        ("linear", 2, 0.0), ("linear", 2, 0.0)]
    assert all(r["diverged_at_step"] is None and r["score"] > 0 for r in records if r["mixer"] == "attn")
    assert sum("diverged at step 2" in line for line in logs) == 2
    stored = json.loads(RunStore(tmp_path, FAST).path(runs[0]).read_text())["result"]
    assert stored["diverged_at_step"] == 2 and stored["metrics"] == {}

    cells = summarize(records)
    linear, attn = cells
    assert (linear.mean, linear.low, linear.high, linear.diverged, linear.diverged_at) == (0.0, 0.0, 0.0, 2, 2)
    assert linear.shown() == "diverged@2" and linear.lr_text() == "1e+10: 0.000 (2 diverged)"
    assert attn.diverged == 0 and attn.shown() == f"{attn.mean:.3f}"
    write_suite(tmp_path, FAST, ["mqar"], ["linear", "attn"], records, cells, {"mqar": "given"})
    board = (tmp_path / "leaderboard.md").read_text()
    assert "| linear | diverged@2 | 0.000 |" in board  # the row's mean accuracy counts it as 0
    assert "2 runs; 1 of 2 cells at their best learning rate" in board
    assert "| linear | diverged@2 | 0.000-0.000 | 0.000 | 2 | 1e+10 | 1e+10: 0.000 (2 diverged) |" in board
    csv_header = (tmp_path / "results.csv").read_text().splitlines()[0]
    assert csv_header.endswith("diverged,diverged_at,lr_diverged,valid_mean,grid,bracket")


def test_compare_counts_a_diverged_learning_rate_as_zero_and_picks_the_finite_one(tmp_path):
    with pytest.warns(DivergenceWarning):
        run_dir = compare("mqar", ["linear"], FAST, seeds=[0], lrs=[1e-2, DIVERGING_LR], run_dir=tmp_path,
                          progress=False, log=lambda *_: None)
    (cell,) = json.loads((run_dir / "results.json").read_text())["cells"]
    assert cell["best_lr"] == 1e-2 and cell["diverged"] == 0 and cell["lr_diverged"] == {"10000000000.0": 1}
    board = (run_dir / "leaderboard.md").read_text()
    assert "1 run; 0 of 1 cells" in board and "1e+10: 0.000 (1 diverged)" in board


def test_a_run_stored_with_a_non_finite_loss_counts_as_diverged_and_is_never_the_best_lr():
    nan_model = record("mqar", "gla", 3e-2, 0, 0.6, math.nan)  # a model of NaN weights can score by chance
    finite = record("mqar", "gla", 1e-2, 0, 0.4, 1.2)
    (cell,) = summarize([nan_model, finite])
    assert cell.best_lr == 1e-2 and cell.lr_means == {1e-2: 0.4, 3e-2: 0.0} and cell.lr_diverged == {3e-2: 1}
    assert best_lrs([cell]) == {"mqar": {"gla": 1e-2}}
    (alone,) = summarize([nan_model])
    assert alone.mean == 0.0 and alone.shown() == "diverged"  # the step is not known for such a run
    text_runs = [record("text", "attn", 1e-2, 0, math.nan, math.nan), record("text", "attn", 3e-2, 0, 2.5, 1.7)]
    (text,) = summarize(text_runs)
    assert text.best_lr == 3e-2 and text.mean == 2.5 and text.lr_means[1e-2] == math.inf  # bits per byte: worst


def test_regmem_train_prints_the_divergence(tmp_path, monkeypatch, capsys):
    monkeypatch.setitem(PRESETS, "fast", dataclasses.replace(FAST, name="fast"))
    with pytest.warns(DivergenceWarning):
        main(["train", "mqar", "--mixer", "linear", "--preset", "fast", "--lr", str(DIVERGING_LR), "--no-progress",
              "--out-dir", str(tmp_path / "run")])
    out = capsys.readouterr().out
    assert "diverged: the loss or gradient was non-finite for 8 steps in a row from step 2 (each skipped); stopped " \
           "at step 9" in out
    assert not (tmp_path / "run" / "model").exists()


def test_a_diverged_bits_per_byte_cell_is_plotted_without_non_finite_values(tmp_path):
    records = [record("text", "attn", 1e-2, 0, math.inf, 1.0) | {"diverged_at_step": 7},
               record("text", "linear", 1e-2, 0, 2.5, 1.7)]
    cells = summarize(records)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # numpy and matplotlib warn on inf - inf and infinite limits
        plot_results(tmp_path / "bars.png", "text", None, cells)
        plot_heatmap(tmp_path / "heat.png", ["text"], ["attn", "linear"], {("text", c.mixer): c for c in cells}, "t",
                     labels={("text", "attn"): cells[0].shown(digits=2)})
    assert cells[0].shown() == "diverged@7"
    assert (tmp_path / "bars.png").exists() and (tmp_path / "heat.png").exists()
