"""The command line: help, recipes, bench and showcase run and write what they promise."""

import json
import subprocess
import sys

import pytest

from regmem.lab.cli import build_parser, main


def test_help_lists_every_command(capsys):
    with pytest.raises(SystemExit):
        main(["--help"])
    from regmem.lab.cli import ADDERS

    listed = [line.split()[0] for line in capsys.readouterr().out.splitlines()  # a long name's help wraps, deeper
              if line.startswith("    ") and not line.startswith("     ")]
    assert listed == [adder.removeprefix("add_") for _, adder in ADDERS]  # in ADDERS' order
    assert set(listed) >= {"recipes", "levels", "analyze", "bench", "compare", "suite", "train", "generate", "repro",
                           "showcase"}


def _modules_after(command: str) -> dict:
    """The modules a fresh interpreter holds after `regmem <command>` (a help request: it exits)."""
    code = ("import json, sys\nfrom regmem.lab.cli import main\ntry:\n    main(sys.argv[1:])\n"
            "except SystemExit:\n    pass\nprint(json.dumps(sorted(sys.modules)))")
    out = subprocess.run([sys.executable, "-c", code, *command.split()], capture_output=True, text=True, check=True)
    return json.loads(out.stdout.splitlines()[-1])


@pytest.mark.parametrize("command", ["--help", "mixers --help", "analyze --help", "repro --help", "compare --help"])
def test_help_imports_only_what_it_lists(command):
    """`regmem --help` builds every command as its name and help line only: the cli's own modules, no library or
    lab module; a command's help builds that command alone, and nothing draws a plot (no matplotlib)."""
    modules = _modules_after(command)
    assert not [m for m in modules if m.startswith("matplotlib")]
    if command.split()[0] in ("--help", "mixers", "analyze"):
        listed = {f"regmem.lab.cli.{name}" for name, _ in __import__("regmem.lab.cli", fromlist=["ADDERS"]).ADDERS}
        assert {m for m in modules if m.startswith("regmem.")} <= {"regmem.lab", "regmem.lab.cli",
                                                                  "regmem.lab.cli.args"} | listed
    if command.startswith("compare"):
        assert not [m for m in modules if m.startswith(("regmem.lab.experiments.repro", "regmem.lab.bench"))]


def test_the_library_imports_nothing_of_the_lab():
    """The importable library (ops, layers, nested, models, optim, train, tasks, analysis, interop) loads no module
    of the lab (experiments, bench, cli) and never matplotlib (docs/architecture.md)."""
    code = ("import sys\nimport regmem.ops, regmem.layers, regmem.nested, regmem.models, regmem.optim, regmem.train, "
            "regmem.tasks, regmem.analysis, regmem.interop, regmem.recipe, regmem.storage\n"
            "print(' '.join(m for m in sys.modules if m.startswith(('regmem.lab', 'matplotlib'))))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""


def test_module_entry_point_prints_recipes():
    out = subprocess.run([sys.executable, "-m", "regmem", "recipes"], capture_output=True, text=True, check=True)
    assert "| retnet | constant_decay | linear | gd_step |" in out.stdout


def test_bench_ops_writes_json_and_markdown(tmp_path, capsys):
    main(["bench", "ops", "--seq-lens", "64,128", "--heads", "1", "--head-dim", "8", "--chunk-size", "16",
          "--min-run-time", "0.01", "--ops", "linear_attn,gla_diagonal", "--out-dir", str(tmp_path)])
    (json_file,) = tmp_path.glob("*-ops.json")
    (md_file,) = tmp_path.glob("*-ops.md")
    result = json.loads(json_file.read_text())
    assert len(result["rows"]) == 2 * 2 * 2 * 2  # ops x T x forms x passes
    assert {r["form"] for r in result["rows"]} == {"chunk", "recurrent"}
    assert all(r["ms"] > 0 and r["matmul_ratio"] > 0 for r in result["rows"])
    assert "| gla_diagonal | chunk | fwdbwd | 128 |" in md_file.read_text()


def test_bench_ops_times_token_loops_only_up_to_the_given_length(tmp_path):
    main(["bench", "ops", "--seq-lens", "32,64", "--heads", "1", "--head-dim", "8", "--chunk-size", "16",
          "--min-run-time", "0.001", "--ops", "linear_attn", "--max-token-loop-len", "32", "--out-dir", str(tmp_path)])
    rows = json.loads(next(tmp_path.glob("*-ops.json")).read_text())["rows"]
    assert sorted({(r["form"], r["T"]) for r in rows}) == [("chunk", 32), ("chunk", 64), ("recurrent", 32)]


def test_bench_rejects_unknown_ops(tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["bench", "ops", "--ops", "flash", "--out-dir", str(tmp_path)])
    assert exit_.value.code == 2 and "regmem: error: argument --ops: unknown 'flash'" in capsys.readouterr().err


def test_showcase_prints_every_op_with_small_errors(capsys):
    from regmem.ops import OPS
    from regmem.ops.examples import VARIANTS

    main(["showcase", "--seq-len", "128"])
    out = capsys.readouterr().out
    rows = [line for line in out.splitlines() if line.startswith("| ") and "max rel err" not in line]
    assert [row.split("|")[1].strip() for row in rows] == [*OPS, *VARIANTS]
    for row in rows:
        err_recurrent, err_chunk = (float(cell) for cell in row.split("|")[3:5])
        assert err_recurrent < 1e-10 and err_chunk < 1e-10
    assert "one GD step" in out


def test_parser_has_kebab_case_flags():
    bench = build_parser().parse_args(["bench", "ops", "--seq-lens", "8", "--head-dim", "4"])
    assert bench.seq_lens == [8] and bench.head_dim == 4


def test_every_bench_case_runs_in_every_form(tmp_path):
    from regmem.lab.bench import CASES

    main(["bench", "ops", "--seq-lens", "32", "--heads", "1", "--head-dim", "8", "--chunk-size", "16",
          "--min-run-time", "0.001", "--forms", "chunk,recurrent,reference", "--ops", ",".join(CASES),
          "--out-dir", str(tmp_path)])
    (json_file,) = tmp_path.glob("*-ops.json")
    rows = json.loads(json_file.read_text())["rows"]
    assert sorted((r["op"], r["form"], r["pass"]) for r in rows) == sorted(
        (op, form, pass_) for op, case in CASES.items() for form in case.forms for pass_ in ("fwd", "fwdbwd")
    )
    assert all(r["ms"] > 0 for r in rows)


def test_bench_decode_times_a_step_per_context_and_sees_the_kv_cache_grow(tmp_path, capsys):
    main(["bench", "decode", "--context-lens", "16,64", "--heads", "1", "--head-dim", "8", "--min-run-time", "0.001",
          "--ops", "hla2,ahla,softmax_attn", "--out-dir", str(tmp_path)])
    (json_file,) = tmp_path.glob("*-decode.json")
    rows = json.loads(json_file.read_text())["rows"]
    floats = {(r["op"], r["context"]): r["state_floats"] for r in rows}
    assert len(rows) == 6 and all(r["ms"] > 0 for r in rows)
    assert floats["hla2", 16] == floats["hla2", 64] == 8 * 8 + 2 * 8 * 8 + 2 * 8  # S, C, G; m, h
    assert floats["ahla", 16] == floats["ahla", 64] == 2 * 8 * 8 + 2 * 8  # P, E; m, n
    assert floats["softmax_attn", 64] == 4 * floats["softmax_attn", 16] == 64 * 16  # the KV cache
    assert "| hla2 | 208 |" in (tmp_path / json_file.name.replace(".json", ".md")).read_text()


def test_bench_memory_reports_a_peak_per_row(tmp_path):
    main(["bench", "ops", "--seq-lens", "32", "--heads", "1", "--head-dim", "8", "--chunk-size", "16",
          "--min-run-time", "0.001", "--forms", "chunk", "--ops", "local_linear_attn", "--memory",
          "--out-dir", str(tmp_path)])
    (json_file,) = tmp_path.glob("*-ops.json")
    rows = json.loads(json_file.read_text())["rows"]
    assert len(rows) == 2 and all(r["peak_mb"] >= 0 for r in rows)
    assert "peak MiB" in next(tmp_path.glob("*-ops.md")).read_text()


def _fake_fla(root):
    """A package named fla whose __init__ fails (as the real one does without triton), so the case must load naive.py
    by its file; its naive_chunk_gated_delta_rule runs regmem's own op."""
    naive = root / "fla" / "ops" / "gated_delta_rule"
    naive.mkdir(parents=True)
    (root / "fla" / "__init__.py").write_text("raise ImportError('fla needs triton')\n")
    (naive / "naive.py").write_text(
        "from regmem.ops import gated_delta_rule\n\n"
        "def naive_chunk_gated_delta_rule(q, k, v, g, beta, chunk_size=64):\n"
        "    return gated_delta_rule(q, k, v, g, beta, chunk_size=chunk_size)\n"
    )


def test_bench_compares_with_fla_naive_loaded_from_its_file(tmp_path, monkeypatch):
    from regmem.lab.bench.external import load_fla_file

    _fake_fla(tmp_path / "site")
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    load_fla_file.cache_clear()
    try:
        main(["bench", "ops", "--seq-lens", "32", "--heads", "1", "--head-dim", "8", "--chunk-size", "16",
              "--min-run-time", "0.001", "--forms", "chunk,recurrent", "--ops",
              "gated_delta_rule,fla_naive_gated_delta_rule", "--out-dir", str(tmp_path / "out")])
    finally:
        load_fla_file.cache_clear()
    rows = json.loads(next((tmp_path / "out").glob("*-ops.json")).read_text())["rows"]
    assert sorted((r["op"], r["form"]) for r in rows if r["op"].startswith("fla")) == [
        ("fla_naive_gated_delta_rule", "chunk")] * 2  # chunk only, fwd and fwdbwd
    table = next((tmp_path / "out").glob("*-ops.md")).read_text().split("## Against public implementations")[1]
    lines = [line for line in table.splitlines() if line.startswith("| gated_delta_rule vs")]
    assert [line.split("|")[3].strip() for line in lines] == ["fwd", "fwdbwd"]


def test_bench_names_the_extra_when_fla_is_missing(tmp_path, monkeypatch, capsys):
    import importlib.util

    from regmem.lab.bench.external import load_fla_file

    real_find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "fla" else real_find_spec(name, *a))
    load_fla_file.cache_clear()
    try:
        with pytest.raises(SystemExit) as exit_:
            main(["bench", "ops", "--ops", "fla_naive_gated_delta_rule", "--out-dir", str(tmp_path / "out")])
    finally:
        load_fla_file.cache_clear()
    err = capsys.readouterr().err
    assert exit_.value.code == 2 and "argument --ops:" in err and "pip install 'regmem[bench]'" in err
    assert not (tmp_path / "out").exists()


def test_bench_layers_times_regmems_layers_and_their_decoding_step(tmp_path):
    main(["bench", "layers", "--layers", "titans_mlp,mamba", "--seq-lens", "16,32", "--heads", "1", "--head-dim", "8",
          "--min-run-time", "0.001", "--out-dir", str(tmp_path)])
    (json_file,) = tmp_path.glob("*-layers.json")
    rows = json.loads(json_file.read_text())["rows"]
    assert sorted((r["layer"], r["pass"], r["T"]) for r in rows) == sorted(
        (layer, p, T) for layer in ("titans_mlp", "mamba") for p in ("fwd", "fwdbwd", "step") for T in (16, 32))
    assert all(r["ms"] > 0 for r in rows)
    table = next(tmp_path.glob("*-layers.md")).read_text()
    decode = table.split("| layer | decode step ms @ 16 | ms @ 32 | t(32) / t(16) |\n|---|---:|---:|---:|\n")[1]
    assert [line.split(" | ")[0] for line in decode.splitlines()] == ["| titans_mlp", "| mamba"]


def test_bench_layers_rejects_an_unknown_pass(tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["bench", "layers", "--layers", "mamba", "--passes", "fwd,decode", "--out-dir", str(tmp_path)])
    assert exit_.value.code == 2 and "argument --passes: unknown 'decode'" in capsys.readouterr().err


def test_levels_prints_a_models_levels_and_reads_a_checkpoint(tmp_path, capsys):
    from regmem.models import LM, LMConfig

    main(["levels", "--model", "attn", "--ffn", "cms", "--d-model", "32", "--n-layers", "1"])
    out = capsys.readouterr().out
    assert "| 1 | every token | blocks.0.mixer | KV cache" in out and "every 16 tokens" in out
    assert "exp_avg_sq (second moment)" in out
    LM(LMConfig(vocab_size=16, d_model=16, n_heads=2, mixer="gla")).save_pretrained(tmp_path)
    main(["levels", "--model", str(tmp_path), "--optimizer", "none"])
    out = capsys.readouterr().out
    assert "gla memory state" in out and "exp_avg" not in out
    with pytest.raises(SystemExit) as exit_:
        main(["levels", "--model", "nope"])
    assert exit_.value.code == 2 and "argument --model: neither a model directory nor a mixer" in (
        capsys.readouterr().err)
