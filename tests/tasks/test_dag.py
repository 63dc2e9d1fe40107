"""DAG reachability (src/regmem/tasks/dag.py), arXiv:2505.19488 Sec. 3.3: the worked example token by token,
targets against breadth-first search and against the path counts (I - P)^-1, the balanced two-component
structure, uniform sampling, the token layout read back, seeding, validation and the task interface."""

from __future__ import annotations

import collections
import doctest

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

import regmem.tasks.dag
from regmem.tasks import TASKS, Task
from regmem.tasks.dag import (
    DAGGraphs,
    DAGReachability,
    DAGReachabilityConfig,
    dag_reachability,
    encode_graphs,
    reachable_from_first,
    sample_graphs,
)


def bfs_from_first(parents: list[list[int]]) -> list[bool]:
    """Breadth-first search from position 0 along parent -> child edges, on Python lists (-1 = no parent)."""
    children = collections.defaultdict(list)
    for child, row in enumerate(parents):
        for parent in row:
            if parent >= 0:
                children[parent].append(child)
    seen, queue = {0}, collections.deque([0])
    while queue:
        for child in children[queue.popleft()]:
            if child not in seen:
                seen.add(child)
                queue.append(child)
    return [t in seen for t in range(len(parents))]


def adjacency(parents: torch.Tensor) -> torch.Tensor:
    """float64 `[N, n, n]`, P[t, s] = 1 when s is a parent of t (strictly lower triangular)."""
    N, n, _ = parents.shape
    P = torch.zeros(N, n, n + 1, dtype=torch.float64)  # column n absorbs the -1 padding
    P.scatter_(2, torch.where(parents >= 0, parents, n), 1.0)
    return P[:, :, :n]


configs = st.integers(2, 16).flatmap(
    lambda half: st.builds(DAGReachabilityConfig, num_nodes=st.just(2 * half),
                           parents_per_node=st.integers(1, min(3, half - 1))))


def test_worked_example_token_by_token_and_doctest():
    graphs = DAGGraphs(parents=torch.tensor([[[-1], [-1], [0], [1]]]), node_ids=torch.tensor([[2, 0, 3, 1]]),
                       reachable=torch.tensor([[True, False, True, False]]))  # the module docstring's example
    assert reachable_from_first(graphs.parents).tolist() == graphs.reachable.tolist() == [bfs_from_first(
        [[-1], [-1], [0], [1]])]
    inputs, targets = encode_graphs(graphs)
    assert inputs.tolist() == [[2, 4, 0, 4, 3, 2, 1, 0]]
    assert targets.tolist() == [[-100, 1, -100, 0, -100, 1, -100, 0]]
    inputs, targets = dag_reachability(DAGReachabilityConfig(num_nodes=4), 1, seed=0)  # the doctest
    assert inputs.tolist() == [[3, 4, 1, 4, 2, 1, 0, 3]] and targets.tolist() == [[-100, 1, -100, 0, -100, 0, -100, 1]]
    results = doctest.testmod(regmem.tasks.dag)
    assert results.attempted > 0 and results.failed == 0


def test_multi_parent_example_pads_with_none_and_counts_paths():
    # n = 6, p = 2: A = {0, 2, 4}, B = {1, 3, 5}; node 4 has both earlier A nodes as parents, node 5 one B parent.
    parents = torch.tensor([[[-1, -1], [-1, -1], [0, -1], [1, -1], [0, 2], [3, -1]]])
    graphs = DAGGraphs(parents, torch.tensor([[5, 4, 3, 2, 1, 0]]), reachable_from_first(parents))
    assert graphs.parent_lists() == [[[], [], [0], [1], [0, 2], [3]]]
    inputs, targets = encode_graphs(graphs)
    assert inputs.tolist() == [[5, 6, 6, 4, 6, 6, 3, 5, 6, 2, 4, 6, 1, 5, 3, 0, 2, 6]]
    assert targets.tolist() == [[-100, -100, 1, -100, -100, 0, -100, -100, 1, -100, -100, 0, -100, -100, 1,
                                 -100, -100, 0]]
    paths = torch.linalg.inv(torch.eye(6, dtype=torch.float64) - adjacency(parents))[0, :, 0]
    assert paths.tolist() == [1, 0, 1, 0, 2, 0]  # node 4: 0 -> 4 and 0 -> 2 -> 4


@given(config=configs, num_examples=st.integers(1, 4), seed=st.integers(0, 99))
def test_targets_equal_breadth_first_search_and_path_counts(config, num_examples, seed):
    graphs = sample_graphs(config, num_examples, seed=seed)
    for row, reachable in zip(graphs.parents.tolist(), graphs.reachable.tolist(), strict=True):
        assert reachable == bfs_from_first(row)
    n = config.num_nodes
    P = adjacency(graphs.parents)  # [N, n, n]
    paths = torch.linalg.inv(torch.eye(n, dtype=torch.float64) - P)  # [N, n, n], exact: P is nilpotent
    powers, term = torch.eye(n, dtype=torch.float64).expand_as(P), torch.eye(n, dtype=torch.float64).expand_as(P)
    for _ in range(n - 1):
        term = term @ P
        powers = powers + term
    assert torch.equal(paths.round(), powers) and torch.allclose(paths, powers, rtol=0, atol=1e-9)
    assert torch.equal(powers[:, :, 0] > 0, graphs.reachable)
    _, targets = dag_reachability(config, num_examples, seed=seed)
    assert torch.equal(targets[:, config.tokens_per_node - 1 :: config.tokens_per_node], graphs.reachable.long())


@pytest.mark.parametrize("parents_per_node", [1, 3])
def test_classes_are_balanced_sixteen_sixteen_and_components_never_mix(parents_per_node):
    config = DAGReachabilityConfig(num_nodes=32, parents_per_node=parents_per_node)
    graphs = sample_graphs(config, 200, seed=0)
    assert torch.equal(graphs.reachable.sum(dim=1), torch.full((200,), 16))
    _, targets = dag_reachability(config, 200, seed=0)
    assert torch.equal((targets == 1).sum(dim=1), torch.full((200,), 16))
    assert torch.equal((targets == 0).sum(dim=1), torch.full((200,), 16))
    assert int((targets != -100).sum()) == 200 * 32
    has = graphs.parents >= 0  # [N, n, p]
    parent_class = graphs.reachable.gather(1, graphs.parents.clamp(min=0).flatten(1)).view_as(has)
    assert torch.equal(parent_class[has], graphs.reachable.unsqueeze(2).expand_as(has)[has])


@given(config=configs, seed=st.integers(0, 99))
def test_parents_precede_their_child_are_distinct_and_as_many_as_the_class_allows(config, seed):
    graphs = sample_graphs(config, 8, seed=seed)
    n, p = config.num_nodes, config.parents_per_node
    for parents, in_a in zip(graphs.parents.tolist(), graphs.reachable.tolist(), strict=True):
        roots = [t for t in range(n) if parents[t] == [-1] * p]
        assert roots == [0, in_a.index(False)]  # the first node of each class
        for t, row in enumerate(parents):
            chosen = [s for s in row if s >= 0]
            assert row == chosen + [-1] * (p - len(chosen)) and chosen == sorted(set(chosen))
            assert all(s < t and in_a[s] == in_a[t] for s in chosen)
            assert len(chosen) == min(p, sum(in_a[s] == in_a[t] for s in range(t)))


def test_classes_parents_and_ids_are_uniform():
    graphs = sample_graphs(DAGReachabilityConfig(num_nodes=6), 6000, seed=0)
    in_a = graphs.reachable[:, 1:].double().mean(dim=0)  # each of positions 1..5 is in A w.p. 2/5
    assert (in_a - 0.4).abs().max() < 0.03  # 4.7 standard deviations of a proportion
    third_a = graphs.reachable.long().cumsum(dim=1).eq(3).long().argmax(dim=1)  # [N], the last class-A position
    parent = graphs.parents[torch.arange(6000), third_a, 0]  # 0 or the second A position, each w.p. 1/2
    assert float((parent == 0).double().mean()) == pytest.approx(0.5, abs=0.03)
    assert torch.equal(graphs.node_ids.sort(dim=1).values, torch.arange(6).expand(6000, 6))
    first_ids = torch.bincount(graphs.node_ids[:, 0], minlength=6).double() / 6000
    assert (first_ids - 1 / 6).abs().max() < 0.03


def test_tokens_read_back_to_the_graphs():
    config = DAGReachabilityConfig(num_nodes=10, parents_per_node=2)
    graphs = sample_graphs(config, 20, seed=7)
    inputs, _ = dag_reachability(config, 20, seed=7)
    groups = inputs.view(20, 10, 3)  # [N, n, 1 + p]
    assert torch.equal(groups[:, :, 0], graphs.node_ids)
    position_of = graphs.node_ids.argsort(dim=1)  # id -> position
    slots = groups[:, :, 1:]  # [N, n, p]
    decoded = torch.where(slots == config.none_token, -1, position_of.gather(1, slots.clamp(max=9).flatten(1))
                          .view_as(slots))
    assert torch.equal(decoded, graphs.parents)


def test_seeding_is_pure():
    config = DAGReachabilityConfig()
    torch.manual_seed(123)
    before = torch.rand(1)
    a = dag_reachability(config, 3, seed=5)
    b = dag_reachability(config, 3, generator=torch.Generator().manual_seed(5))
    c = sample_graphs(config, 3, generator=torch.Generator().manual_seed(5))
    torch.manual_seed(123)
    assert torch.equal(torch.rand(1), before), "the global RNG is neither read nor advanced"
    assert all(torch.equal(x, y) for x, y in zip(a, b, strict=True))
    assert all(torch.equal(x, y) for x, y in zip(a, encode_graphs(c), strict=True))
    assert not torch.equal(a[0], dag_reachability(config, 3, seed=6)[0])


@pytest.mark.parametrize(("kwargs", "field"), [
    ({"num_nodes": 2}, "num_nodes"), ({"num_nodes": 33}, "num_nodes"), ({"num_nodes": 32.0}, "num_nodes"),
    ({"parents_per_node": 0}, "parents_per_node"), ({"parents_per_node": 16}, "parents_per_node"),
    ({"parents_per_node": True}, "parents_per_node"),
])
def test_bad_config_raises_naming_the_field(kwargs, field):
    with pytest.raises(ValueError, match=field):
        DAGReachabilityConfig(**kwargs)


def test_bad_generate_arguments_raise():
    with pytest.raises(ValueError, match="num_examples"):
        dag_reachability(DAGReachabilityConfig(), 0, seed=0)
    with pytest.raises(ValueError, match="exactly one of seed and generator"):
        sample_graphs(DAGReachabilityConfig(), 1)


def test_task_interface_and_metric():
    task = TASKS["dag"](DAGReachabilityConfig(num_nodes=8, parents_per_node=3))
    assert isinstance(task, Task) and isinstance(task, DAGReachability) and task.name == "dag"
    assert (task.vocab_size, task.seq_len, task.config.none_token) == (9, 32, 8)
    assert (DAGReachability().vocab_size, DAGReachability().seq_len) == (33, 64)  # the paper's n = 32
    inputs, targets = task.generate(5, seed=0)
    assert inputs.shape == targets.shape == (5, 32) and int(inputs.max()) < 9
    perfect = torch.nn.functional.one_hot(targets.clamp(min=0), 9).float()  # [N, T, V]
    assert task.metric(perfect, targets) == {"accuracy": 1.0}
    flipped = torch.nn.functional.one_hot(1 - targets.clamp(min=0), 9).float()
    assert task.metric(flipped, targets) == {"accuracy": 0.0}
