"""`regmem repro nl-ablations` (Nested Learning Table 6 at CPU scale): every row builds the model it names, the
curve over the context counts the right tokens, and a row's verdict needs the seeds' ranges apart."""

import pytest
import torch

from regmem.lab.experiments.positions import position_accuracy
from regmem.lab.experiments.presets import PRESETS
from regmem.lab.experiments.repro.nl_ablations import ROWS, _direction, row_preset, summarize_rows
from regmem.lab.experiments.runs import Run
from regmem.layers import build_mixer


@pytest.mark.parametrize("row", list(ROWS))
def test_every_row_builds_its_ablation(row):
    mixer, options = ROWS[row]
    layer = build_mixer(mixer, 32, 2, **options)
    y, _ = layer(torch.randn(1, 20, 32))
    assert y.shape == (1, 20, 32) and torch.isfinite(y).all()
    if row == "w/o CMS":
        assert layer.cms is None
    if row.startswith("CMS "):
        assert layer.cms.config.levels == int(row.split()[1])


def test_a_row_keeps_the_presets_own_options_for_its_mixer():
    long = PRESETS["long"]
    assert long.mixer_kwargs["hope"] == {"bptt": 128}
    run = Run("niah_single", "hope", 0.01, 0, {"row": "w/o DGD", "options": {"dgd": False}})
    assert row_preset(run, long).mixer_kwargs["hope"] == {"bptt": 128, "dgd": False}
    override = Run("niah_single", "hope", 0.01, 0, {"row": "x", "options": {"bptt": 256}})
    assert row_preset(override, long).mixer_kwargs["hope"] == {"bptt": 256}
    assert row_preset(run, long).mixer_kwargs["attn"] == long.mixer_kwargs["attn"]


def test_position_accuracy_scores_each_span_of_the_sequence():
    targets = torch.full((2, 8), -100)
    targets[0, 1], targets[1, 6], targets[1, 7] = 3, 2, 1
    logits = torch.zeros(2, 8, 4)
    logits[0, 1, 3] = 1.0  # right
    logits[1, 6, 0] = 1.0  # wrong
    logits[1, 7, 1] = 1.0  # right
    assert position_accuracy(logits, targets, 4) == [1.0, None, None, 0.5]


def _record(row, lr, seed, score, test):
    return {"setting": {"row": row}, "lr": lr, "seed": seed, "score": score, "train_seconds": 1.0,
            "test": {"accuracy": test, "by_position": [test]}}


def test_rows_take_their_best_lr_by_the_held_out_score_and_verdicts_need_separated_ranges():
    records = [_record("Hope", 0.01, s, 0.9, t) for s, t in ((0, 0.90), (1, 0.80))]
    records += [_record("Hope", 0.03, s, 0.5, 1.0) for s in (0, 1)]  # a better test score at a worse held-out one
    records += [_record(row, 0.003, s, 0.1, 0.1) for row in ("Hope", "w/o DGD", "w/o inner-projection q")
                for s in (0, 1)]
    records += [_record(row, 0.03, s, 0.1, 0.1) for row in ("w/o DGD", "w/o inner-projection q") for s in (0, 1)]
    records += [_record("w/o DGD", 0.01, s, 0.4, t) for s, t in ((0, 0.40), (1, 0.50))]
    records += [_record("w/o inner-projection q", 0.01, s, 0.85, t) for s, t in ((0, 0.85), (1, 0.70))]
    records += [_record("w/o momentum", lr, s, score, 0.2) for lr, score in ((0.01, 0.2), (0.03, 0.3))
                for s in (0, 1)]
    rows = summarize_rows(records)
    assert rows["Hope"]["best_lr"] == 0.01 and rows["Hope"]["test"] == [0.90, 0.80] and rows["Hope"]["seeds"] == 2
    full = rows["Hope"]
    assert _direction("w/o DGD", -0.4, full, rows["w/o DGD"]) == "yes"  # below Hope, ranges apart
    assert _direction("w/o inner-projection q", -0.025, full, rows["w/o inner-projection q"]).startswith(
        "not resolved")  # ranges overlap
    # ranges apart, but the row's best lr sits at its grid's top: the optimum may lie beyond, no verdict
    assert "at the grid's edge" in _direction("w/o momentum", -0.65, full, rows["w/o momentum"])
