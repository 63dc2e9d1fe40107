"""One description of a run (src/regmem/lab/experiments/runs.py): `Run.key` names the files of finished runs, so it
must not move — committed runs under benchmarks/results/ are reused by resumable commands."""

import dataclasses
import json
from pathlib import Path

import pytest

from regmem.lab.experiments.presets import PRESETS, Preset
from regmem.lab.experiments.repro import am_toys, nl_mad
from regmem.lab.experiments.runs import Run, build_train_config

RESULTS = Path(__file__).resolve().parents[2] / "benchmarks" / "results"

# (run directory, the results file beside it that stores the preset its runs were keyed with, and where in it)
COMMITTED = [
    ("tuned-quick-mqar/runs", "tuned-quick-mqar/results.json", ("meta", "preset")),
    ("s5-quick/runs", "s5-quick/results.json", ("meta", "preset")),
    ("s3-quick-mlp/runs", "s3-quick-mlp/results.json", ("meta", "preset")),
    ("text-quick/runs", "text-quick/results.json", ("meta", "preset")),
    ("nl-niah/nl-niah-runs/niah_single/runs", "nl-niah/nl-niah-runs/niah_single/niah.json", ("meta", "preset")),
    ("nl-mad/nl-mad-runs/runs", "nl-mad/nl-mad.json", ("preset",)),
    ("nl-formal/nl-formal-runs/runs", "nl-formal/nl-formal-languages.json", ("preset",)),
]


@pytest.mark.parametrize(("runs", "results", "where"), COMMITTED, ids=[c[0].split("/")[0] for c in COMMITTED])
def test_committed_runs_keep_their_file_names(runs, results, where):
    stored = json.loads((RESULTS / results).read_text())
    for name in where:
        stored = stored[name]
    preset = Preset(**stored)
    files = sorted((RESULTS / runs).glob("*.json"))
    assert len(files) >= 16
    for path in files[:40]:
        spec = json.loads(path.read_text())["spec"]
        assert Run(**spec).key(preset) == path.stem, path


def test_nl_mad_runs_are_found_under_the_preset_the_repro_builds():
    preset = nl_mad.mad_preset(nl_mad.MADSettings())
    files = sorted((RESULTS / "nl-mad" / "nl-mad-runs" / "runs").glob("*.json"))
    assert all(Run(**json.loads(p.read_text())["spec"]).key(preset) == p.stem for p in files)


# Computed with `RunSpec(task, mixer, lr, seed, setting).key(preset)` on main 32743a8, before RunSpec and Cell
# were merged into Run, and recomputed once when the key stopped hashing other mixers' preset options (2026-11-28;
# the committed runs were renamed by benchmarks/scripts/rekey_runs.py). The toy preset has no mixer options: its key
# did not move.
KNOWN_KEYS = [
    (Run("mqar", "attn", 0.01, 0, {}), PRESETS["quick"], "b8704caa3d171b565874"),
    (Run("mqar", "gla", 0.003, 1, {"num_kv_pairs": 16}), PRESETS["tiny"], "772a0a1c12956427abf9"),
    (Run("s5", "recipe:uniform/linear/dgd", 0.1, 2, {"seq_len": 32}), PRESETS["quick-mlp"], "c694fb917b60c00ad983"),
    (Run("text", "linear", 0.03, 0, {}), PRESETS["small"], "735b0e8258added6cbc7"),
    (Run("swap", "attn", 0.01, 0, am_toys.arm("a", curriculum=(4, 0.0, 16), rotary=False)),
     am_toys.toy_preset("am-swap-fig4-h4", am_toys.ToyBudget(steps=100), {"seq_len": 16}, {"seq_len": 16}),
     "8d20e35820b900d916f4"),
    (Run("icr", "titans", 3e-4, 1), nl_mad.mad_preset(nl_mad.MADSettings()), "e8a8b85e2d160b653aa8"),
]


@pytest.mark.parametrize(("run", "preset", "key"), KNOWN_KEYS, ids=[k[2] for k in KNOWN_KEYS])
def test_keys_match_those_computed_before_the_merge(run, preset, key):
    assert run.key(preset) == key


def test_the_stored_form_names_budget_overrides_only_where_given():
    assert Run("mqar", "attn", 0.01).to_dict() == {"task": "mqar", "mixer": "attn", "lr": 0.01, "seed": 0,
                                                   "setting": {}}
    assert Run("mqar", "attn", steps=8, optimizer="muon").to_dict()["steps"] == 8
    assert Run(**Run("mqar", "attn", 0.01, 1, {"num_kv_pairs": 4}, batch_size=8).to_dict()).batch_size == 8


@pytest.mark.parametrize(("field", "value", "message"), [
    ("lr", 0.0, "lr must be positive"), ("steps", -1, "steps must be positive"),
    ("batch_size", 0, "batch_size must be positive"), ("optimizer", "adam", "optimizer must be one of"),
])
def test_a_run_with_a_bad_budget_raises(field, value, message):
    with pytest.raises(ValueError, match=message):
        Run("mqar", "attn", **{field: value})


def test_mlp_lr_scale_enters_the_key_only_of_runs_with_an_mlp():
    """The quick preset trains a model's MLPs at 0.1 x the lr; a run without one (every MLP-free mixer of the
    committed tables) is the same run as before, under the same key, and a Hope run (its CMS) is not."""
    quick = PRESETS["quick"]
    one = dataclasses.replace(quick, mlp_lr_scale=1.0)
    assert quick.mlp_lr_scale == 0.1 and PRESETS["quick-mlp"].mlp_lr_scale == 1.0
    assert Run("mqar", "gated_deltanet", 0.03).key(quick) == Run("mqar", "gated_deltanet", 0.03).key(one)
    assert Run("mqar", "hope", 0.03).key(quick) != Run("mqar", "hope", 0.03).key(one)
    with_ffn = dataclasses.replace(quick, ffn="swiglu")
    assert Run("mqar", "attn", 0.03).key(with_ffn) != Run("mqar", "attn", 0.03).key(
        dataclasses.replace(with_ffn, mlp_lr_scale=1.0))
    assert build_train_config(quick, seed=0, progress=False).mlp_lr_scale == 0.1
    assert build_train_config(quick, seed=0, progress=False, optimizer="muon").mlp_lr_scale == 1.0  # AdamW's


def test_a_later_model_format_gives_runs_keys_of_their_own(monkeypatch):
    """A format that changes a mixer's defaults must not reuse runs trained under the old ones: the key moves."""
    from regmem.lab.experiments import runs

    run, preset = Run("mqar", "hope", lr=0.01), PRESETS["quick"]
    before = run.key(preset)
    monkeypatch.setattr(runs, "MODEL_FORMAT", runs.KEYED_FORMAT + 1)
    assert run.key(preset) != before
