"""The cases of `regmem bench ops` / `regmem bench decode` (regmem/lab/bench/cases.py) run on the ops' own example
inputs (regmem/ops/examples.py, the ones the op-wide tests use), and the bench modules import each other without a
cycle."""

import ast
from pathlib import Path

import pytest
import torch

import regmem.lab.bench
from regmem.lab.bench.cases import ALL_CASES, Shape, case_inputs
from regmem.ops.examples import EXAMPLES, VARIANTS, example_of


@pytest.mark.parametrize("name", sorted(ALL_CASES))
def test_every_case_runs_on_its_examples_inputs(name):
    case = ALL_CASES[name]
    shape = Shape(B=2, T=5, H=3, K=4, V=4, chunk_size=4)
    tokens, options = case_inputs(case, shape, torch.float32, torch.Generator().manual_seed(0))
    _, example = example_of(case.example)
    expected, example_options, _ = example.make(2, 5, 3, 4, 4, torch.float32, torch.Generator().manual_seed(0))
    assert set(tokens) == set(case.tokens or expected)
    for token_name, t in tokens.items():
        assert t.shape[:2] == (2, 5), f"{token_name} is not per-token [B, T, ...]"
        torch.testing.assert_close(t, expected[token_name], rtol=0, atol=0)
    assert options.keys() == (example_options if case.options is None else case.options).keys()


def test_example_inputs_are_made_on_the_generators_device():
    device = "cuda" if torch.cuda.is_available() else "cpu"
    for _, example in map(example_of, [*EXAMPLES, *VARIANTS]):
        tokens, options, state = example.make(1, 3, 2, 4, 4, torch.float32, torch.Generator(device).manual_seed(0))
        tensors = [*tokens.values(), *(v for v in options.values() if isinstance(v, torch.Tensor))]
        tensors += [state] if isinstance(state, torch.Tensor) else [s for s in state or () if torch.is_tensor(s)]
        assert all(t.device.type == device for t in tensors)


def test_bench_modules_import_each_other_without_a_cycle():
    folder = Path(regmem.lab.bench.__file__).parent
    graph = {}
    for path in folder.glob("*.py"):
        imports = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("regmem.lab.bench."):
                imports.add(node.module.split(".")[2])
        graph[path.stem] = imports

    def reaches(start, target, seen=()):
        return any(n == target or (n not in seen and reaches(n, target, (*seen, n))) for n in graph.get(start, ()))

    cycles = [name for name in graph if name != "__init__" and reaches(name, name)]
    assert not cycles, f"bench modules on an import cycle: {cycles}"


def test_the_optimiser_bench_builds_exactly_the_optimisers_it_lists():
    from regmem.lab.bench.optim import OPTIMIZERS, _optimizers

    assert tuple(_optimizers()) == OPTIMIZERS
