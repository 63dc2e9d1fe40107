"""`regmem repro am-heads` (arXiv:2505.19488, Fig. 2): the quick run writes its report, JSON and plot, with the
paper's claim beside a measured table of every (task, kernel, n_heads) cell; the verdict follows the paper's
direction per kernel; n_heads reaches the model of every run."""

import dataclasses
import json

import pytest

from regmem.lab.experiments.repro import REPROS, run_repro
from regmem.lab.experiments.repro.am_heads import QUICK, run, task_preset, verdict


def test_quick_am_heads_prints_the_claim_beside_every_cell(tmp_path):
    assert "am-heads" in REPROS
    lines = []
    paths = run_repro("am-heads", tmp_path, variant="quick", log=lines.append)
    assert {p.name for p in paths.values()} == {"am-heads.md", "am-heads.json", "am-heads.png"}
    report = paths["report"].read_text()
    assert report.startswith("Paper (Fig. 2, Sec. 3.1") and report.strip() in "\n".join(lines)
    result = json.loads(paths["json"].read_text())
    assert {(c["task"], c["mixer"], c["setting"]["n_heads"]) for c in result["cells"]} == {
        (t, k, h) for t in ("mqar", "text") for k in ("attn", "linear") for h in (1, 2)}
    for cell in result["cells"]:
        assert cell["seeds"] == 2 and f"{cell['mean']:.3f} ({cell['low']:.3f}-{cell['high']:.3f})" in report
    assert {c["metric"] for c in result["cells"] if c["task"] == "text"} == {"bits_per_byte"}
    assert "| N / d_k (linear SNR^-1 estimate) | 0.25 | 0.50 |" in report  # 2 pairs, d_model 8, 1 and 2 heads
    assert report.count("- text, linear: paper improves significantly at 1 head. Ours: 1 head is") == 1
    assert paths["plot"].read_bytes()[:4] == b"\x89PNG"


def test_each_run_trains_the_head_count_of_its_setting(tmp_path, monkeypatch):
    seen = []

    def fake_train_run(spec, preset):
        seen.append((spec.setting, preset.n_heads))
        return {"score": 0.5, "test_score": 0.5, "parameters": 1, "state_floats": 1, "train_seconds": 0.0,
                "tokens_per_second": 1.0}

    monkeypatch.setattr("regmem.lab.experiments.repro.am_heads.train_run", fake_train_run)
    settings = dataclasses.replace(QUICK, tasks=("mqar",), kernels=("linear",), head_counts=(1, 4), seeds=(0,))
    run(settings, tmp_path, progress=False, log=lambda *_: None)
    assert sorted(seen, key=lambda s: s[1]) == [({}, 1), ({}, 4)]  # n_heads leaves the task fields


def test_verdict_follows_the_papers_direction_per_kernel():
    assert verdict("linear", {"gain": 0.1, "apart": True}) == "Reproduces (beyond the seed spread)"
    assert verdict("linear", {"gain": 0.1, "apart": False}) == "Same direction, within the seed spread"
    assert verdict("attn", {"gain": 0.1, "apart": True}).startswith("Does not reproduce")
    assert verdict("attn", {"gain": -0.1, "apart": True}) == "Reproduces (beyond the seed spread)"
    assert verdict("linear", {"gain": 0.0, "apart": False}) == "Does not reproduce (no difference)"


def test_a_head_count_that_does_not_divide_d_model_raises(tmp_path):
    with pytest.raises(ValueError, match="head_counts"):
        run(dataclasses.replace(QUICK, head_counts=(3,)), tmp_path, log=lambda *_: None)
    with pytest.raises(ValueError, match="tasks"):
        task_preset(QUICK, "s5")
