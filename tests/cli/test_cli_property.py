"""Every command, fed generated arguments (hypothesis), either gets to its work or refuses cleanly: exit 0, or exit 2
with exactly one `regmem: error:` line and no traceback, and nothing written, in the working directory or elsewhere;
and a line with a value known to be bad never gets to the work.

The arguments are drawn per command from its flags, each with values that may pass and values that must not
(negative, zero, out of range, empty, non-numbers, empty list items, files where directories belong and the
reverse, paths that cannot be created), and junk text that may do either. The work
itself (training, sweeps, reproductions, benchmarks, sampling, analyses) is replaced by a stub that ends the command
there: what is tested is that every check completes before the work starts. The examples are derived from the test
(tests/conftest.py), four times the profile's count per command.
"""

import contextlib
import io
import os
import tempfile
from pathlib import Path

import pytest
import torch
from hypothesis import example, given, settings
from hypothesis import strategies as st

from regmem.lab.cli import ADDERS, main


def values(good: list[str], bad: list[str]) -> tuple[list[str], list[str]]:
    """A flag's candidates: `good` ones may pass (alone; with other flags, or in context, they may still be
    refused), `bad` ones must be refused wherever they appear."""
    return good, bad


OUT = values(["{out}", "{out}/a/b", "{empty}"], ["{file}", "{file}/x", "", "/proc/x", "/proc/x/y"])
JSON_OUT = values(["{out}", "{out}/a/b", "{out}.json"],
                  ["{file}", "{empty}", "{file}/x", "", "/proc/x", "/proc/x.json"])
SEED = values(["0", "7", str(2**63 - 1)], ["-1", str(2**63), str(2**64 + 1), "x", "1.5", ""])
SEEDS = values(["0", "0,1", str(2**63 - 1)], ["-1", "0,,1", "1,-2", "0,", str(2**63), "x", ""])
POSITIVE = values(["1", "2"], ["0", "-3", "x", "1e3", ""])
LRS = values(["0.01", "1e-3", "0.01,0.1"], ["0", "-0.1", "nan", "inf", "x", "0.01,", ",0.01", "0.01,,0.1"])
LR = values(["0.01", "1e-3"], ["0", "-0.1", "nan", "inf", "x", ""])
MIXERS = values(["attn", "gla", "linear,attn"], ["gla,,attn", "gla,", "nosuch", "attn,nosuch", "",
                                                  "recipe:uniform/linear", "recipe:constant_decay/linear/analytic"])
MIXER = values(["attn", "gla"], ["nosuch", "gla,attn", "", "recipe:uniform/linear"])
TASKS = values(["mqar", "s5", "text"], ["nosuch", ""])
SWITCH = None  # a flag without a value (whether it may pass depends on the rest of the line)
JUNK = st.text(alphabet=st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=6)  # may pass or not

# command -> (positional candidates (or None), {flag: candidates, or SWITCH})
MODEL = values(["d_model=32", "n_layers=2"], ["d_modl=3", "d_model=0", "d_model", "ffn=nosuch"])
MIXER_OPT = values(["short_conv=2"], ["nosuch=1", "short_conv=x", "short_conv", ".short_conv=2"])
FRACTION = values(["0.1", "0.04"], ["0", "1", "-0.1", "x", ""])
COMMANDS = {
    "mixers": (None, {"--describe": MIXER}),
    # a positional candidate of several words is split at spaces (the action, then its argument)
    "tokenizer": (values(["train {corpus}", "train {file}"], ["train {out}/none.txt", "fit {corpus}"]),
                  {"--out": values(["{out}/bpe.json"], ["/proc/x/bpe.json"]),
                   "--vocab": values(["300", "8192"], ["0", "-1", "x", "100"]), "--exclude": values(["tests"], []),
                   "--validation-fraction": FRACTION, "--test-fraction": FRACTION}),
    "prepare": (values(["{corpus}", "{file}"], ["{out}/none.txt", ""]),
                {"--out": values(["{out}", "{out}/p"], ["{file}", "/proc/x", ""]),
                 "--tokenizer": values(["bytes"], []), "--eot": values(["0"], ["x", "1.5"]),
                 "--validation-fraction": FRACTION, "--no-progress": SWITCH}),
    "recipes": (None, {}),
    "levels": (None, {"--model": values(["attn", "hope"], ["nosuch", "{empty}", "{file}", ""]),
                      "--d-model": values(["16", "32"], ["0", "-16", "x"]),
                      "--n-layers": values(["1", "2"], ["0", "x"]),
                      "--ffn": values(["swiglu", "cms", "none"], ["moe", ""]),
                      "--optimizer": values(["adamw", "sgd", "none"], ["lion"])}),
    "analyze": (values(["snr", "context-growth"], ["nosuch"]), {"--out-dir": OUT, "--seed": SEED, "--quick": SWITCH}),
    "bench": (values(["ops"], []), {"--ops": values(["delta_rule"], ["delta_rule,,linear_attn", "nosuch", ""]),
                                    "--forms": values(["chunk", "chunk,recurrent"], ["fast", "chunk,"]),
                                    "--seq-lens": values(["64"], ["64,0", "a"]), "--heads": POSITIVE,
                                    "--min-run-time": values(["0"], ["-1", "nan", "x"]), "--out-dir": OUT}),
    "compare": (TASKS, {"--mixers": MIXERS, "--seeds": SEEDS, "--lrs": LRS, "--sweep-lr": SWITCH,
                        "--sweep": values(["num_kv_pairs=4,8"], ["num_kv_pairs=", "num_kv_pairs=4,,8", "pairs=4",
                                                                  "num_kv_pairs", "=4", "num_kv_pairs=x"]),
                        "--workers": POSITIVE, "--out-dir": OUT, "--run-dir": OUT, "--save-tuned": JSON_OUT,
                        "--eval-lengths": values(["64"], ["0", "64,", "x"]),
                        "--preset": values(["tiny", "quick"], ["huge"]), "--device": values(["cpu"], ["tpu9", ""]),
                        "--cuda-graphs": SWITCH, "--model": MODEL, "--mixer-opt": MIXER_OPT}),
    "suite": (None, {"--tasks": values(["mqar", "mqar,s5", "mad"], ["mqar,", "nosuch"]), "--mixers": MIXERS,
                     "--seeds": SEEDS, "--lrs": LRS, "--run-dir": OUT, "--save-tuned": JSON_OUT,
                     "--reuse-runs": values([], ["{empty}", "{out}", "{file}", ""]), "--workers": POSITIVE}),
    "train": (TASKS, {"--mixer": MIXER, "--preset": values(["tiny"], ["huge"]),
                      "--set": values(["num_kv_pairs=4"], ["pairs=4", "num_kv_pairs", "=3"]),
                      "--steps": POSITIVE, "--lr": LR, "--batch-size": POSITIVE, "--seed": SEED, "--out-dir": OUT,
                      "--checkpoint-every": POSITIVE, "--resume": SWITCH, "--overwrite": SWITCH,
                      "--optimizer": values(["adamw", "m3"], ["lion"]), "--mlp-lr-scale": values(["1"], ["0", "-1"]),
                      "--device": values(["cpu"], ["gpu0"]), "--cuda-graphs": SWITCH, "--model": MODEL,
                      "--mixer-opt": MIXER_OPT}),
    "generate": (values(["{model}"], ["{empty}", "{out}", "{file}"]),
                 {"--prompt": values(["Hi"], [""]), "--max-new-bytes": POSITIVE,
                  "--temperature": values(["0", "0.8"], ["-1", "nan"]), "--top-k": POSITIVE, "--seed": SEED}),
    "repro": (values(["ttr-mqar", "am-stress"], ["fig-99"]),
              {"--out-dir": OUT, "--quick": SWITCH, "--full": SWITCH,
               "--set": values(["steps=3"], ["nosuch=1", "steps", "=1"])}),
    "showcase": (None, {"--seq-len": POSITIVE}),
}

REQUIRED = {"train": "--mixer", "generate": "--prompt", "tokenizer": "--out", "prepare": "--out"}

# Lines every run checks besides the generated ones (`hypothesis.example`): (argv, the known-bad values on it)
EXAMPLES = {
    "train": [(["train", "mqar", "--mixer", "attn", "--seed", "-1"], ["-1"]),
              (["train", "mqar", "--mixer", "attn", "--out-dir", ""], [""]),
              (["train", "mqar", "--mixer", "attn", "--out-dir", "/proc/x"], ["/proc/x"])],
    "generate": [(["generate", "{model}", "--prompt", "Hi", "--seed", "-1"], ["-1"])],
    "compare": [(["compare", "mqar", "--seeds", "-1"], ["-1"]),
                (["compare", "mqar", "--save-tuned", "/proc/x.json"], ["/proc/x.json"])],
}

# The work each command ends in: replaced by `_reached_the_work` (module, attribute)
WORK = [("regmem.lab.experiments.runs", "train_and_evaluate"), ("regmem.lab.experiments.compare", "run_compare"),
        ("regmem.lab.experiments.suite", "suite"), ("regmem.lab.experiments.repro", "run_repro"),
        ("regmem.lab.experiments.generation", "generate_text"), ("regmem.lab.experiments.analyze", "analyze_snr"),
        ("regmem.lab.experiments.analyze_context_growth", "analyze_context_growth"), ("regmem.lab.bench", "run"),
        ("regmem.lab.experiments.showcase", "showcase"), ("regmem.nested", "describe_levels"),
        ("regmem.tasks.tokenizer", "train_bpe"), ("regmem.tasks.corpus", "prepare_corpus")]


class ReachedTheWork(Exception):
    pass


def _reached_the_work(*args, **kwargs):
    raise ReachedTheWork


def test_every_command_has_a_property_strategy():
    assert set(COMMANDS) == {adder.removeprefix("add_") for _, adder in ADDERS}


@st.composite
def command_lines(draw, command: str) -> tuple[list[str], list[str]]:
    """(a command line, the known-bad values on it)."""
    positionals, flags = COMMANDS[command]
    argv, bad = [command], []

    def value(candidates: tuple[list[str], list[str]]) -> str:
        good, known_bad = candidates
        if draw(st.integers(0, 9)) == 0:  # one value in ten is junk
            return draw(JUNK)
        drawn = draw(st.sampled_from(good * 3 + known_bad))  # good ones weighted up: more lines reach the work
        if drawn in known_bad:
            bad.append(drawn)
        return drawn

    if positionals is not None:
        argv += value(positionals).split(" ")
    chosen = draw(st.lists(st.sampled_from(sorted(flags)), unique=True, max_size=3)) if flags else []
    if command in REQUIRED and REQUIRED[command] not in chosen:
        chosen.append(REQUIRED[command])
    for flag in chosen:
        argv += [flag] if flags[flag] is SWITCH else [flag, value(flags[flag])]
    return argv, bad


def snapshot(root: Path) -> dict[str, bytes | None]:
    return {str(p.relative_to(root)): (p.read_bytes() if p.is_file() else None) for p in sorted(root.rglob("*"))}


def run_command(argv: list[str]) -> tuple[int, str, bool]:
    """(exit status, stderr, whether the work was reached) of `regmem argv`."""
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        try:
            main(argv)
        except SystemExit as exit_:
            return int(exit_.code or 0), err.getvalue(), False
        except ReachedTheWork:
            return 0, err.getvalue(), True
    return 0, err.getvalue(), False


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_a_command_reaches_its_work_or_refuses_with_one_error_line_and_writes_nothing(command, monkeypatch):
    import importlib

    for module, name in WORK:
        monkeypatch.setattr(importlib.import_module(module), name, _reached_the_work)
    threads = torch.get_num_threads()
    outcomes = {"ran": 0, "refused": 0}

    @settings(max_examples=4 * settings.default.max_examples)
    @given(line=command_lines(command))
    def check(line):
        argv, bad = line
        with tempfile.TemporaryDirectory() as directory:
            root = Path(directory)
            (root / "empty").mkdir()
            (root / "file").write_text("a file\n")
            (root / "model").mkdir()
            (root / "model" / "config.json").write_text("{}")  # enough for the argument check; the work is stubbed
            (root / "corpus.txt").write_text("\n\n".join(f"paragraph {i} " * 8 for i in range(40)))
            places = {"{out}": str(root / "out"), "{empty}": str(root / "empty"), "{file}": str(root / "file"),
                      "{model}": str(root / "model"), "{corpus}": str(root / "corpus.txt")}
            for key, value in places.items():
                argv = [a.replace(key, value) for a in argv]
            before, cwd = snapshot(root), os.getcwd()
            os.chdir(root)
            try:
                status, err, ran = run_command(argv)
            finally:
                os.chdir(cwd)
                torch.set_num_threads(threads)
            assert "Traceback" not in err, (argv, err)
            assert status in (0, 2), (argv, status, err)
            if status == 2:
                errors = [line for line in err.splitlines() if line.startswith("regmem: error:")]
                assert len(errors) == 1 and err.strip().splitlines()[-1] == errors[0], (argv, err)
                assert snapshot(root) == before, (argv, "wrote files on a refusal")
                outcomes["refused"] += 1
            else:
                assert not bad, (argv, f"ran with {bad}: a bad value must be refused before the work")
                assert ran or command in ("recipes", "mixers"), (argv, "exit 0 without reaching the work")
                outcomes["ran"] += 1

    for line in EXAMPLES.get(command, []):
        check = example(line=line)(check)
    check()
    if command not in ("recipes", "showcase"):  # those have few ways to be wrong: most of their lines run
        assert outcomes["refused"] > 0, outcomes
