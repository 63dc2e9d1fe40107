"""Each set of choice names is written once: no two `Literal[...]` of string names in the package list the same
names. A choice used in several places is one named Literal, defined in the lowest package that owns the names and
imported where it is needed; a tuple of its names, where code needs one, is `typing.get_args` of it."""

import ast
from collections import defaultdict
from pathlib import Path

import regmem

PACKAGE = Path(regmem.__file__).parent


def _choice_sets(path: Path):
    """(names, line) of every Literal of two or more strings in `path`."""
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Subscript) and isinstance(node.value, ast.Name) and node.value.id == "Literal":
            items = node.slice.elts if isinstance(node.slice, ast.Tuple) else [node.slice]
            names = frozenset(i.value for i in items if isinstance(i, ast.Constant) and isinstance(i.value, str))
            if len(names) >= 2:
                yield names, node.lineno


def test_no_set_of_choice_names_is_written_twice():
    places = defaultdict(list)
    for path in sorted(PACKAGE.rglob("*.py")):
        for names, line in _choice_sets(path):
            places[names].append(f"{path.relative_to(PACKAGE)}:{line}")
    repeated = {tuple(sorted(names)): where for names, where in places.items() if len(where) > 1}
    assert not repeated, f"name each choice once (a Literal) and import it: {repeated}"
