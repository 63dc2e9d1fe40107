"""`make demo` is honest: the README names the command the Makefile runs, that command runs at least three seeds,
its mixers' learning rates were tuned at the demo's own setting (16 pairs, not the preset's 8), and the README's
first table is the committed output of that command (docs/demo/leaderboard.md), not an older run's."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

from regmem.lab.experiments.tuned import load_tuned, setting_key

ROOT = Path(__file__).resolve().parents[1]
DEMO_OUTPUT = ROOT / "docs" / "demo" / "leaderboard.md"


def demo_command() -> list[str]:
    """The Makefile's demo recipe as arguments after `regmem` (continuation lines joined)."""
    text = (ROOT / "Makefile").read_text().replace("\\\n", " ")
    recipe = re.search(r"^demo:.*\n\t(.+)$", text, re.MULTILINE).group(1)
    args = shlex.split(recipe)
    assert args[0].endswith("/regmem"), recipe
    return args[1:]


def option(args: list[str], name: str) -> str:
    return args[args.index(name) + 1]


def first_table(text: str) -> list[str]:
    """The lines of the first markdown table in `text`."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("| "))
    end = next((i for i in range(start, len(lines)) if not lines[i].startswith("|")), len(lines))
    return lines[start:end]


def test_the_readme_names_the_command_make_demo_runs():
    readme = " ".join((ROOT / "README.md").read_text().split())  # the command may wrap
    assert "regmem " + " ".join(demo_command()) in readme


def test_the_demo_runs_at_least_three_seeds():
    assert len(option(demo_command(), "--seeds").split(",")) >= 3


def test_the_demo_mixers_were_tuned_at_the_demos_own_setting():
    args = demo_command()
    field, value = option(args, "--sweep").split("=")
    tasks = load_tuned()[option(args, "--preset")]["tasks"]
    tuned = tasks.get(setting_key(args[1], {field: int(value)}), {})
    assert set(option(args, "--mixers").split(",")) <= set(tuned), sorted(tuned)


def test_the_readme_table_is_the_committed_output_of_the_demo():
    assert first_table((ROOT / "README.md").read_text()) == first_table(DEMO_OUTPUT.read_text())
