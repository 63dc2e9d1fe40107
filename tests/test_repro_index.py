"""The claims index (docs/repro/README.md) stays true to the repository: every `regmem repro` reproduction has a row,
every `regmem ...` command it names parses (a repro's `--set` keys and variant included), every test it names exists
(file and function), every `make` target exists, every report under docs/repro/ and docs/analysis/ is linked from
it, every row ends in a known verdict, and its table of counts matches the rows."""

from __future__ import annotations

import contextlib
import io
import json
import re
import shlex
from collections import Counter
from pathlib import Path

import pytest

from regmem.lab.cli import build_parser
from regmem.lab.experiments.repro import REPROS

ROOT = Path(__file__).resolve().parents[1]
INDEX = ROOT / "docs" / "repro" / "README.md"
VERDICTS = ("holds in part", "holds", "does not hold at this scale", "not resolved at this scale", "erratum",
            "not testable here", "not run")
ROW = re.compile(r"^\| (?P<id>[A-Z]+-\d+) \|")
CODE = re.compile(r"`([^`]+)`")
TEST_REF = re.compile(r"^(?P<path>tests/[\w/]+\.py)(?:::(?P<name>\w+))?$")
LINK = re.compile(r"\]\(([^)\s]+\.md)\)")


def claim_rows(text: str) -> list[list[str]]:
    """The cells of every claim row (`| ID-n | claim | where | check | measured | verdict |`)."""
    return [[cell.strip() for cell in line.strip().strip("|").split(" | ")]
            for line in text.splitlines() if ROW.match(line)]


def verdict_of(cell: str) -> str | None:
    """The verdict a row's last cell begins with (the longest match first), or None."""
    return next((v for v in VERDICTS if cell.startswith(v)), None)


def code_spans(text: str) -> list[str]:
    return [span.strip() for span in CODE.findall(text)]


def command_problem(command: str) -> str | None:
    """Why `command` (`regmem ...`) would not run as written, or None: it must parse, and a repro's variant and
    `--set` keys must be known to that reproduction."""
    argv = shlex.split(command)[1:]
    try:
        with contextlib.redirect_stderr(io.StringIO()):
            args = build_parser().parse_args(argv)
    except SystemExit:
        return "does not parse"
    if args.command == "repro":
        variant = "quick" if args.quick else "full" if args.full else "default"
        try:
            REPROS[args.name].settings(variant, dict(args.settings))
        except ValueError as err:
            return str(err)
    return None


def missing_test(ref: str) -> str | None:
    """Why the test reference `tests/x.py` or `tests/x.py::test_name` names nothing, or None."""
    match = TEST_REF.match(ref)
    if match is None:
        return "not of the form tests/<path>.py[::test_name]"
    path = ROOT / match["path"]
    if not path.is_file():
        return "no such file"
    if match["name"] and not re.search(rf"^def {re.escape(match['name'])}\(", path.read_text(), re.M):
        return f"no function {match['name']} in {match['path']}"
    return None


def make_targets() -> set[str]:
    return set(re.findall(r"^([\w-]+):", (ROOT / "Makefile").read_text(), re.M))


def reference_problems(text: str) -> list[str]:
    """Every named command, test or make target of `text` that does not exist, with the reason."""
    problems = []
    for span in code_spans(text):
        if span.startswith("regmem "):
            why = command_problem(span)
        elif span.startswith("tests/"):
            why = missing_test(span)
        elif span.startswith("make "):
            why = None if span.split()[1] in make_targets() else "no such make target"
        else:
            continue
        if why:
            problems.append(f"`{span}`: {why}")
    return problems


def linked_reports(text: str) -> set[Path]:
    return {(INDEX.parent / ref).resolve() for ref in LINK.findall(text)}


def count_table(text: str) -> dict[str, list[int]]:
    """The counts table: paper -> [claims, then one count per verdict in the header's order]."""
    table = {}
    for line in text.split("<!-- counts")[1].split("\n## ")[0].splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 2 + len(VERDICTS) and cells[1].isdigit():
            table[cells[0]] = [int(c) for c in cells[1:]]
    return table


def counted_rows(text: str) -> dict[str, list[int]]:
    """The same counts, computed from the rows of each `## ` section."""
    header = [c.strip() for c in text.split("<!-- counts")[1].splitlines()[1].strip().strip("|").split("|")][2:]
    counts = {}
    for section in text.split("\n## ")[1:]:
        rows = claim_rows(section)
        if rows:
            tally = Counter(verdict_of(row[-1]) for row in rows)
            counts[section.splitlines()[0].split(" (")[0].split(":")[0].strip()] = [len(rows)] + [
                tally[v] for v in header]
    counts["all"] = [sum(column) for column in zip(*counts.values(), strict=True)]
    return counts


@pytest.fixture(scope="module")
def text() -> str:
    return INDEX.read_text()


def test_every_repro_has_a_row_that_runs_it(text):
    named = {shlex.split(span)[2] for row in claim_rows(text) for span in code_spans(" | ".join(row))
             if span.startswith("regmem repro ")}
    missing = sorted(set(REPROS) - named)
    assert not missing, f"reproductions without a row in {INDEX.name}: {missing}"


def test_every_command_test_and_make_target_named_exists(text):
    problems = reference_problems(text)
    assert not problems, "the index names what does not exist:\n" + "\n".join(problems)


def test_every_report_is_linked(text):
    folders = (ROOT / "docs" / "repro", ROOT / "docs" / "analysis")
    reports = {p.resolve() for folder in folders for p in folder.glob("*.md") if p.name != "README.md"}
    missing = sorted(str(p.relative_to(ROOT)) for p in reports - linked_reports(text))
    assert not missing, f"reports not linked from {INDEX.name}: {missing}"
    dangling = sorted(str(p) for p in linked_reports(text) if not p.is_file())
    assert not dangling, f"links to missing files: {dangling}"


def test_every_row_has_six_cells_a_check_and_a_known_verdict(text):
    rows = claim_rows(text)
    assert len(rows) > 100
    bad = [row[0] for row in rows if len(row) != 6 or not row[3] or verdict_of(row[-1]) is None]
    assert not bad, f"rows without six cells, a check (a command, a test or —) or a verdict of {VERDICTS}: {bad}"
    ids = Counter(row[0] for row in rows)
    assert not [i for i, n in ids.items() if n > 1], "row ids repeat"


def test_not_run_rows_name_who_runs_them(text):
    bad = [row[0] for row in claim_rows(text) if verdict_of(row[-1]) == "not run"
           and not re.search(r"issue \d+ item \d+|no issue \d+ item", row[-1])]
    assert not bad, f"`not run` rows that name no issue item: {bad}"


NEGATIVE = ("does not hold at this scale", "holds in part")


def lr_cells(result) -> list[dict]:
    """Every cell of a report's JSON that chose a learning rate: a protocol cell (a dict with "best_lr" and
    "lr_means") or an nl-optimizers row (with "brackets", one per half of its lr pair)."""
    if isinstance(result, dict):
        own = [result] if ("best_lr" in result and "lr_means" in result) or "brackets" in result else []
        return own + [cell for value in result.values() for cell in lr_cells(value)]
    if isinstance(result, list):
        return [cell for value in result for cell in lr_cells(value)]
    return []


def unbracketed(cell: dict) -> str | None:
    """Why a cell's choice cannot carry a negative verdict, or None: its best lr must be interior to its grid of >= 2
    learning rates (after any extension past an edge) and its score a mean over >= 2 seeds."""
    if "brackets" in cell:
        if all(where == "none finite" or where.startswith("follows ") for where in cell["brackets"].values()):
            return None  # diverged at every lr, or trained at another's choice (checked there): no choice of its own
        edges = {half: where for half, where in cell["brackets"].items() if where != "interior"}
        if edges:
            return "best " + ", ".join(f"{half} at {where}" for half, where in edges.items())
        return f"{cell['seeds']} seed" if cell["seeds"] < 2 else None
    means = {float(lr): value for lr, value in cell["lr_means"].items()}
    grid, best = sorted(means), float(cell["best_lr"])
    plateau = any(means[lr] == means[best] for lr in grid[1:-1])  # an interior point ties the best (e.g. 100 %)
    if len(grid) < 2 or not (grid[0] < best < grid[-1] or plateau):
        return f"best lr {cell['best_lr']:g} not interior to {', '.join(f'{lr:g}' for lr in grid)}"
    if cell.get("seeds", 2) < 2:
        return f"{cell['seeds']} seed"
    return None


REPORT_LINK = re.compile(r"\]\(([\w.-]+)\.md\)")
RESULTS_FILE = re.compile(r"benchmarks/results/[\w./-]+?\.(?:md|json)")


def trains(result) -> bool:
    """Whether a report's JSON holds trained runs (a dict with "train_seconds" anywhere)."""
    if isinstance(result, dict):
        return "train_seconds" in result or any(trains(value) for value in result.values())
    return isinstance(result, list) and any(trains(value) for value in result)


def row_reports(row: list[str]) -> list[Path]:
    """The JSON reports a row's verdict rests on: per `regmem repro` command of its check, docs/repro/<name>.json, or
    the JSON beside the report the check links where it links one; and every JSON of benchmarks/results the row
    names (the JSON beside a named report, or a leaderboard's results.json)."""
    reports = []
    linked = [INDEX.parent / f"{name}.json" for name in REPORT_LINK.findall(row[3])]
    for span in code_spans(row[3]):
        if span.startswith("regmem repro "):
            reports += linked or [INDEX.parent / f"{shlex.split(span)[2]}.json"]
    for name in RESULTS_FILE.findall(" | ".join(row)):
        path = ROOT / name
        own = path.with_suffix(".json")
        reports.append(own if own.is_file() or path.name != "leaderboard.md" else path.with_name("results.json"))
    return list(dict.fromkeys(reports))


def bracket_problems(text: str) -> list[str]:
    """Every negative verdict (does not hold, holds in part) whose reports (`row_reports`) are missing, trained at
    one learning rate with no grid, or chose a learning rate that its grid does not bracket, or on fewer than two
    seeds, with the reason."""
    problems = []
    for row in claim_rows(text):
        if verdict_of(row[-1]) not in NEGATIVE:
            continue
        for report in row_reports(row):
            if not report.is_file():
                problems.append(f"{row[0]}: no report {report.relative_to(ROOT)}")
                continue
            result = json.loads(report.read_text())
            cells = lr_cells(result)
            if not cells and trains(result):
                problems.append(f"{row[0]} ({report.name}): trained with no learning-rate grid")
            for cell in cells:
                why = unbracketed(cell)
                if why:
                    label = cell.get("arm") or cell.get("mixer") or cell.get("task")
                    problems.append(f"{row[0]} ({report.name}, {label}): {why}")
    return problems


def test_negative_verdicts_rest_on_bracketed_grids_and_two_seeds(text):
    problems = bracket_problems(text)
    assert not problems, "negative verdicts on unbracketed learning-rate choices:\n" + "\n".join(problems)


def test_an_unbracketed_negative_verdict_is_caught():
    edge = {"best_lr": 0.03, "lr_means": {"0.01": 0.5, "0.03": 0.6}, "seeds": 2}
    inside = {"best_lr": 0.03, "lr_means": {"0.01": 0.5, "0.03": 0.6, "0.1": 0.4}, "seeds": 2}
    assert unbracketed(edge) and unbracketed({**inside, "seeds": 1}) and unbracketed(inside) is None
    plateau = {"best_lr": 0.01, "lr_means": {"0.01": 1.0, "0.03": 1.0, "0.1": 0.5}, "seeds": 2}
    assert unbracketed(plateau) is None  # the tie rule picked the edge of a plateau that reaches inside
    assert lr_cells({"rows": [edge, {"x": inside}]}) == [edge, inside]
    pair = {"brackets": {"lr": "interior", "adamw_lr": "high edge"}, "seeds": 2}
    assert unbracketed(pair) and unbracketed({**pair, "brackets": {"lr": "interior"}}) is None
    assert unbracketed({"brackets": {"lr": "interior"}, "seeds": 1}) and lr_cells([pair]) == [pair]
    assert unbracketed({"brackets": {"lr": "none finite"}, "seeds": 2}) is None
    assert unbracketed({"brackets": {"lr": "follows muon", "adamw_lr": "follows muon"}, "seeds": 2}) is None


def test_a_negative_verdict_reads_every_report_it_rests_on_and_needs_them(text):
    nl32 = next(row for row in claim_rows(text) if row[0] == "NL-32")
    assert ROOT / "benchmarks/results/nl-mad-mlp-rule/nl-mad.json" in row_reports(nl32)  # named in its result
    linked = ["X-1", "c", "s", "`regmem repro ttr-mqar --set d_model=16` ([report](ttr-mqar-d16.md))", "r", "v"]
    assert row_reports(linked) == [INDEX.parent / "ttr-mqar-d16.json"]  # the linked report, not the default one
    missing = "| X-1 | claim | Sec. 1 | `regmem repro no-such-repro` | numbers | holds in part (why) |\n"
    assert bracket_problems(missing) == ["X-1: no report docs/repro/no-such-repro.json"]
    one_lr = {"settings": {"lr": 0.01}, "rows": [{"mixer": "linear", "accuracy": 0.7, "train_seconds": 30.0}]}
    assert trains(one_lr) and not lr_cells(one_lr) and not trains({"rows": [{"accuracy": 0.7}]})


def test_the_counts_table_matches_the_rows(text):
    assert count_table(text) == counted_rows(text)


# The checks above must be able to fail: each broken index below is caught.

def test_a_misspelt_repro_or_unknown_setting_or_missing_test_is_caught(text):
    broken = text.replace("`regmem repro am-dag`", "`regmem repro am-dagg`", 1)
    assert any("am-dagg" in p for p in reference_problems(broken))
    broken = text.replace("`regmem repro am-swap --set figures=6,8`", "`regmem repro am-swap --set figure=6,8`", 1)
    assert any("figure=6,8" in p for p in reference_problems(broken))
    broken = text.replace("test_theorem1_reads_the_exact_arrangement_after_every_swap`",
                          "test_theorem1_reads_the_arrangement`", 1)
    assert any("no function test_theorem1_reads_the_arrangement" in p for p in reference_problems(broken))
    assert any("no such file" in p for p in reference_problems("`tests/ops/test_nothing_here.py`"))
    assert any("make target" in p for p in reference_problems("`make no-such-target`"))


def test_a_dropped_row_or_link_or_verdict_is_caught(text):
    dropped = "\n".join(line for line in text.splitlines() if "`regmem repro am-stress`" not in line)
    assert "am-stress" not in {shlex.split(span)[2] for row in claim_rows(dropped)
                               for span in code_spans(" | ".join(row)) if span.startswith("regmem repro ")}
    assert (INDEX.parent / "am-stress.md").resolve() not in linked_reports(dropped.replace("(am-stress.md)", "()"))
    assert count_table(dropped) != counted_rows(dropped)
    assert verdict_of("mostly holds") is None and verdict_of("holds in part (x)") == "holds in part"


def _selects_on_validation(node) -> bool:
    """Whether a report's JSON holds a cell picked by validation (`protocol.summarize`'s `valid_mean`)."""
    if isinstance(node, dict):
        return "valid_mean" in node or any(_selects_on_validation(v) for v in node.values())
    return isinstance(node, list) and any(_selects_on_validation(v) for v in node)


REPORTS = sorted(p for p in (ROOT / "docs" / "repro").glob("*.json")
                 if _selects_on_validation(json.loads(p.read_text())))


@pytest.mark.parametrize("result", REPORTS, ids=[p.stem for p in REPORTS])
def test_a_report_of_picked_learning_rates_says_validation_picks_and_test_scores(result):
    """An outside reader cannot tell from a table alone which split chose each lr: every committed report whose
    cells were picked on validation says so and says its numbers are test scores."""
    text = result.with_suffix(".md").read_text().lower()
    picks = re.search(r"\bvalidation\b", text)
    scores = re.search(r"\btest (accuracy|score|loss|mean|bits|string|split|sequences|graphs|[a-z_-]+ at that pick)",
                       text)
    assert picks and scores, f"{result.with_suffix('.md').name} does not say which split picks and which scores"


def test_every_protocol_report_is_checked_for_its_splits():
    """The check above sees the reports it should: those of every reproduction that trains with an lr grid."""
    assert {p.stem for p in REPORTS} >= {"nl-mad", "nl-formal-languages", "nl-niah", "am-heads",
                                         "ttr-mqar", "am-swap", "am-dag", "lecture-lineage"}
