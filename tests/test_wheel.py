"""The installed package is the tested package: the wheel is built from this checkout and installed into a fresh
virtual environment (beside the already installed torch and the other dependencies, which it reads from this one),
and `regmem` run from there, outside the checkout: `--help`, a `tiny` training run and the tuned-lr lookup, which
must give what the checkout gives. Every non-Python file of the package must be in the wheel."""

import json
import os
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import regmem

ROOT = Path(regmem.__file__).parents[2]
PACKAGE = ROOT / "src" / "regmem"
MIXERS = ("attn", "linear", "mamba2", "gated_deltanet")
LOOKUP = ("import json; from regmem.lab.experiments.compare import lr_grid; from regmem.lab.experiments.presets import "
          "PRESETS; import regmem; grid = lr_grid(PRESETS['quick'], None, {'num_kv_pairs': 16}); "
          f"print(json.dumps({{'file': regmem.__file__, 'lrs': [grid('mqar', m) for m in {list(MIXERS)!r}]}}))")


def build_wheel(work: Path) -> Path:
    """The wheel of a copy of the checkout (pyproject.toml, README.md, src/), built without isolation."""
    source = work / "source"
    source.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, source / name)
    shutil.copytree(ROOT / "src", source / "src", ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--no-index", "-q",
                    "-w", str(work / "dist"), str(source)], check=True, capture_output=True, text=True)
    (wheel,) = (work / "dist").glob("regmem-*.whl")
    return wheel


def fresh_environment(work: Path, wheel: Path) -> Path:
    """A new virtual environment with the wheel installed; the dependencies are this environment's (a .pth file
    appends its site-packages after the new one's, so the wheel's regmem comes first)."""
    env = work / "env"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(env)], check=True)
    purelib = Path(subprocess.run([env / "bin" / "python", "-c", "import sysconfig; print(sysconfig.get_paths()"
                                   "['purelib'])"], check=True, capture_output=True, text=True).stdout.strip())
    (purelib / "dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    subprocess.run([sys.executable, "-m", "pip", "--python", str(env / "bin" / "python"), "install", "--no-deps",
                    "--no-index", "--ignore-installed", "-q", str(wheel)], check=True, capture_output=True, text=True)
    return env


def test_the_wheel_holds_every_file_the_package_opens_and_runs_from_a_fresh_environment(tmp_path):
    wheel = build_wheel(tmp_path)
    shipped = {name for name in zipfile.ZipFile(wheel).namelist() if name.startswith("regmem/")}
    data = {f"regmem/{p.relative_to(PACKAGE)}" for p in PACKAGE.rglob("*")
            if p.is_file() and p.suffix not in (".py", ".pyc") and "__pycache__" not in p.parts}
    assert "regmem/lab/experiments/tuned_lr.json" in data and data <= shipped, sorted(data - shipped)

    env = fresh_environment(tmp_path, wheel)
    run_env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    run_env["PATH"] = f"{env / 'bin'}{os.pathsep}{run_env.get('PATH', '')}"
    outside = tmp_path / "elsewhere"
    outside.mkdir()

    def run(*argv):
        return subprocess.run(argv, cwd=outside, env=run_env, capture_output=True, text=True, timeout=300)

    helped = run(str(env / "bin" / "regmem"), "--help")
    assert helped.returncode == 0 and "regmem: sequence models" in helped.stdout, helped.stderr
    installed = json.loads(run(str(env / "bin" / "python"), "-c", LOOKUP).stdout)
    checkout = json.loads(subprocess.run([sys.executable, "-c", LOOKUP], capture_output=True, text=True,
                                         check=True).stdout)
    assert Path(installed["file"]).is_relative_to(env), installed["file"]  # the wheel's regmem, not the checkout's
    assert installed["lrs"] == checkout["lrs"] and checkout["lrs"] != [[0.01]] * len(MIXERS), (installed, checkout)
    trained = run(str(env / "bin" / "regmem"), "train", "mqar", "--mixer", "attn", "--preset", "tiny", "--steps", "2",
                  "--no-progress", "--out-dir", "run")
    assert trained.returncode == 0, trained.stderr
    assert {"model.safetensors", "config.json", "manifest.json"} <= {p.name for p in (outside / "run/model").iterdir()}
