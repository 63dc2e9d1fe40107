"""Bad input at the command line ends the command before anything runs: exit status 2 and one line
`regmem: error: argument <the argument>: ...` on stderr (after the command's usage), no traceback, nothing written
and nothing printed on stdout. One group of cases per command."""

import pytest

from regmem.lab.cli import main

# (argv, the start of the error message after "regmem: error: "). "{out}" is a path that does not exist yet and
# must still not exist afterwards; "{empty}" an existing empty directory, "{file}" an existing file (both left as
# they were); /proc/x a path that cannot be created even by root.
CASES = {
    "recipes": [
        (["recipes", "--bogus"], "unrecognized arguments: --bogus"),
    ],
    "levels": [
        (["levels", "--model", "nosuch"], "argument --model: neither a model directory nor a mixer: unknown mixer"),
        (["levels", "--model", "{empty}"], "argument --model: '"),
        (["levels", "--model", "attn", "--d-model", "0"], "argument --d-model: must be > 0, got 0"),
        (["levels", "--model", "attn", "--n-layers", "x"], "argument --n-layers: expected an integer"),
        (["levels", "--model", "attn", "--optimizer", "lion"], "argument --optimizer: invalid choice: 'lion'"),
    ],
    "analyze": [
        (["analyze", "snr", "--trials", "0", "--out-dir", "{out}"], "argument --trials: must be > 0"),
        (["analyze", "nosuch"], "argument KIND: invalid choice: 'nosuch'"),
        (["analyze", "context-growth", "--seed", "x", "--out-dir", "{out}"], "argument --seed: expected an integer"),
        (["analyze", "snr", "--out-dir", "{file}"], "argument --out-dir: '"),
        (["analyze", "reach", "--variant", "hope:nosuch=1", "--out-dir", "{out}"],
         "argument --variant: mixer 'hope' has no option 'nosuch'"),
        (["analyze", "reach", "--variant", "hope", "--out-dir", "{out}"],
         "argument --variant: variant 'hope': expected"),
        (["analyze", "reach", "--mixers", "gru", "--out-dir", "{out}"], "argument --mixers: "),
        (["analyze", "reach", "--mixers", "gated_deltanet", "--n-heads", "3", "--out-dir", "{out}"],
         "argument --n-heads: gated_deltanet at d_model 64, n_heads 3"),
        (["analyze", "snr", "--seed", "-1", "--out-dir", "{out}"], "argument --seed: must be >= 0, got -1"),
    ],
    "bench": [
        (["bench", "ops", "--ops", "flash", "--out-dir", "{out}"], "argument --ops: unknown 'flash'; known: "),
        (["bench", "ops", "--forms", "chunk,fast", "--out-dir", "{out}"], "argument --forms: unknown 'fast'"),
        (["bench", "ops", "--seq-lens", "64,0", "--out-dir", "{out}"], "argument --seq-lens: must be > 0"),
        (["bench", "ops", "--heads", "-2", "--out-dir", "{out}"], "argument --heads: must be > 0"),
        (["bench", "ops", "--min-run-time", "-1", "--out-dir", "{out}"], "argument --min-run-time: must be >= 0"),
        (["bench", "decode", "--ops", "nosuch", "--out-dir", "{out}"], "argument --ops: unknown 'nosuch'"),
        (["bench", "decode", "--context-lens", "a,b", "--out-dir", "{out}"], "argument --context-lens: expected an "
                                                                            "integer, got 'a'"),
        (["bench", "layers", "--layers", "nosuch", "--out-dir", "{out}"], "argument --layers: unknown 'nosuch'"),
        (["bench", "layers", "--layers", "mamba", "--passes", "fwd,decode", "--out-dir", "{out}"],
         "argument --passes: unknown 'decode'"),
        (["bench", "snr", "--kernels", "gauss", "--out-dir", "{out}"], "argument --kernels: unknown 'gauss'"),
        (["bench", "snr", "--trials", "0", "--out-dir", "{out}"], "argument --trials: must be > 0"),
        (["bench", "optim", "--models", "nosuch", "--out-dir", "{out}"], "argument --models: unknown 'nosuch'"),
        (["bench", "optim", "--optimizers", "lion", "--out-dir", "{out}"], "argument --optimizers: unknown 'lion'"),
        (["bench", "ops", "--out-dir", "/proc/x"], "argument --out-dir: cannot create '/proc/x': cannot write in"),
        (["bench", "ops", "--ops", "delta_rule,,linear_attn", "--out-dir", "{out}"],
         "argument --ops: expected a comma-separated list without empty items"),
    ],
    "compare": [
        (["compare", "mqar", "--mixers", "attn,moba", "--mixer-opt", "top_k=2", "--out-dir", "{out}"],
         "argument --mixer-opt: mixer 'attn' has no option 'top_k'"),
        (["compare", "mqar", "--model", "n_layers=0", "--out-dir", "{out}"],
         "argument --model: model.n_layers must be a positive int, got 0"),
        (["compare", "mqar", "--mixers", "hope", "--cuda-graphs", "--out-dir", "{out}"],
         "argument --cuda-graphs: needs --device cuda"),
        (["compare", "mqar", "--mixers", "hope", "--device", "tpu9", "--out-dir", "{out}"], "argument --device: "),
        (["compare", "mqar", "--mixers", "nosuch", "--out-dir", "{out}"], "argument --mixers: unknown mixer 'nosuch'"),
        (["compare", "mqar", "--mixers", "linear,recipe:uniform/linear", "--out-dir", "{out}"],
         "argument --mixers: mixer 'recipe:uniform/linear': a recipe mixer name is"),
        (["compare", "mqar", "--mixers", "recipe:constant_decay/linear/analytic", "--out-dir", "{out}"],
         "argument --mixers: mixer 'recipe:constant_decay/linear/analytic': Recipe(constant_decay, linear, "
         "analytic) does not build"),
        (["compare", "nosuch", "--out-dir", "{out}"], "argument task: unknown task 'nosuch'"),
        (["compare", "mqar", "--preset", "huge", "--out-dir", "{out}"], "argument --preset: unknown preset 'huge'"),
        (["compare", "mqar", "--lrs", "0.01,0", "--out-dir", "{out}"], "argument --lrs: must be > 0, got 0"),
        (["compare", "mqar", "--lrs", "0.01,nan", "--out-dir", "{out}"], "argument --lrs: must be a finite number"),
        (["compare", "mqar", "--lrs", "0.01", "--sweep-lr", "--out-dir", "{out}"],
         "argument --sweep-lr: not allowed with argument --lrs"),
        (["compare", "mqar", "--seeds", "0,x", "--out-dir", "{out}"], "argument --seeds: expected an integer, got 'x'"),
        (["compare", "mqar", "--workers", "0", "--out-dir", "{out}"], "argument --workers: must be > 0"),
        (["compare", "mqar", "--sweep", "pairs=4,8", "--out-dir", "{out}"],
         "argument --sweep: unknown mqar fields ['pairs']"),
        (["compare", "mqar", "--sweep", "num_kv_pairs", "--out-dir", "{out}"], "argument --sweep: --sweep must look"),
        (["compare", "mqar", "--sweep", "num_kv_pairs=", "--out-dir", "{out}"], "argument --sweep: --sweep must look"),
        (["compare", "mqar", "--sweep", "num_kv_pairs=4,,8", "--out-dir", "{out}"],
         "argument --sweep: --sweep must look"),
        (["compare", "mqar", "--sweep", "num_kv_pairs=four", "--out-dir", "{out}"],
         "argument --sweep: --sweep values must be numbers"),
        (["compare", "mqar", "--seeds", "-1", "--out-dir", "{out}"], "argument --seeds: must be >= 0, got -1"),
        (["compare", "mqar", "--seeds", "0,9223372036854775808", "--out-dir", "{out}"],
         "argument --seeds: must be < 2**63"),
        (["compare", "mqar", "--mixers", "gla,,attn", "--out-dir", "{out}"],
         "argument --mixers: expected a comma-separated list without empty items, got 'gla,,attn'"),
        (["compare", "mqar", "--mixers", "gla,", "--out-dir", "{out}"],
         "argument --mixers: expected a comma-separated"),
        (["compare", "mqar", "--out-dir", "{file}"], "argument --out-dir: '"),
        (["compare", "mqar", "--out-dir", "/proc/x"], "argument --out-dir: cannot create '/proc/x'"),
        (["compare", "mqar", "--run-dir", "{file}"], "argument --run-dir: '"),
        (["compare", "mqar", "--run-dir", "/proc/x/y"], "argument --run-dir: cannot create '/proc/x/y'"),
        (["compare", "mqar", "--run-dir", "", "--out-dir", "{out}"], "argument --run-dir: must not be empty"),
        (["compare", "mqar", "--save-tuned", "/proc/nope.json", "--out-dir", "{out}"],
         "argument --save-tuned: cannot write '/proc/nope.json'"),
        (["compare", "mqar", "--save-tuned", "{empty}", "--out-dir", "{out}"],
         "argument --save-tuned: '"),
        (["compare", "mqar", "--save-tuned", "{file}", "--out-dir", "{out}"],
         "argument --save-tuned: '"),
    ],
    "suite": [
        (["suite", "--mixers", "hope", "--cuda-graphs", "--run-dir", "{out}"],
         "argument --cuda-graphs: needs --device cuda"),
        (["suite", "--tasks", "mqar,nosuch", "--run-dir", "{out}"], "argument --tasks: unknown 'nosuch'"),
        (["suite", "--mixers", "attn,nosuch", "--run-dir", "{out}"], "argument --mixers: unknown mixer 'nosuch'"),
        (["suite", "--reuse-runs", "{empty}", "--run-dir", "{out}"], "argument --reuse-runs: no runs/ directory in"),
        (["suite", "--lrs", "-0.1", "--run-dir", "{out}"], "argument --lrs: must be > 0"),
        (["suite", "--seeds", "1,-2", "--run-dir", "{out}"], "argument --seeds: must be >= 0"),
        (["suite", "--run-dir", "{file}"], "argument --run-dir: '"),
        (["suite", "--run-dir", "/proc/x"], "argument --run-dir: cannot create '/proc/x'"),
        (["suite", "--save-tuned", "/proc/nope.json", "--run-dir", "{out}"], "argument --save-tuned: cannot write"),
        (["suite", "--tasks", "mqar,", "--run-dir", "{out}"], "argument --tasks: expected a comma-separated list"),
    ],
    "mixers": [
        (["mixers", "--describe", "nosuch"], "argument --describe: unknown mixer 'nosuch'"),
    ],
    "tokenizer": [
        (["tokenizer", "train", "{out}/none.txt", "--out", "{out}/b.json"], "argument corpus: no file or folder"),
        (["tokenizer", "train", "{file}", "--vocab", "100", "--out", "{out}/b.json"],
         "argument --vocab: must be >= 257 (the 256 bytes and an end-of-text token), got 100"),
        (["tokenizer", "train", "{file}", "--out", "{out}/b.json"],
         "argument corpus: '{file}' has 1 documents, too few to split"),
        (["tokenizer", "train", "{empty}", "--out", "{out}/b.json"], "argument corpus: '{empty}' holds no text file"),
        (["tokenizer", "fit", "{file}"], "argument ACTION: invalid choice: 'fit'"),
    ],
    "prepare": [
        (["prepare", "{out}/none.txt", "--out", "{out}"], "argument corpus: no file or folder"),
        (["prepare", "{file}", "--out", "{file}"], "argument --out: '"),
        (["prepare", "{file}", "--out", "{out}"], "argument corpus: '{file}' has 1 documents, too few to split"),
        (["prepare", "{file}", "--validation-fraction", "1", "--out", "{out}"],
         "argument --validation-fraction: must be below 1"),
        (["prepare", "{file}", "--tokenizer", "nosuch.json", "--out", "{out}"],
         "argument --tokenizer: 'nosuch.json' is neither 'bytes' nor a tokenizer file"),
    ],
    "train": [
        (["train", "mqar", "--mixer", "moba", "--mixer-opt", "block_size=0", "--out-dir", "{out}"],
         "argument --mixer-opt: mixer 'moba' with d_model 64, n_heads 4 and options"),
        (["train", "mqar", "--mixer", "attn", "--model", "n_heads=3", "--out-dir", "{out}"],
         "argument --model: mixer 'attn' with d_model 64, n_heads 3"),
        (["train", "mqar", "--mixer", "moba", "--mixer-opt", "gla.chunk_size=8", "--out-dir", "{out}"],
         "argument --mixer-opt: options for gla, which this command does not train (moba)"),
        (["train", "mqar", "--mixer", "nosuch", "--out-dir", "{out}"], "argument --mixer: unknown mixer 'nosuch'"),
        (["train", "text", "--mixer", "attn", "--set", "data={out}/none.txt", "--out-dir", "{out}"],
         "argument --set: data: no file or folder"),
        (["train", "mqar", "--mixer", "moba", "--mixer-opt", "blok=4", "--out-dir", "{out}"],
         "argument --mixer-opt: mixer 'moba' has no option 'blok'; its options: head_dim, "),
        (["train", "mqar", "--mixer", "moba", "--mixer-opt", "top_k=x", "--out-dir", "{out}"],
         "argument --mixer-opt: mixer 'moba' option 'top_k': expected int, got 'x'"),
        (["train", "mqar", "--mixer", "moba", "--mixer-opt", "top_k", "--out-dir", "{out}"],
         "argument --mixer-opt: expected OPTION=VALUE or MIXER.OPTION=VALUE, got 'top_k'"),
        (["train", "mqar", "--mixer", "attn", "--model", "d_modl=3", "--out-dir", "{out}"],
         "argument --model: [model] has no field 'd_modl'; known: d_model, n_layers, n_heads, ffn"),
        (["train", "mqar", "--mixer", "attn", "--model", "ffn=nosuch", "--out-dir", "{out}"],
         "argument --model: model.ffn must be one of swiglu, "),
        (["train", "--mixer", "attn", "--out-dir", "{out}"], "argument task: give a task, or `task = ...` in --config"),
        (["train", "mqar", "--out-dir", "{out}"], "argument --mixer: give a mixer, or `mixer = ...` in --config"),
        (["train", "--config", "{empty}", "--out-dir", "{out}"], "argument --config: no file '"),
        (["train", "nosuch", "--mixer", "attn", "--out-dir", "{out}"], "argument task: unknown task 'nosuch'"),
        (["train", "mqar", "--mixer", "attn", "--preset", "huge", "--out-dir", "{out}"], "argument --preset: unknown"),
        (["train", "mqar", "--mixer", "attn", "--set", "pairs=4", "--out-dir", "{out}"],
         "argument --set: unknown mqar fields ['pairs']"),
        (["train", "mqar", "--mixer", "attn", "--set", "num_kv_pairs", "--out-dir", "{out}"],
         "argument --set: expected FIELD=VALUE, got 'num_kv_pairs'"),
        (["train", "mqar", "--mixer", "attn", "--steps", "0", "--out-dir", "{out}"], "argument --steps: must be > 0"),
        (["train", "mqar", "--mixer", "attn", "--lr", "0", "--out-dir", "{out}"], "argument --lr: must be > 0"),
        (["train", "mqar", "--mixer", "attn", "--lr=-1e-3", "--out-dir", "{out}"], "argument --lr: must be > 0"),
        (["train", "mqar", "--mixer", "attn", "--batch-size", "0", "--out-dir", "{out}"],
         "argument --batch-size: must be > 0"),
        (["train", "mqar", "--mixer", "attn", "--checkpoint-every", "0", "--out-dir", "{out}"],
         "argument --checkpoint-every: must be > 0"),
        (["train", "mqar", "--mixer", "attn", "--optimizer", "lion", "--out-dir", "{out}"],
         "argument --optimizer: invalid choice: 'lion'"),
        (["train", "mqar", "--mixer", "attn", "--resume"], "argument --resume: needs --out-dir"),
        (["train", "mqar", "--mixer", "hope", "--cuda-graphs", "--out-dir", "{out}"],
         "argument --cuda-graphs: needs --device cuda"),
        (["train", "mqar", "--mixer", "hope", "--device", "gpu0", "--out-dir", "{out}"], "argument --device: "),
        (["train", "mqar", "--mixer", "attn", "--resume", "--out-dir", "{empty}"],
         "argument --resume: no checkpoint in out_dir"),
        (["train", "mqar", "--mixer", "attn", "--overwrite"], "argument --overwrite: needs --out-dir"),
        (["train", "mqar", "--mixer", "attn", "--resume", "--overwrite", "--out-dir", "{out}"],
         "argument --overwrite: not allowed with argument --resume"),
        (["train", "mqar", "--mixer", "attn", "--seed", "-1", "--out-dir", "{out}"], "argument --seed: must be >= 0"),
        (["train", "mqar", "--mixer", "attn", "--seed", str(2**64), "--out-dir", "{out}"],
         "argument --seed: must be < 2**63"),
        (["train", "mqar", "--mixer", "attn", "--out-dir", ""], "argument --out-dir: must not be empty"),
        (["train", "mqar", "--mixer", "attn", "--out-dir", "{file}"], "argument --out-dir: '"),
        (["train", "mqar", "--mixer", "attn", "--out-dir", "/proc/x"], "argument --out-dir: cannot create '/proc/x'"),
        (["train", "mqar", "--mixer", "attn", "--out-dir", "{file}/run"], "argument --out-dir: cannot create"),
    ],
    "generate": [
        (["generate", "{out}", "--prompt", "Hi"], "argument model_dir: no saved model in"),
        (["generate", "{empty}", "--prompt", "Hi"], "argument model_dir: no saved model in"),
        (["generate", "--seed", "-3", "{empty}", "--prompt", "Hi"], "argument --seed: must be >= 0"),
    ],
    "repro": [
        (["repro", "fig-99", "--out-dir", "{out}"], "argument NAME: invalid choice: 'fig-99'"),
        (["repro", "ttr-online-regression", "--set", "bandwith=0.05", "--out-dir", "{out}"],
         "argument --set: ttr-online-regression: unknown settings ['bandwith']; known: ["),
        (["repro", "nl-mad", "--set", "lrs=0.01,fast", "--out-dir", "{out}"],
         "argument --set: nl-mad: setting 'lrs': expected comma-separated float values, got '0.01,fast'"),
        (["repro", "nl-mad", "--set", "lrs=0.01,0", "--out-dir", "{out}"],
         "argument --set: nl-mad: setting 'lrs': every learning rate must be a finite number > 0"),
        (["repro", "ttr-mqar", "--set", "lrs=-0.01", "--out-dir", "{out}"],
         "argument --set: ttr-mqar: setting 'lrs': every learning rate must be a finite number > 0"),
        (["repro", "nl-optimizers", "--set", "adamw_half_multipliers=1,0", "--out-dir", "{out}"],
         "argument --set: nl-optimizers: setting 'adamw_half_multipliers': every learning rate must be"),
        (["repro", "nl-optimizers", "--set", "lr_multiplier=1", "--out-dir", "{out}"],
         "argument --set: nl-optimizers: unknown settings ['lr_multiplier']; known: ["),
        (["repro", "am-stress", "--set", "sizes", "--out-dir", "{out}"], "argument --set: expected FIELD=VALUE"),
        (["repro", "am-stress", "--full", "--out-dir", "{out}"],
         "argument --full: am-stress has no full variant (variants: default, quick)"),
        (["repro", "am-stress", "--quick", "--full", "--out-dir", "{out}"],
         "argument --full: not allowed with argument --quick"),
        (["repro", "ttr-mqar", "--paper-scale", "--out-dir", "{out}"], "unrecognized arguments: --paper-scale"),
        (["repro", "ttr-mqar", "--out-dir", "{file}"], "argument --out-dir: '"),
        (["repro", "ttr-mqar", "--out-dir", "/proc/x"], "argument --out-dir: cannot create '/proc/x'"),
    ],
    "showcase": [
        (["showcase", "--seq-len", "0"], "argument --seq-len: must be > 0"),
    ],
}
PARAMS = [pytest.param(argv, message, id=f"{command}-{i}") for command, cases in CASES.items()
          for i, (argv, message) in enumerate(cases)]


def test_every_command_has_bad_input_cases():
    from regmem.lab.cli import ADDERS

    commands = {adder.removeprefix("add_") for _, adder in ADDERS}
    assert set(CASES) == commands, f"add bad-input cases to CASES for {sorted(commands - set(CASES))}"


@pytest.mark.parametrize(("argv", "message"), PARAMS)
def test_bad_input_exits_2_with_one_error_line_naming_the_argument_and_runs_nothing(argv, message, tmp_path, capsys):
    out, empty, file = tmp_path / "out", tmp_path / "empty", tmp_path / "file"
    empty.mkdir()
    file.write_text("a file\n")
    argv = [a.replace("{out}", str(out)).replace("{empty}", str(empty)).replace("{file}", str(file)) for a in argv]
    with pytest.raises(SystemExit) as exit_:
        main(argv)
    captured = capsys.readouterr()
    lines = captured.err.strip().splitlines()
    assert exit_.value.code == 2
    assert lines[0].startswith("usage: regmem") and "Traceback" not in captured.err
    errors = [line for line in lines if "error" in line]
    assert len(errors) == 1 and errors[0] == lines[-1]
    message = message.replace("{out}", str(out)).replace("{empty}", str(empty)).replace("{file}", str(file))
    assert lines[-1].startswith(f"regmem: error: {message}"), lines[-1]
    assert captured.out == "" and not out.exists() and not any(empty.iterdir())
    assert sorted(p.name for p in tmp_path.iterdir()) == ["empty", "file"] and file.read_text() == "a file\n"


def test_generate_names_the_model_dir_when_the_model_is_not_byte_level(tmp_path, capsys):
    from regmem.models import LM, LMConfig

    LM(LMConfig(vocab_size=16, d_model=16, n_heads=2, mixer="gla")).save_pretrained(tmp_path)
    with pytest.raises(SystemExit) as exit_:
        main(["generate", str(tmp_path), "--prompt", "Hi"])
    err = capsys.readouterr().err.strip().splitlines()
    assert exit_.value.code == 2 and err[-1].startswith("regmem: error: argument model_dir: model_dir must hold a "
                                                        "byte-level model")
