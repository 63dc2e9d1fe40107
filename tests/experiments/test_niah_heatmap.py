"""NIAH heat maps (src/regmem/lab/experiments/niah_maps.py): the grid of a model over lengths x depths is the task's
metric cell by cell, the heat map is written, and `run_niah` trains, scores and writes its report on a tiny preset."""

import dataclasses
import json

import pytest
import torch

import regmem.tasks
from regmem.lab.experiments.niah_maps import niah_grid, plot_niah, run_niah
from regmem.lab.experiments.presets import PRESETS
from regmem.models import LM, LMConfig
from regmem.tasks.niah import NEEDLE, MultikeyNIAH, NIAHConfig, SingleNIAH

PNG = b"\x89PNG\r\n\x1a\n"
SMALL = {"seq_len": 24, "key_len": 1, "value_len": 1, "num_key_tokens": 4, "num_value_tokens": 4,
         "num_filler_tokens": 4}


def tiny_lm(vocab_size: int) -> LM:
    torch.manual_seed(0)
    return LM(LMConfig(vocab_size=vocab_size, d_model=16, n_layers=1, n_heads=1, mixer="attn", ffn="none"))


def test_grid_has_one_cell_per_length_and_depth_and_each_is_the_tasks_metric():
    task = MultikeyNIAH(dataclasses.replace(MultikeyNIAH().config, seq_len=48, num_needles=2))
    model = tiny_lm(task.vocab_size)
    lengths, depths = [48, 64, 96], [0.0, 0.5, 1.0]
    grid = niah_grid(model, task, lengths, depths, num_examples=20, seed=3, batch_size=8)  # batches 8, 8, 4
    assert grid.shape == (3, 3) and grid.dtype == torch.float64
    assert ((grid >= 0) & (grid <= 1)).all()
    assert model.training, "the model's mode is restored"
    inputs, targets = task.with_seq_len(64).with_depth(1.0).generate(20, seed=3)
    model.eval()
    with torch.no_grad():
        direct = task.metric(model(inputs), targets)
    assert grid[1, 2].item() == pytest.approx(direct["accuracy"], abs=1e-12)
    exact = niah_grid(model, task, [64], [1.0], num_examples=20, seed=3, metric="exact_match")
    assert exact.item() == pytest.approx(direct["exact_match"], abs=1e-12)


def test_grid_of_a_model_that_reads_the_answer_is_one():
    class Oracle(torch.nn.Module):
        """Reads the needle `NEEDLE key IS value` (value_len 1) and predicts its value at the last position."""

        def __init__(self, vocab_size: int):
            super().__init__()
            self.unused = torch.nn.Parameter(torch.zeros(()))  # niah_grid reads the device of a parameter
            self.vocab_size = vocab_size

        def forward(self, inputs):
            logits = torch.zeros(*inputs.shape, self.vocab_size)  # [N, T, V]
            needle_at = (inputs == NEEDLE).long().argmax(dim=1, keepdim=True)  # [N, 1], the only marker
            logits[:, -1].scatter_(1, inputs.gather(1, needle_at + 3), 1.0)
            return logits

    task = SingleNIAH(NIAHConfig(**SMALL))
    grid = niah_grid(Oracle(task.vocab_size), task, [24, 48], [0.0, 0.3, 1.0], num_examples=10, seed=0)
    assert torch.equal(grid, torch.ones(2, 3))


def test_plot_writes_a_png_with_one_panel_per_mixer(tmp_path):
    grids = {"attn": torch.rand(3, 5), "linear": torch.rand(3, 5)}
    plot_niah(tmp_path / "niah.png", grids, [64, 128, 256], [0.0, 0.25, 0.5, 0.75, 1.0], "niah_single")
    assert (tmp_path / "niah.png").read_bytes()[:8] == PNG


def test_run_niah_trains_scores_and_writes_the_report_at_each_mixers_best_lr(tmp_path, monkeypatch):
    monkeypatch.setitem(regmem.tasks.TASKS, "niah_single", SingleNIAH)
    preset = dataclasses.replace(PRESETS["tiny"], steps=4, num_train=64, num_eval=16, eval_every=2,
                                 task_points={"niah_single": SMALL})
    lines = []
    kwargs = {"train_len": 24, "multiples": (1, 2), "depths": (0.0, 0.5, 1.0), "lrs": (1e-3, 1e-2), "seeds": (0, 1),
              "num_examples": 16, "out_dir": tmp_path, "progress": False}
    run_dir = run_niah("niah_single", ["attn", "linear"], preset, log=lines.append, **kwargs)
    assert run_dir == tmp_path / "niah_single"
    assert {p.name for p in run_dir.iterdir()} == {"niah.md", "niah.json", "niah.png", "runs"}
    result = json.loads((run_dir / "niah.json").read_text())
    assert result["meta"]["lengths"] == [24, 48] and result["meta"]["depths"] == [0.0, 0.5, 1.0]
    assert result["meta"]["task_config"]["seq_len"] == 24 and result["meta"]["task_config"]["key_len"] == 1
    assert len(result["runs"]) == 8  # 2 mixers x 2 lrs x 2 seeds, each with its own grid
    for mixer in ("attn", "linear"):
        cell = result["cells"][mixer]
        lr_means = {float(lr): m for lr, m in cell["lr_means"].items()}
        assert cell["best_lr"] == max(lr_means, key=lambda lr: (lr_means[lr], -lr))
        best = [r for r in result["runs"] if r["mixer"] == mixer and r["lr"] == cell["best_lr"]]
        assert [r["seed"] for r in best] == [0, 1] and all(r["steps"] == 4 for r in best)
        expected = torch.tensor([r["grid"] for r in best], dtype=torch.float64).mean(0)
        assert torch.allclose(torch.tensor(result["grids"][mixer], dtype=torch.float64), expected, atol=1e-12)
    report = (run_dir / "niah.md").read_text().splitlines()
    assert report[0].startswith("# niah_single: trained at 24, preset tiny")
    attn = report.index("## attn")
    assert report[attn + 2].startswith(f"lr {result['cells']['attn']['best_lr']:g} (best of 0.001, 0.01")
    assert report[attn + 4] == "| depth \\ length | 24 | 48 |"
    first = torch.tensor(result["grids"]["attn"])[:, 0]
    assert report[attn + 6] == f"| 0% | {first[0]:.3f} | {first[1]:.3f} |"
    seeds = torch.tensor([r["grid"] for r in result["runs"]
                          if r["mixer"] == "attn" and r["lr"] == result["cells"]["attn"]["best_lr"]]).mean(2)
    assert report[attn + 10] == (f"| min-max over seeds | {seeds[:, 0].min():.3f}-{seeds[:, 0].max():.3f} | "
                                 f"{seeds[:, 1].min():.3f}-{seeds[:, 1].max():.3f} |")
    assert any("niah_single attn" in line for line in lines) and lines[-1] == f"wrote {run_dir}"
    assert (run_dir / "niah.png").read_bytes()[:8] == PNG

    again = []  # repeated: every run is stored, nothing trains again
    run_niah("niah_single", ["attn", "linear"], preset, log=again.append, **kwargs)
    assert any("8 of 8 runs already finished" in line for line in again)
    with pytest.raises(ValueError, match="scored at lengths"):  # stored runs on another grid are not mixed in
        run_niah("niah_single", ["attn", "linear"], preset, log=again.append, **{**kwargs, "multiples": (1, 3)})
