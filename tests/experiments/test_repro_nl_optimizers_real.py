"""Part (c) of `regmem repro nl-optimizers` (Nested Learning, arXiv:2512.24695, Sec. 9.7): the digits data and
split, the optimisers' parameter split, the best-lr choice and the claims read from the rows."""

import math

import pytest
import torch

from regmem.lab.experiments.repro import nl_optimizers as toys
from regmem.lab.experiments.repro import nl_optimizers_real as real
from regmem.lab.experiments.repro import nl_optimizers_real_report as report
from regmem.optim import M3, Combined, MuonMemory


def test_digits_split_is_fixed_disjoint_and_scaled():
    x_train, y_train, x_valid, y_valid, x_test, y_test = real.load_digits()
    assert x_train.shape == (1079, 64) and x_valid.shape == x_test.shape == (359, 64)
    assert y_train.dtype == torch.long and set(y_test.tolist()) == set(range(10)) == set(y_valid.tolist())
    assert 0.0 <= float(x_train.min()) and float(x_train.max()) == 1.0
    again = real.load_digits()
    assert torch.equal(again[0], x_train) and torch.equal(again[5], y_test)
    for held_out in (x_valid, x_test):  # a few duplicate images exist in the data itself
        for other in (x_train, x_valid if held_out is x_test else x_test):
            rows = {tuple(r) for r in other.tolist()}
            assert sum(tuple(r) in rows for r in held_out.tolist()) < 10
    other = real.load_digits(split_seed=1)
    assert not torch.equal(other[0], x_train)


@pytest.mark.parametrize("name", ["torch_muon", "muon", "m3", "m3_ema"])
def test_muon_family_steps_the_hidden_matrix_and_adamw_the_rest_at_its_own_lr(name):
    model = real.digits_model(8)
    opt = real.build_optimizer(name, model, 1e-3, adamw_lr=3e-2, m3_frequency=5, exclude=("0", "4"))
    assert isinstance(opt, Combined)
    first, rest = opt.optimizers
    assert [p for g in first.param_groups for p in g["params"]] == [model[2].weight]
    expected = {"torch_muon": torch.optim.Muon, "muon": MuonMemory, "m3": M3, "m3_ema": M3}[name]
    assert type(first) is expected and isinstance(rest, torch.optim.AdamW)
    assert [g["lr"] for g in first.param_groups] == [1e-3] and [g["lr"] for g in rest.param_groups] == [3e-2]
    assert len([p for g in rest.param_groups for p in g["params"]]) == 5  # 2 excluded weights + 3 biases
    if name.startswith("m3"):
        assert first.param_groups[0]["accumulate"] == ("ema" if name == "m3_ema" else "sum")


def test_adamw_half_lr_is_required_by_the_muon_family_and_refused_by_the_others():
    with pytest.raises(ValueError, match="adamw_lr"):
        real.build_optimizer("m3", real.digits_model(8), 1e-3, m3_frequency=5)
    with pytest.raises(ValueError, match="adamw_lr"):
        real.build_optimizer("adamw", real.digits_model(8), 1e-3, adamw_lr=1e-3, m3_frequency=5)


def test_delta_momentum_rows_are_the_elementwise_and_the_printed_matrix_form():
    elementwise = real.build_optimizer("delta_momentum", real.digits_model(8), 0.1, m3_frequency=5)
    printed = real.build_optimizer("delta_momentum_eq49", real.digits_model(8), 0.1, m3_frequency=5)
    assert {k: elementwise.defaults[k] for k in ("form", "normalize", "delta")} == {
        "form": "elementwise", "normalize": True, "delta": 0.5}
    assert {k: printed.defaults[k] for k in ("form", "normalize", "delta")} == {
        "form": "matrix", "normalize": False, "delta": 1.0}


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
    ours = real.train_digits("muon", 3e-3, 3e-3, 0, settings)
    theirs = real.train_digits("torch_muon", 3e-3, 3e-3, 0, settings)
    assert ours["train_curve"] != theirs["train_curve"]
    assert math.isclose(ours["final_loss"], theirs["final_loss"], rel_tol=0.05)


def _run(task, name, lr, seed, final, step_ms=1.0, adamw_lr=None, test=None, train=None):
    test = final if test is None else test
    return {"task": task, "optimizer": name, "lr": lr, "adamw_lr": adamw_lr, "seed": seed, "final_loss": final,
            "test_loss": test, "train_loss": final if train is None else train, "step_ms": step_ms,
            "total_ms": 2 * step_ms, "final": {"loss": final, "accuracy": 0.5}, "test": {"loss": test, "accuracy": 0.4},
            "eval_curve": [], "train_curve": []}


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
    claims = report.real_claims([adamw, m3])
    assert [c["holds"] for c in claims] == [True, True] and "test loss" in claims[0]["claim"]
    assert claims[0]["measured"] == "lowest: m3 0.0600 [0.0500, 0.0700]; m3 0.0600 [0.0500, 0.0700]"
    assert "training loss" in claims[1]["claim"] and adamw["accuracy"] == 0.4  # the test set's


def test_the_lr_is_chosen_on_validation_and_test_and_training_loss_are_reported_there():
    settings = toys.OptimizerToySettings(real_tasks=("digits",), real_optimizers=("adamw",), seeds=(0,))
    runs = [_run("digits", "adamw", 1e-3, 0, 0.5, test=0.1, train=0.2),  # best on test, not on validation
            _run("digits", "adamw", 3e-3, 0, 0.3, test=0.4, train=0.25),
            _run("digits", "adamw", 1e-2, 0, 0.4, test=0.05, train=0.3)]
    (row,) = real.summarize_real(runs, settings)
    assert row["lr"] == 3e-3 and (row["test_loss"], row["train_loss"]) == (0.4, 0.25)
    assert row["brackets"] == {"lr": "interior"} and row["seeds"] == 1


def _fake_runs(monkeypatch, best_lr, best_adamw_lr):
    """`_one_run` replaced by a loss that is lowest at (best_lr, best_adamw_lr); returns the calls' list."""
    calls = []

    def fake_run(task, name, lr, adamw_lr, seed, settings):
        calls.append((name, lr, adamw_lr))
        gap = abs(math.log10(lr / best_lr)) + (0 if adamw_lr is None else abs(math.log10(adamw_lr / best_adamw_lr)))
        return _run(task, name, lr, seed, gap, adamw_lr=adamw_lr)

    monkeypatch.setattr(real, "_one_run", fake_run)
    return calls


def test_torch_muon_runs_at_muons_best_pair_after_muons_grids(monkeypatch):
    top, low_half = 3 * real.BASE_LRS["text"]["muon"], real.BASE_LRS["text"]["adamw"] / 3
    calls = _fake_runs(monkeypatch, top, low_half)
    settings = toys.OptimizerToySettings(real_tasks=("text",), real_optimizers=("torch_muon", "muon"), seeds=(0, 1),
                                         lr_multipliers=(1 / 3, 1.0, 3.0), workers=1, extend_grid=0)
    torch_row, muon_row = real.run_real(settings, log=lambda line: None)
    # coordinate search: the Muon half's grid (AdamW half at its middle), the AdamW half's other two points, then
    # the follower at the best pair
    centre = real.BASE_LRS["text"]["adamw"]
    assert [c for c in calls[:6]] == [("muon", lr, centre) for lr in real.lr_grid("text", "muon", settings)
                                      for _ in (0, 1)]
    assert {c[2] for c in calls[6:10]} == {centre / 3, centre * 3} and {c[1] for c in calls[6:10]} == {top}
    assert calls[10:] == [("torch_muon", top, low_half)] * 2
    assert (muon_row["lr"], muon_row["adamw_lr"]) == (top, low_half) and muon_row["edge"]
    assert (torch_row["lr"], torch_row["adamw_lr"]) == (top, low_half)
    assert set(torch_row["brackets"].values()) == {"follows muon"}
    assert list(torch_row["grid"]) == [f"{top:g}/{low_half:g}"] and len(muon_row["grid"]) == 5


def test_product_search_runs_every_pair_of_the_two_grids(monkeypatch):
    centre, half = real.BASE_LRS["digits"]["m3"], real.BASE_LRS["digits"]["adamw"]
    calls = _fake_runs(monkeypatch, centre, half)
    settings = toys.OptimizerToySettings(real_tasks=("digits",), real_optimizers=("m3", "adamw"), seeds=(0,),
                                         lr_multipliers=(1 / 3, 1.0, 3.0), adamw_half_multipliers=(1.0, 3.0),
                                         pair_search="product", workers=1, extend_grid=0)
    m3_row, adamw_row = real.run_real(settings, log=lambda line: None)
    assert len([c for c in calls if c[0] == "m3"]) == 6 and len([c for c in calls if c[0] == "adamw"]) == 3
    assert (m3_row["lr"], m3_row["adamw_lr"]) == (centre, half) and m3_row["edge"]  # the AdamW half's low end
    # a single-lr optimiser keeps one lr: the fake loss's closest grid point to m3's centre, its grid's low end
    assert adamw_row["adamw_lr"] is None and adamw_row["lr"] == min(real.lr_grid("digits", "adamw", settings))
    assert list(adamw_row["grid"]) == [f"{lr:g}" for lr in real.lr_grid("digits", "adamw", settings)]


@pytest.mark.parametrize("key,value", [("lr_multipliers", (1.0, 0.0)), ("adamw_half_multipliers", (-1.0,)),
                                       ("lr_multipliers", (float("nan"),)), ("pair_search", "random")])
def test_run_real_rejects_bad_grids_naming_the_setting(key, value):
    settings = toys.QUICK.__class__(**{**toys.QUICK.__dict__, key: value})
    with pytest.raises(ValueError, match=key):
        real.run_real(settings, log=lambda line: None)


@pytest.mark.parametrize("task", ["digits", "text"])
def test_timing_pass_times_every_optimiser_and_leaves_the_thread_count(task):
    settings = toys.QUICK
    threads = torch.get_num_threads()
    times = real.time_steps(task, {"adamw": (1e-3, None), "muon": (1e-2, 1e-3), "dmgd": (0.1, None)}, settings)
    assert list(times) == ["adamw", "muon", "dmgd"] and all(t > 0 for t in times.values())
    assert torch.get_num_threads() == threads


def test_each_half_grows_past_the_edge_its_best_lies_at(monkeypatch):
    """The fake loss is lowest at 9x the Muon half's centre and at the AdamW half's lowest point: from grids of x1/3,
    1, 3 each half grows by x3 past the edge its best is at (the other half at its best) until it is interior."""
    centre, half = real.BASE_LRS["digits"]["m3"], real.BASE_LRS["digits"]["adamw"]
    calls = _fake_runs(monkeypatch, 9 * centre, half / 3)
    settings = toys.OptimizerToySettings(real_tasks=("digits",), real_optimizers=("m3",), seeds=(0,),
                                         lr_multipliers=(1 / 3, 1.0, 3.0), workers=1, extend_grid=4)
    (row,) = real.run_real(settings, log=lambda line: None)
    assert math.isclose(row["lr"], 9 * centre, rel_tol=1e-2) and math.isclose(row["adamw_lr"], half / 3, rel_tol=1e-2)
    assert row["brackets"] == {"lr": "interior", "adamw_lr": "interior"} and not row["edge"]
    assert any(math.isclose(c[1], 27 * centre, rel_tol=1e-2) for c in calls)  # the point past the best, worse
    assert any(c[2] is not None and math.isclose(c[2], half / 9, rel_tol=1e-2) for c in calls)


def test_an_optimiser_that_diverged_at_every_lr_has_no_choice_to_bracket():
    settings = toys.OptimizerToySettings(real_tasks=("text",), real_optimizers=("delta_momentum_eq49",), seeds=(0,))
    runs = [_run("text", "delta_momentum_eq49", lr, 0, math.inf) for lr in (1e-3, 1e-2, 1e-1)]
    (row,) = real.summarize_real(runs, settings)
    assert row["brackets"] == {"lr": "none finite"} and not row["edge"]
    assert real._extension_jobs(runs, settings, ["delta_momentum_eq49"]) == []
