"""The fair protocol (src/regmem/lab/experiments/protocol.py, tuned.py, suite.py): the best learning rate is the argmax
of the mean over seeds and is recorded; finished runs are not re-run after an interruption; the tuned-lr table
round-trips; the suite writes its mixers x tasks table; the CLI on a tiny preset."""

import dataclasses
import json
import math
import platform

import pytest
import torch

from regmem.lab.cli import main
from regmem.lab.experiments.compare import compare, lr_grid
from regmem.lab.experiments.presets import PRESETS
from regmem.lab.experiments.protocol import (
    RunStore,
    bracket,
    execute,
    execute_bracketed,
    next_lr,
    run_grid,
    summarize,
    train_run,
)
from regmem.lab.experiments.runs import Run
from regmem.lab.experiments.suite import resolve_tasks, suite
from regmem.lab.experiments.tuned import best_lrs, best_lrs_by_setting, load_tuned, save_tuned, tuned_lr
from regmem.tasks import TASK_GROUPS

FAST = dataclasses.replace(PRESETS["tiny"], steps=4, num_train=64, num_eval=32, eval_every=2)


def record(task, mixer, lr, seed, score, setting=None, test=None):
    return {"task": task, "mixer": mixer, "lr": lr, "seed": seed, "setting": setting or {}, "score": score,
            "test_score": score if test is None else test, "parameters": 10, "state_floats": 4, "train_seconds": 1.0,
            "tokens_per_second": 5.0}


def test_best_lr_is_the_argmax_of_the_mean_over_seeds_and_its_spread_is_reported():
    scores = {(1e-3, 0): 0.9, (1e-3, 1): 0.1,  # mean 0.5, but the best single run
              (1e-2, 0): 0.6, (1e-2, 1): 0.7,  # mean 0.65: the best mean
              (3e-2, 0): 0.0, (3e-2, 1): 0.2}
    (cell,) = summarize([record("mqar", "gla", lr, seed, s) for (lr, seed), s in scores.items()])
    assert cell.best_lr == 1e-2 and cell.mean == pytest.approx(0.65) and (cell.low, cell.high) == (0.6, 0.7)
    assert cell.seeds == 2 and cell.lr_means == pytest.approx({1e-3: 0.5, 1e-2: 0.65, 3e-2: 0.1})
    assert cell.metric == "accuracy"


def test_the_lr_is_chosen_on_validation_and_the_test_score_at_it_is_reported():
    """Test scores that favour another lr change nothing of the choice; what is reported is the test score at the
    validation's choice, with its spread, and the validation mean beside it."""
    validation = {(1e-3, 0): 0.5, (1e-3, 1): 0.5, (1e-2, 0): 0.8, (1e-2, 1): 0.6}
    test = {(1e-3, 0): 0.99, (1e-3, 1): 0.97, (1e-2, 0): 0.3, (1e-2, 1): 0.2}
    (cell,) = summarize([record("mqar", "gla", lr, seed, validation[lr, seed], test=test[lr, seed])
                         for lr, seed in validation])
    assert cell.best_lr == 1e-2 and cell.valid_mean == pytest.approx(0.7)
    assert cell.mean == pytest.approx(0.25) and (cell.low, cell.high) == (0.2, 0.3)
    assert cell.lr_means == pytest.approx({1e-3: 0.5, 1e-2: 0.7})  # the grid's validation means
    for r in [record("mqar", "gla", lr, seed, validation[lr, seed], test=-1.0) for lr, seed in validation]:
        assert summarize([r])[0].best_lr == r["lr"]  # no test score enters the choice


def test_a_train_function_without_a_test_score_is_refused(tmp_path):
    with pytest.raises(ValueError, match="has no test_score"):
        execute([Run("mqar", "linear", 1e-2, 0)], FAST, RunStore(tmp_path, FAST), progress=False, log=lambda *_: None,
                train=lambda run, preset: {"score": 0.5})
    assert not list(tmp_path.glob("runs/*.json"))


def test_a_stored_run_without_a_test_score_is_trained_again(tmp_path):
    run = Run("mqar", "linear", 1e-2, 0)
    store = RunStore(tmp_path, FAST)
    store.save(run, {"score": 0.5})  # stored before runs were scored on a test split
    assert store.load(run) is None
    store.save(run, {"score": 0.5, "test_score": 0.4})
    assert store.load(run)["test_score"] == 0.4


def test_bits_per_byte_is_minimised_and_ties_go_to_the_smaller_lr():
    (text,) = summarize([record("text", "attn", lr, 0, s) for lr, s in [(1e-3, 3.0), (1e-2, 2.5), (3e-2, 2.8)]])
    assert text.metric == "bits_per_byte" and text.best_lr == 1e-2 and text.mean == 2.5
    (tie,) = summarize([record("mqar", "attn", lr, 0, 1.0) for lr in (3e-2, 1e-2)])
    assert tie.best_lr == 1e-2


def test_cells_are_grouped_by_task_mixer_and_setting():
    records = [record("mqar", m, 1e-2, seed, 0.5, {"num_kv_pairs": p}) for m in ("a", "b") for p in (4, 8)
               for seed in (0, 1)]
    cells = summarize(records)
    assert sorted((c.mixer, c.setting["num_kv_pairs"], c.seeds) for c in cells) == [
        ("a", 4, 2), ("a", 8, 2), ("b", 4, 2), ("b", 8, 2)]


class Interrupted(Exception):
    pass


def test_an_interrupted_execution_resumes_without_re_running_finished_runs(tmp_path):
    runs = run_grid(["mqar"], ["linear", "attn"], [{}], [1e-2, 3e-2], [0, 1])
    assert len(runs) == 8
    trained = []

    def fake_train(run, preset, fail_at=None):
        if len(trained) == fail_at:
            raise Interrupted
        trained.append(run)
        return {"score": run.lr * 10 + run.seed, "test_score": 0.0, "parameters": 1, "state_floats": 1,
                "train_seconds": 0.1, "tokens_per_second": 1.0, "steps": 1}

    store = RunStore(tmp_path, FAST)
    with pytest.raises(Interrupted):
        execute(runs, FAST, store, progress=False, log=lambda *_: None,
                train=lambda s, p: fake_train(s, p, fail_at=3))
    assert trained == runs[:3] and len(list(store.dir.glob("*.json"))) == 3
    logs = []
    records = execute(runs, FAST, store, progress=False, log=logs.append, train=fake_train)
    assert trained == runs  # the first three were not trained again
    assert "3 of 8 runs already finished" in logs[0]
    assert [(r["mixer"], r["lr"], r["seed"], r["score"]) for r in records] == [
        (s.mixer, s.lr, s.seed, s.lr * 10 + s.seed) for s in runs]
    assert not list(store.dir.glob("*.tmp"))


def test_a_trained_run_records_the_machine_its_floats_came_from():
    result = train_run(Run("mqar", "linear", 1e-2, 0), FAST)
    assert result["machine"] == {"torch": torch.__version__, "arch": platform.machine(),
                                 "cpu_capability": torch.backends.cpu.get_cpu_capability(),
                                 "threads": torch.get_num_threads()}
    assert math.isfinite(result["test_score"])


def test_a_run_key_changes_with_anything_that_fixes_the_run():
    run = Run("mqar", "attn", 1e-2, 0)
    keys = {run.key(FAST), dataclasses.replace(run, lr=3e-2).key(FAST), dataclasses.replace(run, seed=1).key(FAST),
            Run("mqar", "attn", 1e-2, 0, {"num_kv_pairs": 2}).key(FAST),
            run.key(dataclasses.replace(FAST, steps=5)),
            run.key(dataclasses.replace(FAST, task_points={**FAST.task_points, "mqar": {"seq_len": 8}})),
            dataclasses.replace(run, steps=5).key(FAST), dataclasses.replace(run, batch_size=8).key(FAST),
            dataclasses.replace(run, optimizer="muon").key(FAST),
            run.key(dataclasses.replace(FAST, mixer_kwargs={**FAST.mixer_kwargs, "attn": {"short_conv": 2}}))}
    assert len(keys) == 10 and run.key(FAST) == Run("mqar", "attn", 1e-2, 0).key(FAST)
    other_task = dataclasses.replace(FAST, task_points={**FAST.task_points, "parity": {"seq_len": 8}})
    assert run.key(other_task) == run.key(FAST)  # another task's point does not change an mqar run
    other_mixer = dataclasses.replace(FAST, mixer_kwargs={**FAST.mixer_kwargs, "moba": {"block_size": 4}})
    assert run.key(other_mixer) == run.key(FAST)  # nor another mixer's options


def test_tuned_table_round_trips_and_feeds_the_default_grid(tmp_path, monkeypatch):
    path = tmp_path / "tuned.json"
    cells = summarize([record("mqar", "gla", lr, 0, s) for lr, s in [(1e-2, 0.2), (3e-2, 0.4)]]
                      + [record("s5", "attn", lr, 0, s) for lr, s in [(1e-2, 0.9), (3e-2, 0.1)]])
    assert best_lrs(cells) == {"mqar": {"gla": 3e-2}, "s5": {"attn": 1e-2}}
    save_tuned("quick", best_lrs(cells), source="benchmarks/results/x", path=path)
    save_tuned("quick", {"mqar": {"attn": 3e-3}}, source="benchmarks/results/y", path=path)
    data = load_tuned(path)
    assert data["quick"]["sources"] == ["benchmarks/results/x", "benchmarks/results/y"]
    assert tuned_lr("quick", "mqar", "gla", path) == 3e-2 and tuned_lr("quick", "mqar", "attn", path) == 3e-3
    assert tuned_lr("quick", "mqar", "linear", path) is None and tuned_lr("tiny", "mqar", "gla", path) is None
    monkeypatch.setattr("regmem.lab.experiments.compare.tuned_lr",
                        lambda p, t, m, setting=None: tuned_lr(p, t, m, path, setting=setting))
    quick = PRESETS["quick"]
    assert lr_grid(quick, None)("mqar", "gla") == [3e-2]  # tuned
    assert lr_grid(quick, None)("mqar", "linear") == [quick.lr]  # not tuned: the preset's
    assert lr_grid(quick, [1e-3, 1e-2])("mqar", "gla") == [1e-3, 1e-2]  # a grid overrides
    # a setting tuned on its own is read first; another setting falls back to the task's point
    at_16 = summarize([record("mqar", "gla", lr, 0, s, {"num_kv_pairs": 16}) for lr, s in [(1e-2, 0.5), (3e-2, 0.1)]])
    assert best_lrs_by_setting(at_16) == {"mqar num_kv_pairs=16": {"gla": 1e-2}}
    save_tuned("quick", best_lrs_by_setting(at_16), source="benchmarks/results/z", path=path)
    assert lr_grid(quick, None, {"num_kv_pairs": 16})("mqar", "gla") == [1e-2]
    assert lr_grid(quick, None, {"num_kv_pairs": 4})("mqar", "gla") == [3e-2]
    assert lr_grid(quick, None, {"num_kv_pairs": 16})("mqar", "attn") == [3e-3]


def test_groups_expand_in_place_and_unknown_names_are_refused():
    assert resolve_tasks(["mqar", "state_tracking", "mqar"]) == ["mqar", *TASK_GROUPS["state_tracking"]]
    with pytest.raises(ValueError, match="unknown 'nope'"):
        resolve_tasks(["nope"])


def test_suite_writes_the_mixers_by_tasks_table_and_resumes(tmp_path):
    kwargs = dict(seeds=[0, 1], lrs=[1e-2, 3e-2], run_dir=tmp_path / "suite", progress=False)
    logs = []
    run_dir = suite(["mqar", "parity"], ["linear", "attn"], FAST, log=logs.append, **kwargs)
    assert {p.name for p in run_dir.iterdir()} == {"runs", "leaderboard.md", "results.csv", "results.json",
                                                     "heatmap.png", "sweep.json"}
    result = json.loads((run_dir / "results.json").read_text())
    assert len(result["runs"]) == 16 and len(result["cells"]) == 4
    for cell in result["cells"]:
        runs = [r for r in result["runs"] if (r["task"], r["mixer"]) == (cell["task"], cell["mixer"])]
        means = {lr: sum(r["score"] for r in runs if r["lr"] == lr) / 2 for lr in (1e-2, 3e-2)}
        assert cell["best_lr"] == max(means, key=lambda lr: (means[lr], -lr))
    board = (run_dir / "leaderboard.md").read_text()
    assert "| mixer | mqar | parity | mean accuracy |" in board and "## parity" in board
    assert (run_dir / "heatmap.png").read_bytes()[:4] == b"\x89PNG"
    again = []
    suite(["mqar", "parity"], ["linear", "attn"], FAST, log=again.append, **kwargs)
    assert "16 of 16 runs already finished" in again[1]
    assert json.loads((run_dir / "results.json").read_text())["cells"] == result["cells"]


def test_suite_reuses_runs_of_other_directories_read_only(tmp_path):
    kwargs = dict(seeds=[0], lrs=[1e-2], progress=False, log=lambda *_: None)
    suite(["mqar"], ["linear"], FAST, run_dir=tmp_path / "mqar", **kwargs)
    suite(["parity"], ["linear"], FAST, run_dir=tmp_path / "parity", **kwargs)
    logs = []
    joint = suite(["mqar", "parity"], ["linear"], FAST, run_dir=tmp_path / "joint", log=logs.append,
                  reuse=[tmp_path / "mqar", tmp_path / "parity"], **{k: v for k, v in kwargs.items() if k != "log"})
    assert "2 of 2 runs already finished" in logs[1]
    assert not list(joint.glob("runs/*"))  # nothing trained, nothing copied
    cells = {c["task"]: c["mean"] for c in json.loads((joint / "results.json").read_text())["cells"]}
    alone = {t: json.loads((tmp_path / t / "results.json").read_text())["cells"][0]["mean"] for t in cells}
    assert cells == alone
    with pytest.raises(ValueError, match="reuse: no runs/ directory"):
        RunStore(tmp_path / "x", FAST, reuse=[tmp_path / "absent"])


def test_compare_reports_the_best_lrs_mean_and_spread(tmp_path):
    run_dir = compare("mqar", ["linear"], FAST, sweep="num_kv_pairs=1,2", seeds=[0, 1], lrs=[1e-2, 3e-2],
                      out_dir=tmp_path, progress=False, log=lambda *_: None)
    result = json.loads((run_dir / "results.json").read_text())
    assert len(result["runs"]) == 8 and result["meta"]["learning_rates"] == "best of the grid 0.01, 0.03"
    board = (run_dir / "leaderboard.md").read_text().splitlines()
    assert board[4].startswith("| mixer | num_kv_pairs | test accuracy | min-max | validation | best lr |")
    for cell, line in zip(sorted(result["cells"], key=lambda c: c["setting"]["num_kv_pairs"]), board[6:], strict=True):
        assert (f"| {cell['mean']:.3f} | {cell['low']:.3f}-{cell['high']:.3f} | {cell['valid_mean']:.3f} | "
                f"{cell['best_lr']:g} |") in line


def test_cli_suite_and_compare_smoke_on_a_tiny_preset(tmp_path, monkeypatch, capsys):
    monkeypatch.setitem(PRESETS, "fast", dataclasses.replace(FAST, name="fast"))
    main(["suite", "--tasks", "mqar", "--mixers", "linear", "--preset", "fast", "--seeds", "0",
          "--run-dir", str(tmp_path / "s"), "--no-progress"])
    assert "| linear |" in capsys.readouterr().out
    with pytest.raises(SystemExit) as exit_:
        main(["compare", "mqar", "--preset", "fast", "--lrs", "0.01", "--sweep-lr"])
    assert exit_.value.code == 2 and "argument --sweep-lr: not allowed with argument --lrs" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exit_:
        main(["suite", "--tasks", "nope", "--preset", "fast"])
    assert exit_.value.code == 2 and "argument --tasks: unknown 'nope'" in capsys.readouterr().err
def test_the_committed_tuned_table_names_its_sweep_and_holds_grid_values():
    data = load_tuned()
    assert "quick" in data, "src/regmem/lab/experiments/tuned_lr.json has no quick entry"
    assert data["quick"]["sources"] and all(s.startswith("benchmarks/results/") for s in data["quick"]["sources"])
    lrs = {lr for task in data["quick"]["tasks"].values() for lr in task.values()}
    assert lrs and all(lr > 0 for lr in lrs)




def test_runs_in_worker_processes_give_the_records_of_one_process(tmp_path):
    """Each worker trains with one torch thread, as the serial path does here: the same numbers, in run order."""
    runs = run_grid(["mqar"], ["linear"], [{}], [1e-2], [0, 1])
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        serial = execute(runs, FAST, RunStore(tmp_path / "serial", FAST), progress=False, log=lambda *_: None)
    finally:
        torch.set_num_threads(threads)
    parallel = execute(runs, FAST, RunStore(tmp_path / "parallel", FAST), progress=False, log=lambda *_: None,
                       workers=2)
    assert [r["seed"] for r in parallel] == [0, 1]
    for a, b in zip(serial, parallel, strict=True):
        assert a["score"] == b["score"] and a["metrics"] == b["metrics"]


def test_bracket_and_the_next_point_past_an_edge():
    assert bracket([0.01], 0.01) == "single"
    assert bracket([0.01, 0.03, 0.1], 0.03) == "interior"
    assert bracket([0.01, 0.03, 0.1], 0.01) == "low edge" and bracket([0.01, 0.03, 0.1], 0.1) == "high edge"
    assert next_lr([0.01, 0.03, 0.1], "high edge") == 0.333 and next_lr([0.01, 0.03, 0.1], "low edge") == 0.00333
    assert bracket([0.01, 0.03, 0.1], 0.01, {0.01: 1.0, 0.03: 1.0, 0.1: 0.9}) == "interior"  # a plateau
    assert bracket([0.01, 0.03, 0.1], 0.01, {0.01: 1.0, 0.03: 0.9, 0.1: 1.0}) == "low edge"
    (cell,) = summarize([record("mqar", "gla", lr, 0, s) for lr, s in [(1e-2, 0.2), (3e-2, 0.4), (1e-1, 0.3)]])
    assert cell.grid == [1e-2, 3e-2, 1e-1] and cell.bracket == "interior"


def test_a_grid_is_extended_past_the_edge_until_it_brackets(tmp_path):
    """A made-up score that peaks at lr 0.3: the grid 0.01, 0.03 grows by its own ratio (x3) to 0.09, 0.27, 0.81,
    where 0.27 is interior; a cell that peaks inside the grid trains nothing more."""
    trained = []

    def fake_train(run, preset):
        trained.append((run.mixer, run.lr, run.seed))
        peak = 0.3 if run.mixer == "linear" else 0.02
        score = 1.0 - abs(math.log(run.lr / peak))
        return {"score": score, "test_score": score, "parameters": 1, "state_floats": 1, "train_seconds": 0.0,
                "tokens_per_second": 1.0, "steps": 1}

    runs = run_grid(["mqar"], ["linear", "attn"], [{}], [0.01, 0.03], [0, 1])
    runs += [dataclasses.replace(r, lr=0.02) for r in runs if r.mixer == "attn" and r.lr == 0.01]
    records = execute_bracketed(runs, FAST, RunStore(tmp_path, FAST), extend=5, train=fake_train, progress=False,
                                log=lambda *_: None)
    cells = {c.mixer: c for c in summarize(records)}
    assert cells["linear"].grid == [0.01, 0.03, 0.09, 0.27, 0.81] and cells["linear"].best_lr == 0.27
    assert cells["linear"].bracket == "interior" and cells["attn"].bracket == "interior"
    assert sorted({lr for mixer, lr, _ in trained if mixer == "attn"}) == [0.01, 0.02, 0.03]
    assert sorted(seed for mixer, lr, seed in trained if lr == 0.81) == [0, 1]
    limited = execute_bracketed(runs, FAST, RunStore(tmp_path / "one", FAST), extend=1, train=fake_train,
                                progress=False, log=lambda *_: None)
    assert {c.mixer: c.bracket for c in summarize(limited)}["linear"] == "high edge"  # 0.09: one point was allowed
