"""An upper layer imports only lower ones (docs/architecture.md): cli -> experiments -> train -> tasks -> models
-> layers -> nested -> ops; `recipe`, `analysis`, `optim` and `bench` sit beside them as listed below."""

import ast
from pathlib import Path

import regmem

PACKAGE = Path(regmem.__file__).parent
# What each top-level package may import from regmem (besides itself).
ALLOWED = {
    "ops": set(),
    "recipe": set(),
    "analysis": {"ops"},
    "optim": {"ops"},
    "nested": {"ops"},
    "layers": {"nested", "ops", "recipe"},
    "models": {"layers", "nested", "ops", "recipe"},
    "tasks": set(),
    "train": {"optim"},
    "bench": {"ops", "layers", "nested", "models", "analysis", "optim"},
    "experiments": {"train", "tasks", "models", "layers", "nested", "ops", "recipe", "analysis", "optim"},
    "cli": {"experiments", "train", "tasks", "models", "layers", "nested", "ops", "recipe", "bench", "analysis",
            "optim"},
    "__main__": {"cli"},
}


def _regmem_imports(path: Path) -> set[str]:
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("regmem."):
            found.add(node.module.split(".")[1])
        elif isinstance(node, ast.Import):
            found.update(a.name.split(".")[1] for a in node.names if a.name.startswith("regmem."))
    return found


def test_every_module_imports_only_lower_layers():
    violations = []
    for path in PACKAGE.rglob("*.py"):
        parts = path.relative_to(PACKAGE).parts
        top = parts[0].removesuffix(".py")
        if top == "__init__":
            continue
        bad = _regmem_imports(path) - ALLOWED[top] - {top}
        if bad:
            violations.append(f"{path.relative_to(PACKAGE)} imports {sorted(bad)}")
    assert not violations, "\n".join(violations)


def test_no_source_file_exceeds_600_lines():
    lengths = {p.relative_to(PACKAGE): len(p.read_text().splitlines()) for p in PACKAGE.rglob("*.py")}
    long = [f"{path}: {n}" for path, n in lengths.items() if n > 600]
    assert not long, long
