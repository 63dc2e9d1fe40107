"""Run directories are never silently replaced or wrongly resumed (lab/experiments/runs.py, `check_run_dir`):

- training into a directory that holds a run is refused, unless --resume or --overwrite (which deletes the old
  run's files first); the old run is left byte for byte as it was;
- --resume compares every setting of the stored run.json with the command's and refuses any difference by name;
- a run records the machine it started on (machine.json), and a resume on another kind warns;
- without --out-dir, `regmem train` writes a fresh, named directory and prints it;
- `compare --run-dir` / `suite --run-dir` refuse a directory of another task, preset or swept field.
"""

import json
import warnings
from pathlib import Path

import pytest
import torch

from regmem.lab.cli import main
from regmem.lab.experiments.presets import PRESETS
from regmem.lab.experiments.protocol import claim_sweep_dir
from regmem.lab.experiments.runs import RUN_LOCK, Run, RunDirBusy, describe_run, machine, train_and_evaluate
from regmem.storage import RunLock

TRAIN = ["train", "mqar", "--mixer", "gla", "--preset", "tiny", "--no-progress"]


def files_of(directory: Path) -> dict[str, bytes]:
    return {str(p.relative_to(directory)): p.read_bytes() for p in sorted(directory.rglob("*")) if p.is_file()}


def refused(argv: list[str], capsys) -> str:
    """The one error line of a command that must be refused (exit 2, no traceback)."""
    with pytest.raises(SystemExit) as exit_:
        main(argv)
    err = capsys.readouterr().err
    assert exit_.value.code == 2 and "Traceback" not in err
    errors = [line for line in err.splitlines() if line.startswith("regmem: error:")]
    assert len(errors) == 1, err
    return errors[0]


@pytest.fixture(scope="module")
def old_run(tmp_path_factory) -> Path:
    """A finished 4-step run with checkpoints (--set num_kv_pairs=4)."""
    path = tmp_path_factory.mktemp("runs") / "old"
    main([*TRAIN, "--steps", "4", "--set", "num_kv_pairs=4", "--checkpoint-every", "2", "--out-dir", str(path)])
    return path


def test_training_into_a_directory_that_holds_a_run_is_refused_and_the_run_is_kept(old_run, capsys):
    before = files_of(old_run)
    line = refused([*TRAIN, "--steps", "2", "--out-dir", str(old_run)], capsys)
    assert line.startswith(f"regmem: error: argument --out-dir: {str(old_run)!r} already holds a run (metrics.jsonl, "
                           "checkpoint, model, run.json, config.toml, machine.json); continue it with --resume")
    assert files_of(old_run) == before


def test_overwrite_replaces_the_old_run_and_leaves_none_of_its_files(old_run, tmp_path, capsys):
    copy = tmp_path / "copy"
    copy.mkdir()
    for name, data in files_of(old_run).items():
        (copy / name).parent.mkdir(parents=True, exist_ok=True)
        (copy / name).write_bytes(data)
    (copy / "notes.txt").write_text("mine")  # not a run file: kept
    main([*TRAIN, "--steps", "2", "--out-dir", str(copy), "--overwrite"])
    capsys.readouterr()
    assert not (copy / "checkpoint").exists()  # the old run's checkpoint does not sit beside the new model
    records = [json.loads(line) for line in (copy / "metrics.jsonl").read_text().splitlines()]
    assert records[-1]["step"] == 2 and (copy / "notes.txt").read_text() == "mine"
    assert json.loads((copy / "run.json").read_text())["train"]["steps"] == 2


@pytest.mark.parametrize(("change", "named"), [
    ([], "task.num_kv_pairs (stored 4, given 2)"),  # resumed without the --set it was trained with
    (["--set", "num_kv_pairs=4", "--steps", "8"], "train.steps (stored 4, given 8); resume with"),
    (["--set", "num_kv_pairs=4", "--lr", "0.5"], "train.lr (stored 0.01, given 0.5)"),
    (["--set", "num_kv_pairs=4", "--seed", "1"], "train.seed (stored 0, given 1)"),
    (["--set", "num_kv_pairs=4", "--optimizer", "m3"], "train.optimizer (stored 'adamw', given 'm3')"),
], ids=["task-field", "steps", "lr", "seed", "optimizer"])
def test_resume_refuses_a_run_of_other_settings_and_names_each(old_run, change, named, capsys):
    argv = [*TRAIN, "--steps", "4", *change]  # a repeated flag: argparse keeps the last
    before = files_of(old_run)
    line = refused([*argv, "--out-dir", str(old_run), "--resume"], capsys)
    assert line.startswith(f"regmem: error: argument --resume: the run in {str(old_run)!r} differs in ")
    assert named in line
    assert files_of(old_run) == before


def test_resume_of_another_mixer_is_refused(old_run, capsys):
    line = refused(["train", "mqar", "--mixer", "attn", "--preset", "tiny", "--steps", "4", "--set", "num_kv_pairs=4",
                    "--out-dir", str(old_run), "--resume"], capsys)
    assert "model.mixer (stored 'gla', given 'attn')" in line


def test_resume_with_the_stored_settings_runs(old_run, capsys):
    main([*TRAIN, "--steps", "4", "--set", "num_kv_pairs=4", "--checkpoint-every", "2", "--out-dir", str(old_run),
          "--resume"])
    assert "step 4: " in capsys.readouterr().out


def test_a_run_records_its_machine_and_a_resume_on_another_kind_warns_and_continues(old_run, monkeypatch, capsys):
    started = json.loads((old_run / "machine.json").read_text())
    assert started == machine() and started["cpu_capability"] == torch.backends.cpu.get_cpu_capability()
    argv = [*TRAIN, "--steps", "4", "--set", "num_kv_pairs=4", "--checkpoint-every", "2", "--out-dir", str(old_run),
            "--resume"]
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        main(argv)  # the same machine: no warning
    elsewhere = {**started, "cpu_capability": "AVX512" if started["cpu_capability"] != "AVX512" else "AVX2"}
    monkeypatch.setattr("regmem.lab.experiments.runs.machine", lambda device="cpu": elsewhere)
    with pytest.warns(RuntimeWarning, match=r"started on another machine \(cpu_capability .* -> .*\); it continues"):
        main(argv)
    assert "step 4: " in capsys.readouterr().out


def test_train_without_out_dir_writes_a_fresh_named_directory_and_prints_it(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    main([*TRAIN, "--steps", "1"])
    main([*TRAIN, "--steps", "1"])
    out = capsys.readouterr().out
    made = sorted(p for p in (tmp_path / "results").iterdir())
    assert len(made) == 2 and all(p.name.startswith("train-mqar-gla-") for p in made)  # two runs, two directories
    assert all(f"run directory: {p.relative_to(tmp_path)}" in out for p in made)
    assert all((p / "model" / "model.safetensors").exists() for p in made)


def test_the_api_refuses_a_directory_that_holds_a_run(old_run):
    run = Run("mqar", "gla", seed=0, steps=2)
    with pytest.raises(ValueError, match="already holds a run"):
        train_and_evaluate(run, PRESETS["tiny"], out_dir=str(old_run), progress=False)
    with pytest.raises(ValueError, match="resume: the run in .* differs in task.num_kv_pairs"):
        train_and_evaluate(run, PRESETS["tiny"], out_dir=str(old_run), resume=True, progress=False)


def test_run_json_holds_the_resolved_run(old_run):
    stored = json.loads((old_run / "run.json").read_text())
    run = Run("mqar", "gla", seed=0, setting={"num_kv_pairs": 4}, steps=4)
    assert stored == describe_run(run, PRESETS["tiny"])
    assert stored["task"]["num_kv_pairs"] == 4 and stored["model"]["mixer"] == "gla"


def test_a_sweep_directory_of_another_task_or_preset_is_refused(tmp_path, capsys):
    run_dir = tmp_path / "sweep"
    run_dir.mkdir()
    sweep = {"command": "compare", "task": "mqar", "preset": PRESETS["tiny"].to_dict(), "sweep_field": None}
    (run_dir / "sweep.json").write_text(json.dumps(sweep))
    before = files_of(run_dir)
    line = refused(["compare", "s5", "--mixers", "attn", "--preset", "tiny", "--run-dir", str(run_dir)], capsys)
    assert line.startswith(f"regmem: error: argument --run-dir: {str(run_dir)!r} holds a sweep of other settings: "
                           "task (stored 'mqar', given 's5')")
    line = refused(["compare", "mqar", "--mixers", "attn", "--preset", "quick", "--run-dir", str(run_dir)], capsys)
    assert "preset.name (stored 'tiny', given 'quick')" in line
    line = refused(["compare", "mqar", "--mixers", "attn", "--preset", "tiny", "--sweep", "num_kv_pairs=2",
                    "--run-dir", str(run_dir)], capsys)
    assert "sweep_field (stored None, given 'num_kv_pairs')" in line
    line = refused(["suite", "--preset", "tiny", "--run-dir", str(run_dir)], capsys)
    assert "command (stored 'compare', given 'suite')" in line
    assert files_of(run_dir) == before


def test_a_run_that_fails_to_start_writes_nothing(tmp_path):
    """The model and trainer are built before the directory is touched: a bad option leaves no run.json behind."""
    with pytest.raises(ValueError, match="cuda_graphs"):
        train_and_evaluate(Run("mqar", "gla", steps=2), PRESETS["tiny"], out_dir=str(tmp_path / "run"),
                           cuda_graphs=True, progress=False)
    assert not (tmp_path / "run").exists()


def test_a_directory_another_process_trains_in_is_refused(tmp_path, capsys):
    busy = tmp_path / "busy"
    busy.mkdir()
    lock = RunLock(busy / RUN_LOCK)
    assert lock.acquire(block=False)
    try:
        with pytest.raises(RunDirBusy, match="another process is training in"):
            train_and_evaluate(Run("mqar", "gla", steps=2), PRESETS["tiny"], out_dir=str(busy), progress=False)
        line = refused([*TRAIN, "--steps", "2", "--out-dir", str(busy)], capsys)
        assert line.startswith("regmem: error: argument --out-dir: another process is training in")
    finally:
        lock.release()
    assert sorted(p.name for p in busy.iterdir()) == [RUN_LOCK]


def test_of_two_sweeps_claiming_one_new_directory_the_second_is_checked_against_the_first(tmp_path):
    first = {"command": "compare", "task": "mqar", "preset": {"name": "tiny"}, "sweep_field": None}
    claim_sweep_dir(tmp_path / "new", first)
    with pytest.raises(ValueError, match="task \\(stored 'mqar', given 's5'\\)"):
        claim_sweep_dir(tmp_path / "new", first | {"task": "s5"})
    assert json.loads((tmp_path / "new" / "sweep.json").read_text()) == first

