"""`regmem repro am-swap` and `am-dag` (arXiv:2505.19488, Figs. 4, 6, 7, 8): the quick runs write report, JSON and
plot with every arm at its best lr, am-swap's NoPE and RoPE arms side by side and a column per evaluation length;
bad am-swap settings raise ValueError naming the key; Listing 2's schedule; the curriculum arm doubles its length
when a batch is solved; the hand-set reachability layer is exact on the evaluation sequences (on the graph
structure with several parents per node), and every am-dag arm has the short convolution."""

import json

import pytest

from regmem.lab.experiments.repro import REPROS, run_repro
from regmem.lab.experiments.repro.am_dag import DAGSettings, handset_accuracy
from regmem.lab.experiments.repro.am_swap import SwapSettings
from regmem.lab.experiments.repro.am_toys import ToyBudget, arm, build_model, linear_schedule, toy_preset, train_toy
from regmem.lab.experiments.runs import Run
from regmem.layers import RotaryEmbedding


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
    assert arms[:4] == ["Transformer, 1 layer, NoPE", "Transformer, 1 layer, RoPE", "Transformer, 2 layers, NoPE",
                        "Transformer, 2 layers, RoPE"] and len(arms) == 2 * 9
    assert {r["arm"][:-len(", NoPE")] for r in result["figures"]["4"]} == {
        "Transformer, 1 layer", "Transformer, 2 layers", *(f"DeltaFormer, kappa_1 = {k}" for k in (
            "linear", "relu", "exp", "softmax", "softmax_listing2", "round", "round2"))}
    for row in result["figures"]["4"]:
        assert row["positions"] == ("rope" if row["arm"].endswith("RoPE") else "none")
        assert row["setting"]["mixer_kwargs"]["rotary"] is (row["positions"] == "rope")
    assert [r["positions"] for r in result["figures"]["6"]] == ["none", "none", "rope", "rope"]
    assert {r["positions"] for r in result["figures"]["8"]} == {"none"}
    for figure, rows in result["figures"].items():
        assert f"Paper, Fig. {figure}" in report
        for row in rows:
            assert f"| {row['arm']} | {row['best_lr']:g} |" in report
            assert set(row["at_length"]) == {"16", "32", "64"}
    assert "| arm | best lr | accuracy % at T = 16 (trained) | at T = 32 | at T = 64 | runs reaching" in report
    fig6 = "| arm | best lr | accuracy % at T = 32 (trained) | at T = 16 | at T = 64 | runs reaching"
    assert fig6 in report
    assert "- NoPE: mean accuracy drop over its 9 arms, 16 -> 32:" in report
    assert "- RoPE: DeltaFormer beats the better Transformer" in report
    assert paths["plot"].read_bytes()[:4] == b"\x89PNG"


def test_am_swap_rope_arms_rotate_and_use_an_even_head_dim(tmp_path):
    """One step each: the RoPE arm's model has rotary embeddings and 4 channels per head, the NoPE arm's none and
    Listing 2's 3; each run is scored at every evaluation length."""
    settings = REPROS["am-swap"].settings("quick", {"kernels": "round", "figures": "4", "steps": 1})
    result = REPROS["am-swap"].run(settings, tmp_path, log=lambda _: None, progress=False)
    rows = {r["arm"]: r for r in result["figures"]["4"]}
    assert rows["DeltaFormer, kappa_1 = round, RoPE"]["params"] > rows["DeltaFormer, kappa_1 = round, NoPE"]["params"]
    for arm_label, d_model, rotating in [("DeltaFormer, kappa_1 = round, RoPE", 16, True),
                                         ("Transformer, 1 layer, RoPE", 16, True),
                                         ("DeltaFormer, kappa_1 = round, NoPE", 12, False)]:
        row = rows[arm_label]
        model = build_model(Run("swap", row["mixer"], 0.01, 0, row["setting"]), ToyBudget(steps=1, d_model=d_model),
                            vocab_size=10)
        assert any(isinstance(m, RotaryEmbedding) for m in model.modules()) is rotating
        assert sum(p.numel() for p in model.parameters()) == row["params"]
    for row in result["figures"]["4"]:
        assert all(0.0 <= cell["low"] <= cell["mean"] <= cell["high"] <= 1.0 for cell in row["at_length"].values())


@pytest.mark.parametrize(("key", "value"), [
    ("positions", "alibi"), ("positions", "rope,rope"), ("eval_lengths", "16,0"), ("eval_lengths", "16,x"),
    ("rope_head_dim", 3), ("rope_head_dim", "four"), ("head_dim", 0), ("kernels", "cosine"), ("figures", "5"),
    ("steps", 0), ("lrs", "0.01,-1"),
])
def test_bad_am_swap_settings_raise_naming_the_key(key, value):
    with pytest.raises(ValueError, match=f"setting '{key}'"):
        REPROS["am-swap"].settings("default", {key: value})


def test_am_swap_default_runs_both_positions_and_three_lengths():
    settings = REPROS["am-swap"].settings()
    assert isinstance(settings, SwapSettings)
    assert settings.positions == ("none", "rope") and settings.eval_lengths == (16, 32, 64)
    assert settings.seq_len == 16 and settings.steps == 1000
    assert REPROS["am-swap"].settings("full").positions == ("none", "rope")


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
