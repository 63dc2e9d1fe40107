"""`regmem repro`: every reproduction runs end to end (quick settings) and write their report, JSON and plot;
the parameter-free online regression (TTR Fig. 2) shows the paper's robust orderings."""

import dataclasses
import json

import pytest

from regmem.lab.experiments.repro import run_repro, ttr_online
from regmem.tasks import OnlineRegressionConfig


@pytest.mark.parametrize("name", ["ttr-online-regression", "ttr-mqar"])
def test_quick_repro_writes_report_json_and_plot(name, tmp_path):
    lines = []
    paths = run_repro(name, tmp_path, variant="quick", log=lines.append)
    assert {p.name for p in paths.values()} == {f"{name}.md", f"{name}.json", f"{name}.png"}
    report = paths["report"].read_text()
    assert "claim" in report and report.strip() in "\n".join(lines)
    assert json.loads(paths["json"].read_text())["settings"]
    assert paths["plot"].stat().st_size > 1000


def test_quick_nl_mad_prints_the_papers_table_beside_ours_and_resumes(tmp_path):
    lines = []
    paths = run_repro("nl-mad", tmp_path, variant="quick", log=lines.append)
    report = paths["report"].read_text()
    assert "| paper: Titans | 100 | 83.4 |" in report  # ICR and memorisation, the two quick tasks
    result = json.loads(paths["json"].read_text())
    assert {(c["task"], c["mixer"]) for c in result["cells"]} == {
        (t, m) for t in ("icr", "memorization") for m in ("attn", "linear")}
    for cell in result["cells"]:
        assert f"{100 * cell['mean']:.1f}" in report
    assert "Hope is not among this run's mixers" in report and paths["plot"].stat().st_size > 1000
    again = []
    run_repro("nl-mad", tmp_path, variant="quick", log=again.append)
    assert "4 of 4 runs already finished" in again[0]


def test_quick_nl_niah_writes_a_heat_map_per_variant(tmp_path):
    paths = run_repro("nl-niah", tmp_path, variant="quick", log=lambda *_: None)
    report = paths["report"].read_text()
    assert "| niah_single | attn |" in report and "| niah_single | linear |" in report
    assert "- Attention from the training length to 2x it: niah_single" in report  # the quick run has no Titans
    assert "Titans vs linear" not in report
    assert paths["niah_single"].read_bytes()[:4] == b"\x89PNG"


def test_quick_lecture_lineage_prints_the_lectures_table_with_measured_rows(tmp_path):
    paths = run_repro("lecture-lineage", tmp_path, variant="quick", log=lambda *_: None)
    report = paths["report"].read_text()
    for method, mixer in (("Mamba (S6)", "mamba"), ("DeltaNet", "deltanet"), ("TTT", "ttt_linear")):
        assert f"| {method} |" in report and f"`{mixer}`" in report
    result = json.loads(paths["json"].read_text())
    floats = {c["mixer"]: c["state_floats"] for c in result["cells"]}
    assert floats["mamba"] > 0 and floats["deltanet"] > 0 and floats["ttt_linear"] > 0
    assert paths["plot"].read_bytes()[:4] == b"\x89PNG"


def test_online_regression_orderings_of_the_paper(tmp_path):
    settings = ttr_online.OnlineSettings(data=OnlineRegressionConfig(seq_len=128), num_sequences=4)
    result = ttr_online.run(settings, tmp_path)
    claims = {c["claim"]: c["holds"] for c in result["claims"]}
    late = result["late"]
    # robust at this size: forgetting helps RLS after the switch, and local memories beat global ones
    assert claims["unweighted RLS keeps a high error after the switch (worse than weighted RLS)"]
    assert claims["the nonparametric regressors beat the non-decaying parametric ones after the switch"]
    assert late["linear attention (unit-norm output)"] > 3 * late["local linear attention"]
    assert set(result["curves"]) == set(late) and all(len(c) == 128 for c in result["curves"].values())


def test_unknown_repro_raises(tmp_path):
    with pytest.raises(ValueError, match="unknown reproduction"):
        run_repro("fig-99", tmp_path)


def test_settings_overrides_reach_the_run_and_unknown_ones_raise(tmp_path):
    paths = run_repro("ttr-online-regression", tmp_path, variant="quick", overrides={"softmax_bandwidth": 0.05},
                      log=lambda *_: None)
    assert json.loads(paths["json"].read_text())["settings"]["softmax_bandwidth"] == 0.05
    with pytest.raises(ValueError, match="unknown settings"):
        run_repro("ttr-online-regression", tmp_path, variant="quick", overrides={"bandwith": 0.05})


def test_set_overrides_of_tuple_settings_take_comma_separated_lists():
    from regmem.lab.experiments.repro.nl_mad import MADSettings
    from regmem.lab.experiments.repro.record import replace_fields

    settings = replace_fields(MADSettings(), {"mixers": "attn,linear", "lrs": "0.003,0.01", "seeds": 1, "steps": 8})
    assert settings.mixers == ("attn", "linear") and settings.lrs == (0.003, 0.01)
    assert settings.seeds == (1,) and settings.steps == 8
    with pytest.raises(ValueError, match="'lrs': expected comma-separated float"):
        replace_fields(MADSettings(), {"lrs": "0.01,fast"})


@pytest.mark.parametrize(("overrides", "key"), [
    ({"lrs": "0.01,0"}, "lrs"), ({"lrs": -0.01}, "lrs"), ({"lrs": "nan"}, "lrs"), ({"lrs": "0.01,inf"}, "lrs"),
])
def test_set_of_a_non_positive_learning_rate_raises_naming_the_setting(overrides, key):
    from regmem.lab.experiments.repro.nl_mad import MADSettings
    from regmem.lab.experiments.repro.record import replace_fields

    with pytest.raises(ValueError, match=f"setting '{key}': every learning rate must be a finite number > 0"):
        replace_fields(MADSettings(), overrides)


def test_every_learning_rate_setting_of_every_reproduction_is_checked():
    """Each settings field named like a learning rate (or its multipliers) refuses 0 at `--set`, and every default
    passes the same check."""
    from regmem.lab.experiments.repro import REPROS
    from regmem.lab.experiments.repro.record import is_lr_field, replace_fields

    checked = 0
    for repro in REPROS.values():
        for variant in repro.variants:
            settings = repro.settings(variant)
            for field in dataclasses.fields(settings):
                if not is_lr_field(field.name):
                    continue
                default = getattr(settings, field.name)
                as_set = ",".join(map(str, default)) if isinstance(default, tuple) else default  # as --set gives it
                assert replace_fields(settings, {field.name: as_set}) == settings  # the defaults pass
                with pytest.raises(ValueError, match=f"setting '{field.name}'"):
                    replace_fields(settings, {field.name: 0.0})
                checked += 1
    assert checked >= 10


def test_unknown_set_key_is_named_in_the_error():
    from regmem.lab.experiments.repro.nl_optimizers import OptimizerToySettings
    from regmem.lab.experiments.repro.record import replace_fields

    with pytest.raises(ValueError, match=r"unknown settings \['lr_multiplier'\]"):
        replace_fields(OptimizerToySettings(), {"lr_multiplier": 1.0})


def test_quick_nl_formal_languages_prints_table5_beside_both_bins(tmp_path):
    paths = run_repro("nl-formal-languages", tmp_path, variant="quick", log=lambda *_: None)
    report = paths["report"].read_text()
    assert "| paper: HOPE | 100.0 | 100.0 | 100.0 | 100.0 |" in report  # Parity and aⁿbⁿ, Bin 0 and Bin 1
    assert "| paper: Transformer | 46.4 | 0.0 | 100.0 | 100.0 |" in report
    result = json.loads(paths["json"].read_text())
    assert {(c["task"], c["mixer"]) for c in result["cells"]} == {
        (t, m) for t in ("lang_parity", "lang_anbn") for m in ("lstm", "hope")}
    for cell in result["cells"]:
        assert 0.0 <= cell["bin0"]["mean"] <= 1.0 and 0.0 <= cell["bin1"]["mean"] <= 1.0
    assert "- Paper: Hope is perfect on every language and bin. Ours:" in report
    assert paths["plot"].read_bytes()[:4] == b"\x89PNG"


def test_every_repro_declares_its_record_and_one_entry_point_signature():
    import inspect

    from regmem.lab.experiments.repro import REPROS

    assert set(REPROS) >= {"ttr-online-regression", "ttr-mqar", "nl-mad", "nl-niah", "lecture-lineage",
                           "nl-formal-languages", "am-stress", "am-swap", "am-dag", "am-heads", "nl-optimizers"}
    for name, repro in REPROS.items():
        assert repro.name == name and "\n" not in repro.help and repro.help
        assert {"default", "quick"} <= set(repro.variants) <= {"default", "quick", "full"}
        parameters = inspect.signature(repro.run).parameters
        assert list(parameters) == ["settings", "out_dir", "log", "progress"], name
        assert [p.kind for p in parameters.values()][2:] == [inspect.Parameter.KEYWORD_ONLY] * 2
        assert parameters["log"].default is print and parameters["progress"].default is True
    assert {n for n, r in REPROS.items() if "full" in r.variants} >= {
        "ttr-mqar", "nl-formal-languages", "am-swap", "am-dag", "am-heads"}
    assert REPROS["ttr-mqar"].settings("full").d_model == 64  # the paper's scale


def test_an_unknown_variant_raises_before_anything_runs(tmp_path):
    with pytest.raises(ValueError, match="has no 'full' variant; variants: default, quick"):
        run_repro("ttr-online-regression", tmp_path / "out", variant="full")
    assert not (tmp_path / "out").exists()


def test_a_repro_record_needs_a_default_and_a_quick_variant():
    from regmem.lab.experiments.repro import Repro

    with pytest.raises(ValueError, match="missing \\['quick'\\]"):
        Repro("x", "help", {"default": ttr_online.OnlineSettings()}, ttr_online.run, ttr_online.format_report,
              ttr_online.plot_curves)


def test_nl_mad_mlp_lr_scale_reaches_the_preset_and_only_then_the_run_keys():
    from regmem.lab.experiments.repro.nl_mad import MADSettings, mad_preset
    from regmem.lab.experiments.repro.record import replace_fields
    from regmem.lab.experiments.runs import Run

    default, scaled = MADSettings(), replace_fields(MADSettings(), {"mlp_lr_scale": 0.1})
    assert mad_preset(default).mlp_lr_scale == 1.0 and mad_preset(scaled).mlp_lr_scale == 0.1
    run = Run("icr", "hope", 0.03, 0)
    assert run.key(mad_preset(default)) != run.key(mad_preset(scaled))
    with pytest.raises(ValueError, match="mlp_lr_scale must be > 0"):
        replace_fields(MADSettings(), {"mlp_lr_scale": 0.0})


def test_nl_mad_workers_reach_the_protocol_leave_the_run_keys_alone_and_refuse_zero(monkeypatch, tmp_path):
    from regmem.lab.experiments.repro import nl_mad
    from regmem.lab.experiments.repro.record import replace_fields
    from regmem.lab.experiments.runs import Run

    parallel = replace_fields(nl_mad.MADSettings(), {"workers": 2})
    run = Run("icr", "attn", 0.003, 0)
    # the same runs, trained two at a time
    assert run.key(nl_mad.mad_preset(parallel)) == run.key(nl_mad.mad_preset(nl_mad.MADSettings()))
    seen = {}

    def execute_bracketed(runs, preset, store, **kwargs):
        seen.update(kwargs)
        return []

    monkeypatch.setattr(nl_mad, "execute_bracketed", execute_bracketed)
    nl_mad.run(parallel, tmp_path, progress=False)
    assert seen["workers"] == 2
    with pytest.raises(ValueError, match="workers must be >= 1"):
        replace_fields(nl_mad.MADSettings(), {"workers": 0})


def test_nl_mad_findings_line_up_the_titans_claim_only_on_the_tasks_it_names():
    from regmem.lab.experiments.repro.nl_mad import findings

    cells = [{"task": t, "mixer": m, "mean": mean} for t in ("icr", "selective_copy")
             for m, mean in (("attn", 0.995), ("titans", 0.8))]
    result = {"settings": {"mixers": ["attn", "titans"]}, "cells": cells}
    icr_only = "\n".join(findings(result, ["icr"]))
    assert "Titans above" not in icr_only and "1 of 2 reach 99% (attn)" in icr_only
    both = "\n".join(findings(result, ["icr", "selective_copy"]))
    assert "Titans above the Transformer on selective_copy. Ours: Titans above attention on none of them." in both
