"""`regmem compare` and `regmem train` on the tiny preset: they finish fast and write what they promise."""

import csv
import json
import time

import pytest

from regmem.cli import main
from regmem.experiments.compare import parse_sweep
from regmem.experiments.presets import PRESETS, make_preset
from regmem.experiments.runs import build_task


def test_compare_on_the_tiny_preset_writes_all_four_outputs_in_under_a_minute(tmp_path):
    start = time.perf_counter()
    main(["compare", "mqar", "--preset", "tiny", "--mixers", "attn,gla,mamba2", "--sweep", "num_kv_pairs=1,2",
          "--out-dir", str(tmp_path), "--no-progress"])
    assert time.perf_counter() - start < 60
    (run_dir,) = tmp_path.iterdir()
    assert run_dir.name.startswith("mqar-")
    assert {p.name for p in run_dir.iterdir()} == {"leaderboard.md", "results.csv", "results.json", "plot.png"}
    rows = list(csv.DictReader(open(run_dir / "results.csv")))
    assert {(r["mixer"], r["sweep_value"]) for r in rows} == {(m, v) for m in ("attn", "gla", "mamba2")
                                                              for v in ("1", "2")}
    for r in rows:
        assert 0.0 <= float(r["accuracy"]) <= 1.0 and int(r["parameters"]) > 0 and int(r["state_floats"]) > 0
    result = json.loads((run_dir / "results.json").read_text())
    assert result["meta"]["sweep_field"] == "num_kv_pairs" and len(result["results"]) == 6
    board = (run_dir / "leaderboard.md").read_text()
    assert "| mixer | num_kv_pairs | accuracy | parameters | state floats | train s | tokens/s |" in board
    assert (run_dir / "plot.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_compare_without_sweep_draws_a_bar_chart(tmp_path):
    main(["compare", "mqar", "--preset", "tiny", "--mixers", "linear,retnet", "--out-dir", str(tmp_path),
          "--no-progress"])
    (run_dir,) = tmp_path.iterdir()
    assert (run_dir / "plot.png").stat().st_size > 1000
    assert len(json.loads((run_dir / "results.json").read_text())["results"]) == 2


def test_train_command_checkpoints_resumes_and_saves_the_model(tmp_path, capsys):
    out = tmp_path / "run"
    args = ["train", "mqar", "--mixer", "gla", "--preset", "tiny", "--steps", "12", "--out-dir", str(out),
            "--checkpoint-every", "6", "--no-progress", "--set", "num_kv_pairs=2"]
    main(args)
    assert (out / "checkpoint" / "model.safetensors").exists() and (out / "model" / "config.json").exists()
    main([*args, "--resume"])
    assert "step 12" in capsys.readouterr().out


def test_sweep_parsing_and_bad_fields():
    assert parse_sweep("num_kv_pairs=4,8,16") == ("num_kv_pairs", [4, 8, 16])
    assert parse_sweep("power-a=0.01,0.1") == ("power_a", [0.01, 0.1])
    assert parse_sweep(None) == (None, [None])
    with pytest.raises(ValueError, match="FIELD"):
        parse_sweep("num_kv_pairs")
    with pytest.raises(ValueError, match="unknown mqar fields"):
        build_task("mqar", PRESETS["tiny"], {"num_pairs": 3})


def test_presets_derive_from_d_model():
    quick = make_preset("x", 64)
    assert (quick.n_heads, quick.task["seq_len"], quick.task["vocab_size"], quick.steps) == (4, 64, 256, 512)
    assert make_preset("y", 128).steps == 2 * quick.steps
