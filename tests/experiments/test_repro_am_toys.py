"""`regmem repro am-swap` and `am-dag` (arXiv:2505.19488, Figs. 4, 6, 7, 8): the quick runs write report, JSON and
plot with every arm at its best lr; Listing 2's schedule; the curriculum arm doubles its length when a batch is
solved; the hand-set reachability layer is exact on the evaluation sequences (on the graph structure with several
parents per node), and every am-dag arm has the short convolution."""

import json

import pytest

from regmem.experiments.repro import REPROS, run_repro
from regmem.experiments.repro.am_dag import DAGSettings, handset_accuracy
from regmem.experiments.repro.am_toys import ToyBudget, arm, linear_schedule, toy_preset, train_toy
from regmem.experiments.runs import Run


def test_quick_am_swap_reports_every_figure_and_arm(tmp_path):
    assert {"am-swap", "am-dag"} <= set(REPROS)
    lines = []
    paths = run_repro("am-swap", tmp_path, variant="quick", log=lines.append)
    assert {p.name for p in paths.values()} == {"am-swap.md", "am-swap.json", "am-swap.png"}
    report = paths["report"].read_text()
    assert report.strip() in "\n".join(lines)
    result = json.loads(paths["json"].read_text())
    assert set(result["figures"]) == {"4", "6", "8"}
    arms = [r["arm"] for r in result["figures"]["4"]]
    assert arms[:2] == ["Transformer, 1 layer", "Transformer, 2 layers"] and len(arms) == 9
    for figure, rows in result["figures"].items():
        assert f"Paper, Fig. {figure}" in report
        for row in rows:
            assert f"| {row['arm']} | {row['best_lr']:g} |" in report
    assert paths["plot"].read_bytes()[:4] == b"\x89PNG"


def test_quick_am_dag_reports_the_handset_row_at_100(tmp_path):
    paths = run_repro("am-dag", tmp_path, variant="quick", log=lambda _: None)
    result = json.loads(paths["json"].read_text())
    assert result["handset"] == [1.0]
    report = paths["report"].read_text()
    assert "| hand-set 1-layer DeltaFormer (weights set by hand, linear kernels, short conv 2, on the task's tokens)" \
        in report and "a short convolution of width 2 on every mixer" in report
    assert [r["arm"] for r in result["rows"]][0] == "Transformer, 1 layer"
    assert {r["setting"]["mixer_kwargs"]["short_conv"] for r in result["rows"]} == {2}


def test_handset_layer_is_exact_on_multi_parent_graphs():
    assert handset_accuracy(DAGSettings(num_nodes=16, parents_per_node=3, num_eval=20), seed=3) == 1.0


def test_listing2_schedule_warms_up_then_decays_to_zero():
    factor = linear_schedule(4, 12)
    assert [factor(s) for s in range(4)] == [0.25, 0.5, 0.75, 1.0]
    assert factor(8) == pytest.approx(0.5) and factor(12) == 0.0


def test_curriculum_arm_doubles_its_length_once_a_batch_is_solved():
    """A threshold of 0 counts every batch as solved: 4 -> 8 -> 16, capped at 16."""
    budget = ToyBudget(steps=3, batch_size=4, num_eval=4)
    preset = toy_preset("t", budget, {"seq_len": 4}, {"seq_len": 4})
    spec = Run("swap", "attn", 0.01, 0, arm("a", curriculum=(4, 0.0, 16), rotary=False))
    assert train_toy(spec, preset, budget=budget)["train_len"] == 16
    fixed = Run("swap", "attn", 0.01, 0, arm("b", rotary=False))
    assert train_toy(fixed, preset, budget=budget)["train_len"] == 4
