"""Part (c) of `regmem repro nl-optimizers` (Nested Learning, arXiv:2512.24695, Sec. 9.7): the digits data and
split, the optimisers' parameter split, the best-lr choice and the claims read from the rows."""

import math

import pytest
import torch

from regmem.experiments.repro import nl_optimizers as toys
from regmem.experiments.repro import nl_optimizers_real as real
from regmem.optim import M3, Combined, MuonMemory


def test_digits_split_is_fixed_disjoint_and_scaled():
    x_train, y_train, x_test, y_test = real.load_digits()
    assert x_train.shape == (1438, 64) and x_test.shape == (359, 64)
    assert y_train.dtype == torch.long and set(y_test.tolist()) == set(range(10))
    assert 0.0 <= float(x_train.min()) and float(x_train.max()) == 1.0
    again = real.load_digits()
    assert torch.equal(again[0], x_train) and torch.equal(again[3], y_test)
    rows = {tuple(r) for r in x_train.tolist()}
    assert sum(tuple(r) in rows for r in x_test.tolist()) < 10  # a few duplicate images exist in the data itself
    other = real.load_digits(split_seed=1)
    assert not torch.equal(other[0], x_train)


@pytest.mark.parametrize("name", ["torch_muon", "muon", "m3"])
def test_muon_family_steps_the_hidden_matrix_and_adamw_the_rest(name):
    model = real.digits_model(8)
    opt = real.build_optimizer(name, model, 1e-3, m3_frequency=5, exclude=("0", "4"))
    assert isinstance(opt, Combined)
    first, rest = opt.optimizers
    assert [p for g in first.param_groups for p in g["params"]] == [model[2].weight]
    expected = {"torch_muon": torch.optim.Muon, "muon": MuonMemory, "m3": M3}[name]
    assert type(first) is expected and isinstance(rest, torch.optim.AdamW)
    assert len([p for g in rest.param_groups for p in g["params"]]) == 5  # 2 excluded weights + 3 biases


def test_build_optimizer_rejects_an_unknown_name():
    with pytest.raises(ValueError, match="unknown optimiser 'lion'"):
        real.build_optimizer("lion", real.digits_model(8), 1e-3, m3_frequency=5)


def test_run_real_rejects_unknown_names_before_training():
    settings = toys.QUICK.__class__(**{**toys.QUICK.__dict__, "real_optimizers": ("adamw", "lion")})
    with pytest.raises(ValueError, match="lion"):
        real.run_real(settings, log=lambda line: None)


def test_muon_in_float32_tracks_torch_muon_on_digits():
    """The same update up to Newton-Schulz precision (bfloat16 vs float32): the runs stay close, not equal."""
    settings = toys.OptimizerToySettings(digits_hidden=32, digits_steps=20, digits_eval_every=10)
    ours = real.train_digits("muon", 3e-3, 0, settings)
    theirs = real.train_digits("torch_muon", 3e-3, 0, settings)
    assert ours["train_curve"] != theirs["train_curve"]
    assert math.isclose(ours["final_loss"], theirs["final_loss"], rel_tol=0.05)


def _run(task, name, lr, seed, final, step_ms=1.0):
    return {"task": task, "optimizer": name, "lr": lr, "seed": seed, "final_loss": final, "step_ms": step_ms,
            "total_ms": 2 * step_ms, "final": {"loss": final, "accuracy": 0.5}, "eval_curve": [], "train_curve": []}


def test_summary_takes_the_lr_with_the_lowest_mean_over_seeds_and_flags_the_grid_edge():
    settings = toys.OptimizerToySettings(real_tasks=("digits",), real_optimizers=("adamw", "m3"), seeds=(0, 1))
    runs = [_run("digits", "adamw", 1e-3, 0, 0.5), _run("digits", "adamw", 1e-3, 1, 0.1),  # mean 0.3
            _run("digits", "adamw", 3e-3, 0, 0.2), _run("digits", "adamw", 3e-3, 1, 0.2),  # mean 0.2: best
            _run("digits", "adamw", 1e-2, 0, math.inf), _run("digits", "adamw", 1e-2, 1, 0.01),
            _run("digits", "m3", 1e-3, 0, 0.05, step_ms=3.0), _run("digits", "m3", 1e-3, 1, 0.07, step_ms=9.0)]
    adamw, m3 = real.summarize_real(runs, settings)
    assert adamw["lr"] == 3e-3 and not adamw["edge"] and adamw["final_loss"] == 0.2
    assert adamw["grid"]["0.01"] == math.inf  # a diverged seed sinks its lr
    assert m3["final_min"] == 0.05 and m3["final_max"] == 0.07 and m3["run_step_ms"] == 3.0  # the seed-0 run
    adamw["step_ms"], m3["step_ms"] = 1.0, 3.0  # run_real's timing pass
    claims = real.real_claims([adamw, m3])
    assert claims == [{"claim": claims[0]["claim"], "measured": "lowest: m3 0.0600; M3 0.0600", "holds": True}]


def test_torch_muon_runs_at_muons_best_lr_after_muons_grid(monkeypatch):
    calls = []

    def fake_run(task, name, lr, seed, settings):
        calls.append((name, lr))
        top = 3 * real.BASE_LRS[task]["muon"]
        return _run(task, name, lr, seed, abs(math.log10(lr) - math.log10(top)))  # muon's best: its largest lr

    monkeypatch.setattr(real, "_one_run", fake_run)
    settings = toys.OptimizerToySettings(real_tasks=("text",), real_optimizers=("torch_muon", "muon"), seeds=(0, 1),
                                         lr_multipliers=(1 / 3, 1.0, 3.0), workers=1)
    torch_row, muon_row = real.run_real(settings, log=lambda line: None)
    assert [name for name, _ in calls] == ["muon"] * 6 + ["torch_muon"] * 2  # the grid first, then its follower
    assert muon_row["lr"] == 3 * real.BASE_LRS["text"]["muon"] and muon_row["edge"]
    assert torch_row["lr"] == muon_row["lr"] and list(torch_row["grid"]) == [f"{muon_row['lr']:g}"]


@pytest.mark.parametrize("task", ["digits", "text"])
def test_timing_pass_times_every_optimiser_and_leaves_the_thread_count(task):
    settings = toys.QUICK
    threads = torch.get_num_threads()
    times = real.time_steps(task, {"adamw": 1e-3, "muon": 1e-2, "dmgd": 0.1}, settings)
    assert list(times) == ["adamw", "muon", "dmgd"] and all(t > 0 for t in times.values())
    assert torch.get_num_threads() == threads
