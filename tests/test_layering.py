"""The layering of the package, proved on its source: every import (absolute or relative, at module level or inside a
function) points down the table `ALLOWED`, no two modules import each other, and docs/architecture.md shows the same
table. `ALLOWED` is the one place the layering is written; the document is checked against it."""

import ast
import re
from pathlib import Path

import regmem

PACKAGE = Path(regmem.__file__).parent
ARCHITECTURE = PACKAGE.parents[1] / "docs" / "architecture.md"

# What each top-level package may import from regmem (besides itself): the stack cli -> experiments -> train ->
# tasks -> models -> layers -> nested -> ops, with recipe, analysis, optim and bench beside it.
ALLOWED = {
    "ops": set(),
    "storage": set(),
    "recipe": set(),
    "analysis": {"ops"},
    "optim": {"ops"},
    "nested": {"ops"},
    "layers": {"nested", "ops", "recipe"},
    "interop": {"layers", "nested", "ops", "recipe"},
    "hf": {"models"},
    "models": {"layers", "nested", "ops", "recipe", "storage"},
    "tasks": set(),
    "train": {"optim", "storage"},
    "bench": {"ops", "layers", "nested", "models", "analysis", "optim"},
    "experiments": {"train", "tasks", "models", "layers", "nested", "ops", "recipe", "analysis", "optim", "storage"},
    "cli": {"experiments", "train", "tasks", "models", "layers", "nested", "ops", "recipe", "bench", "analysis",
            "optim", "storage", "interop"},
    "__main__": {"cli"},
    "lab": set(),
}


def module_name(path: Path) -> str:
    """src/regmem/layers/base.py -> regmem.layers.base; a package's __init__.py is the package."""
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {module_name(path): path for path in PACKAGE.rglob("*.py")}


def imported_modules(path: Path) -> set[str]:
    """The regmem modules `path` imports anywhere in its body. `from a.b import c` imports the module a.b.c when c
    is one, else a.b; a relative import is resolved against the file's own package."""
    module = module_name(path)
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names if alias.name.startswith("regmem"))
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            if target.startswith("regmem"):
                found.update(f"{target}.{a.name}" if f"{target}.{a.name}" in MODULES else target for a in node.names)
    found.discard(module)
    return found


GRAPH = {module: imported_modules(path) for module, path in MODULES.items()}


LAB = {"experiments", "bench", "cli"}  # the lab's packages, under regmem.lab (regmem/lab/__init__.py)


def top_package(module: str) -> str:
    """The row of `ALLOWED` a module belongs to: its package under regmem, or under regmem.lab for the lab's."""
    parts = module.split(".")
    if len(parts) > 2 and parts[1] == "lab":
        return parts[2]
    return parts[1] if len(parts) > 1 else "__init__"


def test_relative_imports_are_resolved():
    """The checks below see relative imports: optim's `from .stepping import ...` is an edge to optim.stepping."""
    assert "regmem.optim.stepping" in GRAPH["regmem.optim.dgd"]


def test_every_module_imports_only_lower_layers():
    violations = []
    for module, imports in GRAPH.items():
        top = top_package(module)
        if top == "__init__":
            continue
        bad = {top_package(m) for m in imports} - ALLOWED[top] - {top}
        if bad:
            violations.append(f"{module} imports {sorted(bad)}")
    assert not violations, "\n".join(violations)


def test_the_lab_lives_under_regmem_lab_and_the_library_beside_it():
    """The lab's packages are folders of regmem/lab/ and nothing else is; no library package sits under it."""
    lab_folders = {p.name for p in (PACKAGE / "lab").iterdir() if (p / "__init__.py").exists()}
    assert lab_folders == LAB
    assert not {p.name for p in PACKAGE.iterdir() if (p / "__init__.py").exists()} & LAB


def test_no_two_modules_import_each_other():
    circles = sorted({tuple(sorted((a, b))) for a, imports in GRAPH.items() for b in imports if a in GRAPH.get(b, ())})
    assert not circles, circles


def documented_layers() -> dict[str, set[str]]:
    """The 'may import' column of docs/architecture.md's table of packages."""
    rows = re.findall(r"^\| `([a-z_]+)(?:/|\.py)?` \| ([^|]*) \|", ARCHITECTURE.read_text(), flags=re.MULTILINE)
    return {name: set(re.findall(r"`([a-z_]+)`", allowed)) for name, allowed in rows}


def test_architecture_document_shows_the_layering_table():
    documented = documented_layers()
    expected = {name: allowed for name, allowed in ALLOWED.items() if name != "__main__"}
    assert documented == expected, f"docs/architecture.md's table says {documented}, ALLOWED says {expected}"


def test_no_source_file_exceeds_600_lines():
    lengths = {p.relative_to(PACKAGE): len(p.read_text().splitlines()) for p in PACKAGE.rglob("*.py")}
    long = [f"{path}: {n}" for path, n in lengths.items() if n > 600]
    assert not long, long
