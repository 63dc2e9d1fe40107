"""The repository is self-contained: every markdown file that README.md, CONTRIBUTING.md, docs/, or a docstring or
comment under src/ or tests/ mentions exists in the repository, and every section sign (§) follows, within a few
words, the paper or the in-repository file whose section it is. Papers are cited by arXiv id, section and equation;
nothing points at notes or specs kept outside the repository."""

import ast
import io
import re
import tokenize
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "src" / "regmem"

# `name.md`, `dir/name.md`, `../dir/name.md`, `ops/<family>/DERIVATION.md` (a <placeholder> stands for any name).
MD_PATH = re.compile(r"(?<![\w./<>-])((?:[\w.<>-]+/)*[\w.<>-]+\.md)\b")
# A path to any file of the repository, for the § rule.
FILE_PATH = re.compile(r"(?<![\w./<>-])((?:[\w.<>-]+/)*[\w.<>-]+\.(?:md|py|toml))\b")
ARXIV = re.compile(r"arXiv:\s?\d{4}\.\d{4,5}")
# Papers the docstrings name without repeating their arXiv id next to every section sign.
PAPERS = ("Test-time regression", "TTR", "Higher-order Linear Attention", "HLA", "Titans", "Nested Learning",
          "MesaNet", "Zoology", "DeltaProduct", "Longhorn", "Gated Delta Networks")
# Files that commands write at run time (named in the docs as outputs, not as sources).
GENERATED = {"leaderboard.md"}
WINDOW = 80  # characters before a § that must hold its source


def documents() -> list[Path]:
    """Every file whose text is checked: the top-level docs, docs/, the package's sources and notes, and the tests
    (but this file, whose examples of bad references are the point)."""
    top = [ROOT / "README.md", ROOT / "CONTRIBUTING.md"]
    sources = sorted(p for p in PACKAGE.rglob("*") if p.suffix in {".py", ".md"})
    tests = sorted(p for p in (ROOT / "tests").rglob("*.py") if p != Path(__file__).resolve())
    return [p for p in top if p.exists()] + sorted((ROOT / "docs").rglob("*.md")) + sources + tests


def prose(path: Path) -> list[tuple[int, str]]:
    """(first line, text) of what a reader reads in `path`: all of a markdown file; the docstrings and comments of a
    Python file (its code strings name files the code writes, e.g. a report under results/)."""
    source = path.read_text()
    if path.suffix != ".py":
        return [(1, source)]
    pieces = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) and isinstance(
                    first.value.value, str):
                pieces.append((first.value.lineno, first.value.value))
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type == tokenize.COMMENT:
            pieces.append((token.start[0], token.string))
    return sorted(pieces)


def resolves(ref: str, where: Path) -> bool:
    """True when `ref` names a file of the repository, read relative to the referring file's folder, the
    repository root, `src/` or the package (`ops/hla/DERIVATION.md`); a <placeholder> matches any name."""
    if Path(ref).name in GENERATED:
        return True
    pattern = re.sub(r"<[^<>/]*>", "*", ref)
    for base in (where.parent, ROOT, ROOT / "src", PACKAGE):
        if "*" in pattern:
            if any(p.resolve().is_relative_to(ROOT) for p in base.glob(pattern)):
                return True
        elif (base / ref).is_file() and (base / ref).resolve().is_relative_to(ROOT):
            return True
    return False


def dangling(text: str, where: Path, first_line: int = 1) -> list[str]:
    """The references of `text` (read in `where`, from line `first_line`) that point outside the repository, as
    'line: why'."""
    problems = []
    for match in MD_PATH.finditer(text):
        if not resolves(match.group(1), where):
            line = first_line + text.count("\n", 0, match.start())
            problems.append(f"{line}: {match.group(1)} is not a file of the repository")
    for match in re.finditer("§", text):
        before = text[max(0, match.start() - WINDOW):match.start()]
        cited = ARXIV.search(before) or any(paper in before for paper in PAPERS) or any(
            resolves(ref, where) for ref in FILE_PATH.findall(before))
        if not cited:
            line = first_line + text.count("\n", 0, match.start())
            context = " ".join(text[max(0, match.start() - 30):match.end() + 10].split())
            problems.append(f"{line}: § with no paper or repository file before it: ...{context}")
    return problems


def test_every_reference_resolves_inside_the_repository():
    problems = []
    for path in documents():
        for first_line, text in prose(path):
            problems += [f"{path.relative_to(ROOT)}:{p}" for p in dangling(text, path, first_line)]
    assert not problems, "references that point outside the repository:\n" + "\n".join(problems)


def test_the_scan_covers_the_documents_and_the_sources():
    scanned = {p.relative_to(ROOT).as_posix() for p in documents()}
    assert {"README.md", "CONTRIBUTING.md", "docs/architecture.md", "src/regmem/ops/common/op.py",
            "src/regmem/ops/delta/DERIVATION.md", "tests/helpers.py"} <= scanned


@pytest.mark.parametrize("text, expected", [
    ("Implements eq. (7) (ttr.md §3.2).", ["1: ttr.md is not a file", "1: § with no paper"]),
    ("The design rules are in\n`shared/DESIGN.md` and `../shared/STYLE.md`.",
     ["2: shared/DESIGN.md is not a file", "2: ../shared/STYLE.md is not a file"]),
    ("as the spec says (§8, [AMBIG])", ["1: § with no paper"]),
    ("the algebra is in ops/delta/NOTES.md", ["1: ops/delta/NOTES.md is not a file"]),
])
def test_planted_bad_references_are_caught(text, expected):
    problems = dangling(text, PACKAGE / "ops" / "delta" / "api.py")
    assert len(problems) == len(expected), problems
    for problem, start in zip(problems, expected, strict=True):
        assert problem.startswith(start), (problem, start)


@pytest.mark.parametrize("text", [
    "*Test-time regression* (Wang, Shi, Fox; arXiv:2501.12352), Sec. 4 Vignette 3, eq. (29).",
    "Titans (Behrouz et al.) §3.1",
    "arXiv:2510.27258 §6, erratum 1",
    "the math is in DERIVATION.md beside this file",  # relative to the referring file's folder
    "see `docs/architecture.md` and src/regmem/ops/hla/DERIVATION.md §2",  # the repository root
    "`ops/linear_attn/DERIVATION.md`",  # the package
    "`src/regmem/ops/<family>/DERIVATION.md` and `leaderboard.md`",  # a placeholder; a generated output
])
def test_references_into_the_repository_or_to_papers_pass(text):
    assert dangling(text, PACKAGE / "ops" / "delta" / "api.py") == []


# A newcomer's walk: the README stays short, and every page of several sections lists them before the first.
README_MAX_LINES = 300
PAGES = [ROOT / "README.md", ROOT / "CHANGELOG.md", *sorted((ROOT / "docs").glob("*.md")),
         *sorted((ROOT / "benchmarks").glob("*.md"))]


def heading_anchor(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation dropped, spaces as hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def sections_missing_from_contents(text: str) -> list[str]:
    """The `## ` headings of a page that no link before its first section points at."""
    headings = re.findall(r"^## (.+)$", text, flags=re.MULTILINE)
    preamble = text.split("\n## ", 1)[0]
    anchors = set(re.findall(r"\]\(#([^)]+)\)", preamble))
    return [h for h in headings if heading_anchor(h) not in anchors] if len(headings) > 1 else []


def test_the_readme_is_short():
    assert len((ROOT / "README.md").read_text().splitlines()) <= README_MAX_LINES


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_page_lists_its_sections_before_the_first(page):
    assert not sections_missing_from_contents(page.read_text())


def test_a_page_without_contents_is_caught():
    page = "# Title\n\nContents: [one](#one)\n\n## One\n\ntext\n\n## Two: the `second`\n"
    assert sections_missing_from_contents(page) == ["Two: the `second`"]
    assert sections_missing_from_contents(page.replace("[one](#one)", "[one](#one) · [two](#two-the-second)")) == []
