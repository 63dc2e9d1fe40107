"""`regmem compare` and `regmem train` on the tiny preset: attention learns MQAR, the leaderboard holds exactly the
cells asked for, and a `train` run resumed after an interruption ends where an uninterrupted one does."""

import csv
import dataclasses
import json
import math

import matplotlib.axes
import pytest
import torch
from safetensors.torch import load_file

from regmem.lab.cli import main
from regmem.lab.experiments import positions
from regmem.lab.experiments.compare import compare, parse_sweep
from regmem.lab.experiments.presets import PRESETS, make_preset
from regmem.lab.experiments.runs import build_task
from regmem.tasks import TASKS
from regmem.train import Trainer

# tiny (d_model 16, seq_len 16, vocabulary 64) with 384 steps instead of 128: at 128 steps attention's accuracy
# on 2 pairs ranges 0.20-0.88 over seeds 0-5, at 384 steps it is >= 0.938 over seeds 0-11 (measured).
TINY_384 = dataclasses.replace(PRESETS["tiny"], steps=384, num_train=384 * 64, eval_every=38)
# Copying one of the P values of the context at random scores 1 / P (0.5 at P = 2), a model that does not mix
# tokens 1 / 32 (the values are 32 tokens): 0.85 is far above both and 0.09 below the lowest measured accuracy.
ATTN_LEARNS_MQAR = 0.85


def test_attention_learns_two_pair_mqar_and_the_leaderboard_holds_the_asked_cells(tmp_path):
    run_dir = compare("mqar", ["attn", "linear"], TINY_384, sweep="num_kv_pairs=1,2", seeds=[0], lrs=[1e-2],
                      out_dir=tmp_path, progress=False, log=lambda *_: None)
    assert {p.name for p in run_dir.iterdir()} == {"runs", "leaderboard.md", "results.csv", "results.json", "plot.png",
                                                  "sweep.json"}
    with open(run_dir / "results.csv") as file:
        rows = list(csv.DictReader(file))
    assert sorted((r["mixer"], r["setting"]) for r in rows) == [
        ("attn", "num_kv_pairs=1"), ("attn", "num_kv_pairs=2"), ("linear", "num_kv_pairs=1"),
        ("linear", "num_kv_pairs=2"),
    ]  # fmt: skip
    accuracy = {(r["mixer"], int(r["setting"].split("=")[1])): float(r["mean"]) for r in rows}
    assert accuracy["attn", 1] > ATTN_LEARNS_MQAR and accuracy["attn", 2] > ATTN_LEARNS_MQAR, accuracy

    result = json.loads((run_dir / "results.json").read_text())
    assert result["meta"]["sweep_field"] == "num_kv_pairs" and result["meta"]["preset"]["steps"] == 384
    assert all(1 <= r["steps"] <= TINY_384.steps for r in result["runs"])
    # one seed and one lr: a cell's mean is its one run's test accuracy, its validation mean the run's validation
    assert sorted((r["mixer"], r["setting"]["num_kv_pairs"], r["test_score"]) for r in result["runs"]) == sorted(
        (m, v, a) for (m, v), a in accuracy.items())
    validation = {(r["mixer"], int(r["setting"].split("=")[1])): float(r["valid_mean"]) for r in rows}
    assert sorted((r["mixer"], r["setting"]["num_kv_pairs"], r["score"]) for r in result["runs"]) == sorted(
        (m, v, a) for (m, v), a in validation.items())
    assert validation != accuracy  # two different held-out sets
    board = (run_dir / "leaderboard.md").read_text().splitlines()
    assert board[0] == ("# mqar: preset tiny (d_model 16, 1 layer(s), ffn none, 384 steps x batch 64, early stop at "
                        "accuracy 0.99)")
    cells = [line.split(" | ") for line in board[6:]]
    # one line per cell, by sweep value and then best accuracy first, with the CSV's accuracy
    expected = sorted(accuracy.items(), key=lambda item: (item[0][1], -item[1]))
    assert [(c[0].lstrip("| "), int(c[1]), c[2]) for c in cells] == [(m, v, f"{a:.3f}") for (m, v), a in expected]
    assert (run_dir / "plot.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_compare_without_sweep_draws_one_bar_per_mixer(tmp_path, monkeypatch):
    bars, draw = [], matplotlib.axes.Axes.bar

    def recording_bar(ax, x, height, **style):
        bars.append((x, height))
        return draw(ax, x, height, **style)

    monkeypatch.setattr(matplotlib.axes.Axes, "bar", recording_bar)
    main(["compare", "mqar", "--preset", "tiny", "--mixers", "linear,retnet", "--out-dir", str(tmp_path),
          "--seeds", "0", "--no-progress"])
    (run_dir,) = tmp_path.iterdir()
    result = json.loads((run_dir / "results.json").read_text())
    assert result["meta"]["sweep_field"] is None
    assert [(r["mixer"], r["setting"]) for r in result["runs"]] == [("linear", {}), ("retnet", {})]
    assert bars == [(["linear", "retnet"], [r["test_score"] for r in result["runs"]])]
    assert "| mixer | - | test accuracy |" in (run_dir / "leaderboard.md").read_text()


class Interrupted(Exception):
    pass


def _train_output(capsys) -> tuple[dict, str]:
    """(the resolved configs `regmem train` prints as JSON, its final "step N: metrics" line)."""
    out = capsys.readouterr().out.removesuffix("\n").rsplit("\n", 1)[0]  # without the last line, "wrote <dir>"
    configs, last = out.rsplit("\nstep ", 1)
    return json.loads(configs), "step " + last.strip()


def _records(out_dir) -> list[dict]:
    """metrics.jsonl without the throughput, the one field that depends on the clock."""
    records = [json.loads(line) for line in (out_dir / "metrics.jsonl").read_text().splitlines()]
    return [{key: value for key, value in r.items() if key != "tokens_per_s"} for r in records]


def test_train_command_resumed_mid_run_ends_bit_exactly_where_an_uninterrupted_run_does(tmp_path, capsys,
                                                                                        monkeypatch):
    args = ["train", "mqar", "--mixer", "gla", "--preset", "tiny", "--steps", "12", "--lr", "0.02", "--batch-size",
            "32", "--seed", "3", "--checkpoint-every", "4", "--no-progress", "--set", "num_kv_pairs=2"]
    straight, split = tmp_path / "straight", tmp_path / "split"
    main([*args, "--out-dir", str(straight)])
    configs, straight_end = _train_output(capsys)
    assert configs["task"]["num_kv_pairs"] == 2 and configs["model"]["mixer"] == "gla"
    train = configs["train"]
    assert (train["steps"], train["lr"], train["batch_size"], train["seed"]) == (12, 0.02, 32, 3)
    assert (train["checkpoint_every"], train["out_dir"]) == (4, str(straight))

    train_step = Trainer._train_step

    def killed_in_step_7(trainer, step, *rest):  # `step` counts from 0
        if step == 6:
            raise Interrupted
        return train_step(trainer, step, *rest)

    monkeypatch.setattr(Trainer, "_train_step", killed_in_step_7)
    with pytest.raises(Interrupted):  # killed in step 7, after the checkpoint of step 4 and the log of step 6
        main([*args, "--out-dir", str(split)])
    monkeypatch.undo()
    capsys.readouterr()  # the configs the interrupted run printed
    assert json.loads((split / "checkpoint" / "trainer.json").read_text())["step"] == 4
    assert _records(split)[-1]["step"] == 6  # the records of steps 5 and 6 must be dropped on resume
    main([*args, "--out-dir", str(split), "--resume"])

    assert _train_output(capsys)[1] == straight_end
    assert _records(split) == _records(straight)
    for name in ("model/model.safetensors", "checkpoint/optimizer.safetensors"):
        expected, actual = load_file(straight / name), load_file(split / name)
        assert expected.keys() == actual.keys()
        assert all(torch.equal(actual[key], expected[key]) for key in expected), name


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
    mlp = PRESETS["quick-mlp"]  # quick's size, data and budget; only the model's depth and FFN (and its lr) differ
    assert (mlp.n_layers, mlp.ffn) == (2, "swiglu") and (PRESETS["quick"].n_layers, PRESETS["quick"].ffn) == (1, "none")
    assert (mlp.mlp_lr_scale, PRESETS["quick"].mlp_lr_scale) == (1.0, 0.1)
    same = {"n_layers", "ffn", "name", "mlp_lr_scale"}
    assert {k: v for k, v in mlp.to_dict().items() if k not in same} == {
        k: v for k, v in PRESETS["quick"].to_dict().items() if k not in same}


def test_s5_takes_the_presets_shared_fields_and_runs_through_compare(tmp_path):
    task = build_task("s5", PRESETS["tiny"], {})  # the preset's seq_len; its MQAR-only fields are not S5's
    assert (task.name, task.seq_len, task.vocab_size, task.config.degree) == ("s5", 16, 120, 5)
    assert build_task("s5", PRESETS["tiny"], {"seq_len": 40, "degree": 3}).vocab_size == 6
    with pytest.raises(ValueError, match="unknown s5 fields"):
        build_task("s5", PRESETS["tiny"], {"num_kv_pairs": 4})
    short = dataclasses.replace(PRESETS["tiny"], steps=8, num_train=8 * 64, eval_every=4)
    run_dir = compare("s5", ["linear"], short, sweep="seq_len=8,16", seeds=[0], out_dir=tmp_path, progress=False,
                      log=lambda *_: None)
    result = json.loads((run_dir / "results.json").read_text())
    assert result["meta"]["task"] == "s5"
    assert [(r["mixer"], r["setting"]) for r in result["runs"]] == [
        ("linear", {"seq_len": 8}), ("linear", {"seq_len": 16})]


@pytest.mark.parametrize("preset", sorted(PRESETS))
def test_every_task_builds_and_generates_at_every_preset(preset):
    for name in TASKS:
        task = build_task(name, PRESETS[preset], {})
        inputs, targets = task.generate(2, seed=0)
        assert inputs.shape == targets.shape == (2, task.seq_len), name
        assert 0 <= int(inputs.min()) and int(inputs.max()) < task.vocab_size, name
        assert bool((targets != -100).any()), name


@pytest.mark.parametrize("lrs", [[0.01, 0.0], [-1e-3], [float("nan")], [float("inf")]],
                         ids=["zero", "neg", "nan", "inf"])
def test_lr_grid_rejects_a_non_positive_or_non_finite_lr_naming_lrs(lrs):
    from regmem.lab.experiments.compare import lr_grid
    from regmem.lab.experiments.presets import PRESETS

    with pytest.raises(ValueError, match="lrs: every learning rate must be finite and > 0"):
        lr_grid(PRESETS["quick"], lrs)


def test_eval_lengths_score_every_run_at_other_lengths(tmp_path):
    """At the training length the extra score is the run's own test score (same test sequences, same final model); a
    longer length is scored per run and tabled at each cell's best lr (mean and min-max of those runs' own scores)."""
    short = dataclasses.replace(PRESETS["tiny"], steps=8, num_train=8 * 64, eval_every=4)
    quiet = {"progress": False, "log": lambda *_: None}
    run_dir = compare("s5", ["linear"], short, sweep="degree=3", seeds=[0, 1], lrs=[0.01, 0.3],
                      run_dir=tmp_path / "runs", eval_lengths=(48, 16, 48), **quiet)
    result = json.loads((run_dir / "results.json").read_text())
    assert len(result["runs"]) == 4
    for run in result["runs"]:
        assert run["eval_lengths"] == [16, 48]  # sorted, without the repeat
        assert run["at_length"]["16"] == run["test_score"]
        assert 0.0 <= run["at_length"]["48"] <= 1.0
    best_lr = result["cells"][0]["best_lr"]
    at_48 = [r["at_length"]["48"] for r in result["runs"] if r["lr"] == best_lr]
    row = next(line for line in (run_dir / "leaderboard.md").read_text().splitlines()
               if line.startswith("| linear | degree=3 | 16 |"))
    assert row.split(" | ")[-1] == f"{sum(at_48) / 2:.3f} ({min(at_48):.3f}-{max(at_48):.3f}) |"


def test_eval_lengths_refuse_a_run_directory_scored_at_other_lengths_before_training(tmp_path):
    short = dataclasses.replace(PRESETS["tiny"], steps=4, num_train=4 * 64, eval_every=4)
    quiet = {"progress": False, "log": lambda *_: None}
    run_dir = compare("s5", ["linear"], short, seeds=[0], lrs=[0.01], run_dir=tmp_path / "runs", **quiet)
    stored = sorted((run_dir / "runs").glob("*.json"))
    with pytest.raises(ValueError, match="^eval_lengths: linear lr=0.01 seed=0 is stored"):
        compare("s5", ["linear"], short, seeds=[0], lrs=[0.01, 0.03], run_dir=run_dir, eval_lengths=(32,), **quiet)
    assert sorted((run_dir / "runs").glob("*.json")) == stored  # the new lr did not train


@pytest.mark.parametrize(("task", "lengths", "match"), [
    ("compression", (32,), "has no length split"),
    ("lang_parity", (32,), "its length split is bin"),
    ("modular_arithmetic", (32,), "32 does not build modular_arithmetic"),  # its lengths are odd
    ("s5", (0,), "positive ints"),
    ("s5", (2.5,), "positive ints"),
])
def test_bad_eval_lengths_raise_naming_them_before_training(task, lengths, match, tmp_path):
    with pytest.raises(ValueError, match=f"^eval_lengths.*{match}"):
        compare(task, ["linear"], PRESETS["tiny"], eval_lengths=lengths, out_dir=tmp_path, progress=False)
    assert not any(tmp_path.iterdir())  # nothing trained, nothing written


def test_by_position_tables_each_cells_test_curve_at_its_best_lr(tmp_path):
    """Needle task: one accuracy per needle depth, from each run's own test split; the cell's curve is the mean of
    its best lr's runs, in the JSON, the leaderboard and positions.png."""
    short = dataclasses.replace(PRESETS["tiny"], steps=8, num_train=8 * 64, eval_every=4, num_eval=20)
    run_dir = compare("niah_single", ["linear"], short, seeds=[0, 1], lrs=[0.01, 0.03], run_dir=tmp_path / "runs",
                      by_position=True, progress=False, log=lambda *_: None)
    result = json.loads((run_dir / "results.json").read_text())
    assert all(len(r["by_position"]) == len(positions.DEPTHS) for r in result["runs"])
    (cell,) = result["cells"]
    best = [r["by_position"] for r in result["runs"] if r["lr"] == cell["best_lr"]]
    assert cell["by_position"] == pytest.approx([(a + b) / 2 for a, b in zip(*best, strict=True)])
    board = (run_dir / "leaderboard.md").read_text()
    assert "by the needle's depth" in board and "| linear | - | " + " | ".join(
        f"{v:.3f}" for v in cell["by_position"]) + " |" in board
    assert (run_dir / "positions.png").read_bytes()[:4] == b"\x89PNG"


def test_position_bits_is_the_loss_of_each_span_and_text_curves_use_it():
    """Language modelling's curve is the loss by position: each span's mean cross-entropy in bits, which averages
    back (span sizes equal) to the task's bits per token."""
    from regmem.tasks.text import bits_per_byte

    g = torch.Generator().manual_seed(0)
    logits, targets = torch.randn(3, 16, 11, generator=g), torch.randint(0, 11, (3, 16), generator=g)
    spans = positions.position_bits(logits, targets, 8)
    assert sum(spans) / 8 == pytest.approx(bits_per_byte(logits, targets))
    by_hand = torch.nn.functional.cross_entropy(logits[:, 2:4].flatten(0, 1), targets[:, 2:4].flatten()) / math.log(2)
    assert spans[1] == pytest.approx(float(by_hand))
    assert positions.is_loss_curve("text") and positions.curve_metric("mqar") == "accuracy"


def test_a_model_with_a_cms_is_also_scored_with_its_cms_frozen_and_the_leaderboard_says_what_it_costs(tmp_path):
    """--by-position on a mixer with a CMS (Hope) adds the same test sequences scored with every level's in-context
    lr at 0 (positions.cms_frozen): per run, as a curve beside the trained one, and a table per seed; a mixer without
    a CMS gets neither."""
    short = dataclasses.replace(PRESETS["tiny"], steps=4, num_train=4 * 64, eval_every=2, num_eval=16,
                                task={**PRESETS["tiny"].task, "seq_len": 48, "vocab_size": 64})  # 3 level-0 chunks
    run_dir = compare("mqar", ["hope", "linear"], short, seeds=[0], lrs=[0.01], run_dir=tmp_path / "runs",
                      by_position=True, progress=False, log=lambda *_: None)
    result = json.loads((run_dir / "results.json").read_text())
    hope = [r for r in result["runs"] if r["mixer"] == "hope"]
    assert all(len(r["test_cms_frozen"]["by_position"]) == positions.POSITION_BUCKETS for r in hope)
    assert all("test_cms_frozen" not in r for r in result["runs"] if r["mixer"] == "linear")
    (run,) = hope
    assert run["test_cms_frozen"]["loss"] != run["test_metrics"]["loss"]  # the levels act
    board = (run_dir / "leaderboard.md").read_text()
    assert (f"| hope | - | 0.01 | 0 | {run['test_score']:.4f} | {run['test_cms_frozen']['accuracy']:.4f} | "
            f"{run['test_cms_frozen']['accuracy'] - run['test_score']:+.4f} | ") in board
    assert "| hope (CMS frozen) | - |" in board
    assert "| linear | - | 0.01 |" not in board.split("The CMS's in-context updates")[1]


def test_cms_frozen_switches_the_levels_off_and_restores_them():
    from regmem.models import LM, LMConfig

    torch.manual_seed(0)
    model = LM(LMConfig(vocab_size=32, d_model=16, n_layers=1, n_heads=2, mixer="hope")).eval()
    x = torch.randint(0, 32, (2, 40))
    with torch.no_grad():
        trained = model(x)
        with positions.cms_frozen(model) as has_cms:
            frozen = model(x)
        again = model(x)
        with positions.cms_frozen(LM(LMConfig(vocab_size=32, d_model=16, n_layers=1, n_heads=2, mixer="gla"))) as no:
            pass
    assert has_cms and not no
    assert torch.equal(again, trained)
    # the first chunk of 16 reads the levels before any update (round-off apart); the later tokens read updated ones,
    # which at initialisation (the normalised step at lr 1e-3) move the logits by ~1e-6
    assert (frozen - trained)[:, :16].abs().max() < 1e-7 and (frozen - trained)[:, 16:].abs().max() > 1e-6


def test_a_grid_grown_past_its_edge_is_named_in_the_leaderboard(tmp_path, monkeypatch):
    from regmem.lab.experiments import compare as compare_module

    def fake_train_run(run, preset, **_):  # validation improves with the lr: the best is always the top edge
        return {"score": run.lr, "test_score": run.lr, "parameters": 1, "state_floats": 1, "train_seconds": 0.0,
                "tokens_per_second": 1.0, "steps": 1}

    monkeypatch.setattr(compare_module, "train_run", fake_train_run)
    board = (compare("mqar", ["linear"], PRESETS["tiny"], seeds=[0], lrs=[0.01, 0.03], run_dir=tmp_path / "a",
                     progress=False, log=lambda *_: None, extend_grid=1) / "leaderboard.md").read_text()
    assert "best of the grid 0.01, 0.03 (a cell whose best lay at an edge grew its grid past it" in board
    assert "0.01: 0.010, 0.03: 0.030, 0.09: 0.090" in board
    board = (compare("mqar", ["linear"], PRESETS["tiny"], seeds=[0], lrs=[0.01, 0.03], run_dir=tmp_path / "b",
                     progress=False, log=lambda *_: None) / "leaderboard.md").read_text()
    assert "grew its grid" not in board
