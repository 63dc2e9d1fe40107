"""The Python examples of the documentation run as written: every ```python block of README.md, CONTRIBUTING.md and
docs/*.md, the blocks of one file executed in order in one namespace (a reader runs them top to bottom), in a
temporary working directory (examples may write checkpoints)."""

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCUMENTS = [ROOT / "README.md", ROOT / "CONTRIBUTING.md", *sorted((ROOT / "docs").rglob("*.md"))]
BLOCK = re.compile(r"^```python\n(.*?)^```$", re.DOTALL | re.MULTILINE)


def python_blocks(path: Path) -> list[str]:
    return BLOCK.findall(path.read_text()) if path.exists() else []


def test_the_readme_has_examples():
    assert len(python_blocks(ROOT / "README.md")) >= 2


@pytest.mark.parametrize("path", [p for p in DOCUMENTS if python_blocks(p)], ids=lambda p: p.name)
def test_python_examples_run(path, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    namespace: dict = {"__name__": f"example_{path.stem}"}
    for number, block in enumerate(python_blocks(path), start=1):
        try:
            exec(compile(block, f"{path.name}, python block {number}", "exec"), namespace)
        except Exception as error:
            raise AssertionError(f"{path.relative_to(ROOT)}: python block {number} fails: {error!r}") from error
