"""A run in one TOML file (regmem/lab/experiments/run_config.py): the file's schema, the command line over it, mixer
options in the run's key, and a run directory's config.toml training its run again bit for bit."""

import dataclasses
import json
import tomllib
from pathlib import Path

import pytest
from safetensors.torch import load_file

from regmem.lab.cli import main
from regmem.lab.experiments.presets import PRESETS
from regmem.lab.experiments.run_config import RunConfig, load_config, resolve_preset, resolved_config
from regmem.lab.experiments.runs import Run

TIMING = ("tokens_per_s", "seconds", "time")


def _train(*argv):
    main(["train", *argv, "--no-progress"])


def _trajectory(run_dir: Path) -> list[dict]:
    """metrics.jsonl without its timings."""
    lines = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return [{k: v for k, v in line.items() if not any(t in k for t in TIMING)} for line in lines]


def test_a_run_directory_config_trains_the_same_run_bit_for_bit(tmp_path):
    first, again = tmp_path / "first", tmp_path / "again"
    _train("mqar", "--mixer", "moba", "--preset", "tiny", "--steps", "6", "--lr", "0.02", "--seed", "3",
           "--model", "d_model=32", "--model", "n_heads=2", "--mixer-opt", "block_size=4", "--mixer-opt", "top_k=2",
           "--set", "num_kv_pairs=3", "--out-dir", str(first))
    config = tomllib.loads((first / "config.toml").read_text())
    assert config["model"]["d_model"] == 32 and config["mixer_options"] == {"short_conv": 4, "block_size": 4,
                                                                            "top_k": 2}
    assert config["task_config"]["num_kv_pairs"] == 3 and config["train"]["steps"] == 6 and config["seed"] == 3
    _train("--config", str(first / "config.toml"), "--out-dir", str(again))
    weights, weights_again = load_file(first / "model" / "model.safetensors"), load_file(
        again / "model" / "model.safetensors")
    assert weights.keys() == weights_again.keys()
    assert all((weights[k] == weights_again[k]).all() for k in weights)
    assert _trajectory(first) == _trajectory(again) and len(_trajectory(first)) >= 6
    assert (first / "run.json").read_text() == (again / "run.json").read_text()
    assert (first / "config.toml").read_text() == (again / "config.toml").read_text()


def test_the_command_line_overrides_the_file(tmp_path):
    path = tmp_path / "run.toml"
    path.write_text('task = "mqar"\nmixer = "gated_deltanet"\npreset = "tiny"\nseed = 2\n'
                    '[model]\nd_model = 32\nn_heads = 2\n[mixer_options]\nchunk_size = 8\nallow_neg_eigval = true\n'
                    '[train]\nlr = 0.003\nsteps = 3\n[task_config]\nnum_kv_pairs = 3\n')
    out = tmp_path / "run"
    _train("--config", str(path), "--lr", "0.02", "--mixer-opt", "chunk_size=4", "--model", "d_model=48",
           "--set", "num_kv_pairs=2", "--out-dir", str(out))
    run = json.loads((out / "run.json").read_text())
    assert run["train"]["lr"] == 0.02 and run["train"]["steps"] == 3 and run["train"]["seed"] == 2
    assert run["model"]["d_model"] == 48 and run["model"]["n_heads"] == 2 and run["task"]["num_kv_pairs"] == 2
    assert run["model"]["mixer_kwargs"] == {"gated_deltanet": {"chunk_size": 4, "allow_neg_eigval": True}}


def test_the_schema_refuses_unknown_keys_and_wrong_types(tmp_path):
    for text, message in [
        ('tsk = "mqar"', "unknown key tsk; known: task, mixer"),
        ("[model]\nd_modl = 3", r"\[model\] has no field 'd_modl'; known: d_model"),
        ("[model]\nd_model = 0", "model.d_model must be a positive int"),
        ('[train]\nlr = "fast"', "train.lr must be a positive number"),
        ("seed = -1", "seed must be an int"),
        ('preset = "huge"', "preset must be one of"),
        ('mixer = "nosuch"', "mixer must be one of"),
        ("model = 3", r"\[model\] must be a table"),
        ("task = [", "is not valid TOML"),
    ]:
        path = tmp_path / "bad.toml"
        path.write_text(text)
        with pytest.raises(ValueError, match=message):
            load_config(path)
    with pytest.raises(ValueError, match="no file"):
        load_config(tmp_path / "missing.toml")


def test_mixer_options_reach_the_preset_and_the_run_key():
    config = RunConfig(mixer_options={"short_conv": 2, "moba": {"top_k": "2"}})
    preset = resolve_preset(config, ["attn", "moba"])
    assert preset.mixer_kwargs["moba"] == {"short_conv": 2, "block_size": 16, "top_k": 2}
    assert preset.mixer_kwargs["attn"] == {"short_conv": 2}
    base = PRESETS["quick"]
    assert Run("mqar", "moba").key(preset) != Run("mqar", "moba").key(base)
    assert Run("mqar", "linear").key(preset) == Run("mqar", "linear").key(base)  # other mixers' options do not count
    with pytest.raises(ValueError, match="mixer 'linear' has no option 'top_k'"):
        resolve_preset(RunConfig(mixer_options={"top_k": 2}), ["moba", "linear"])
    with pytest.raises(ValueError, match="a table must be named after a mixer"):
        resolve_preset(RunConfig(mixer_options={"nosuch": {"top_k": 2}}), ["moba"])


def test_a_resolved_config_loads_as_the_run_it_describes(tmp_path):
    preset = dataclasses.replace(PRESETS["tiny"], mixer_kwargs={"hope": {"static": ("k",), "bptt": None}})
    run = Run("mqar", "hope", lr=0.02, seed=1, steps=4)
    data = resolved_config(run, preset, {"seq_len": 16, "power_a": None})
    assert data["task_config"] == {"seq_len": 16}
    assert data["mixer_options"] == {"static": ["k"], "bptt": "none"}  # TOML has no None nor sets
    from regmem.lab.experiments.run_config import config_text

    path = tmp_path / "config.toml"
    path.write_text(config_text(data))
    loaded = load_config(path)
    again = resolve_preset(loaded, ["hope"])
    assert again.mixer_kwargs["hope"] == {"static": ("k",), "bptt": None}
    assert (again.steps, again.lr) == (4, 0.02)


def test_compare_takes_the_file_s_model_options_task_fields_and_lr(tmp_path, monkeypatch):
    import regmem.lab.experiments.compare as compare_module
    from regmem.lab.experiments.runs import build_task

    seen = {}
    monkeypatch.setattr(compare_module, "run_compare", lambda plan, **kw: seen.update(
        task=plan.task_name, mixers=plan.mixers, preset=plan.preset, lrs=plan.lrs))
    path = tmp_path / "run.toml"
    path.write_text('mixer = "moba"\npreset = "tiny"\n[model]\nn_layers = 2\n[mixer_options]\ntop_k = 2\n'
                    '[task_config]\nnum_kv_pairs = 3\n[train]\nlr = 0.02\n')
    main(["compare", "mqar", "--config", str(path), "--mixer-opt", "moba.block_size=4", "--no-progress",
          "--out-dir", str(tmp_path / "out")])
    preset = seen["preset"]
    assert seen["mixers"] == ["moba"] and seen["lrs"] == [0.02] and preset.n_layers == 2
    assert preset.mixer_kwargs["moba"]["top_k"] == 2 and preset.mixer_kwargs["moba"]["block_size"] == 4
    assert build_task("mqar", preset, {}).config.num_kv_pairs == 3
    assert Run("mqar", "moba").key(preset) != Run("mqar", "moba").key(PRESETS["tiny"])


def test_the_documented_config_example_loads_and_resolves(tmp_path):
    readme = (Path(__file__).parents[2] / "docs" / "command-line.md").read_text()
    block = readme.split("```toml\n", 1)[1].split("```", 1)[0]
    path = tmp_path / "run.toml"
    path.write_text(block)
    config = load_config(path)
    preset = resolve_preset(config, [config.mixer])
    assert (config.task, config.mixer, preset.d_model, preset.n_layers) == ("mqar", "moba", 128, 2)
    assert preset.mixer_kwargs["moba"]["block_size"] == 16 and (preset.lr, preset.steps) == (0.01, 1000)


def test_a_plain_command_line_option_beats_the_file_s_table_for_that_mixer(tmp_path):
    path = tmp_path / "run.toml"
    path.write_text("[mixer_options.moba]\ntop_k = 3\nblock_size = 8\n")
    config = load_config(path).override(mixer_options={"top_k": "2"})
    preset = resolve_preset(config, ["moba"])
    assert preset.mixer_kwargs["moba"]["top_k"] == 2 and preset.mixer_kwargs["moba"]["block_size"] == 8
    with pytest.raises(ValueError, match="preset must be one of"):
        RunConfig.from_dict({"preset": ["quick"]})
    recipe = resolve_preset(RunConfig(mixer_options={"recipe:uniform/linear/sgd": {"chunk_size": 8}}),
                            ["recipe:uniform/linear/sgd"])
    assert recipe.mixer_kwargs["recipe:uniform/linear/sgd"] == {"chunk_size": 8}


def test_every_committed_benchmark_config_loads_and_resolves():
    configs = sorted((Path(__file__).parents[2] / "benchmarks" / "configs").glob("*.toml"))
    assert configs, "benchmarks/configs holds the run files the leaderboards cite"
    for path in configs:
        config = load_config(path)
        preset = resolve_preset(config, [config.mixer] if config.mixer else [])
        assert config.preset in PRESETS and preset.steps >= 1, path.name
    lib = load_config(configs[0].parent / "cpython-lib.toml")
    assert (lib.task, lib.task_config["data"], resolve_preset(lib, ["attn"]).steps) == ("text", "data/cpython-lib", 256)
