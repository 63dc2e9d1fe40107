"""DAG reachability: which nodes can be reached from the first node of a topological order.

Zhong, Xu, Ao & Shi, "Understanding Transformer from the Perspective of Associative Memory" (arXiv:2505.19488),
Sec. 3.3 and Fig. 7. Nodes arrive in a topological order, each announcing only its parent(s); the target at
each node is whether a path leads to it from node 0. With P the strictly lower-triangular adjacency
(P[t, s] = 1 when s is a parent of t), the number of paths from 0 to t is `((I - P)^-1)[t, 0]`, exactly, since
P is nilpotent (Sec. 3.3, "The Power of Matrix Inverse"): one DeltaFormer layer, whose u = (I + A)^-1 v is this
inverse, can label every node, where theory asks O(log n) layers of a Transformer (Sanford et al., cited there).

The paper gives n = 32 nodes split evenly into two trees, so that the label is balanced, and no tokenization;
the generator below fills that in. Per graph:

1. Class A is position 0 and n/2 - 1 other positions drawn uniformly; class B is the rest, and its root is its
   first position.
2. Every other position t draws `min(parents_per_node, m)` distinct parents uniformly from the m earlier
   positions of its own class (one parent: two random recursive trees; more: a DAG of two components).
3. Node ids are a uniform random permutation of 0..n-1, so a node is named by a label, not by its position.
4. The target of position t is 1 if t is reachable from position 0, else 0 (computed from the parents, in
   topological order). Parents never leave their class, so the targets are exactly class A: n/2 ones.

Token layout: each node is a group of 1 + p tokens (p = parents_per_node), its own id and then its parents' ids
in increasing position order, padded with NONE = n where it has fewer than p parents (each root has none). The
target sits on the last token of the group, where the node and all its parents have been read; every other
target is -100. So T = n·(1 + p) and the vocabulary is the n ids plus NONE; the targets 0 and 1 share it.
`sample_graphs` returns the structure behind the tokens (parents by position, node ids, reachability) from the
same draws, so a hand-set construction can be run on the very instances a model sees.

Dimension legend: N graphs, n = num_nodes, p = parents_per_node, T = n·(1 + p), V = n + 1.

Worked example, n = 4, p = 1: positions 0, 1, 2, 3 with class A = {0, 2}, class B = {1, 3}; parents
[-, -, 0, 1] (positions 0 and 1 are the roots); node ids [2, 0, 3, 1]. The groups (id, parent id) are
(2, NONE), (0, NONE), (3, 2), (1, 0) with NONE = 4::

    inputs:  [2, 4, 0, 4, 3, 2, 1, 0]
    targets: [-100, 1, -100, 0, -100, 1, -100, 0]
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, NamedTuple

import torch
from einops import rearrange

from regmem.tasks.base import IGNORE_INDEX, ConfigTask, accuracy, check_int, make_generator


@dataclass(frozen=True)
class DAGReachabilityConfig:
    """One DAG-reachability setting; the defaults are the paper's (n = 32 nodes, two trees)."""

    num_nodes: int = 32  # n, nodes per graph, split evenly into two components; even
    parents_per_node: int = 1  # p, parents of every non-root node (fewer where fewer earlier nodes of its class)

    def __post_init__(self):
        check_int("num_nodes", self.num_nodes, 4)
        if self.num_nodes % 2 != 0:
            raise ValueError(f"num_nodes must be even (two components of n/2 nodes), got {self.num_nodes}")
        check_int("parents_per_node", self.parents_per_node, 1)
        most = self.num_nodes // 2 - 1  # earlier nodes of the same class that the last one of a class has
        if self.parents_per_node > most:
            raise ValueError(f"parents_per_node must be <= num_nodes/2 - 1 = {most}, got {self.parents_per_node}")

    @property
    def none_token(self) -> int:
        """NONE, the id that pads a missing parent: n."""
        return self.num_nodes

    @property
    def tokens_per_node(self) -> int:
        """1 + p: the node's id, then p parent slots."""
        return 1 + self.parents_per_node

    @property
    def vocab_size(self) -> int:
        """n + 1: the node ids and NONE."""
        return self.num_nodes + 1

    @property
    def seq_len(self) -> int:
        """T = n·(1 + p)."""
        return self.num_nodes * self.tokens_per_node


class DAGGraphs(NamedTuple):
    """A batch of graphs, indexed by position in the topological order.

    parents: int64 `[N, n, p]`, the parents' positions (each < the node's), increasing, padded with -1.
    node_ids: int64 `[N, n]`, the id of the node at each position (a permutation of 0..n-1 per row).
    reachable: bool `[N, n]`, whether a path leads from position 0 to each position (position 0 included).
    """

    parents: torch.Tensor
    node_ids: torch.Tensor
    reachable: torch.Tensor

    def parent_lists(self) -> list[list[list[int]]]:
        """`parents` without the padding, as Python lists: `[graph][position] -> parent positions` (a root's list
        is empty), the form a hand-set construction or a breadth-first search takes."""
        return [[[s for s in row if s >= 0] for row in graph] for graph in self.parents.tolist()]


def _sample_classes(config: DAGReachabilityConfig, num_examples: int, generator: torch.Generator) -> torch.Tensor:
    """Step 1: bool `[N, n]`, True for class A (position 0 and n/2 - 1 uniform others)."""
    n = config.num_nodes
    others = torch.rand(num_examples, n - 1, generator=generator).argsort(dim=1) + 1  # [N, n-1], shuffled 1..n-1
    in_a = torch.zeros(num_examples, n, dtype=torch.bool)
    in_a[:, 0] = True
    in_a.scatter_(1, others[:, : n // 2 - 1], True)
    return in_a


def _sample_parents(config: DAGReachabilityConfig, in_a: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
    """Step 2: int64 `[N, n, p]`, up to p distinct uniform earlier same-class positions, increasing, -1 padded."""
    N, n, p = in_a.shape[0], config.num_nodes, config.parents_per_node
    parents = torch.full((N, n, p), -1, dtype=torch.int64)
    for t in range(1, n):  # n steps over the batch; position t chooses among positions 0..t-1
        same = in_a[:, :t] == in_a[:, t : t + 1]  # [N, t], earlier positions of t's class
        # Uniform keys, the other class pushed past 1: the k smallest are a uniform k-subset of t's class.
        keys = torch.rand(N, t, generator=generator) + (~same).float() * 2  # [N, t]
        k = min(p, t)
        smallest, chosen = keys.topk(k, dim=1, largest=False)  # [N, k]
        chosen = torch.where(smallest < 1, chosen, n).sort(dim=1).values  # [N, k], n where no candidate was left
        parents[:, t, :k] = torch.where(chosen < n, chosen, -1)
    return parents


def reachable_from_first(parents: torch.Tensor) -> torch.Tensor:
    """bool `[N, n]`: position t is reachable from position 0, given parents int64 `[N, n, p]` (positions < t,
    -1 for none). In topological order a node is reachable iff one of its parents is (or it is position 0)."""
    N, n, _ = parents.shape
    reachable = torch.zeros(N, n, dtype=torch.bool)
    reachable[:, 0] = True
    for t in range(1, n):  # n steps: a node's parents are settled before it
        via = reachable.gather(1, parents[:, t].clamp(min=0)) & (parents[:, t] >= 0)  # [N, p]
        reachable[:, t] = via.any(dim=1)
    return reachable


def sample_graphs(
    config: DAGReachabilityConfig, num_examples: int, *, seed: int | None = None,
    generator: torch.Generator | None = None,
) -> DAGGraphs:
    """`num_examples` random two-component graphs (module docstring, steps 1-4), as structure: the same seed gives
    the graphs that `dag_reachability` tokenizes. Exactly one of `seed` and `generator`; global RNG state is
    neither read nor advanced."""
    check_int("num_examples", num_examples, 1)
    generator = make_generator(seed, generator)
    in_a = _sample_classes(config, num_examples, generator)  # [N, n]
    parents = _sample_parents(config, in_a, generator)  # [N, n, p]
    node_ids = torch.rand(num_examples, config.num_nodes, generator=generator).argsort(dim=1)  # [N, n]
    return DAGGraphs(parents, node_ids, reachable_from_first(parents))


def encode_graphs(graphs: DAGGraphs) -> tuple[torch.Tensor, torch.Tensor]:
    """The token layout of the module docstring: per position the node's id, then its parents' ids (NONE = n for
    a missing one); the 0/1 reachability target on the group's last token. Returns `(inputs, targets)`, int64
    `[N, n·(1 + p)]`."""
    parents, node_ids, reachable = graphs
    N, n, p = parents.shape
    parent_ids = node_ids.gather(1, rearrange(parents.clamp(min=0), "b n p -> b (n p)"))  # [N, n·p]
    parent_ids = rearrange(parent_ids, "b (n p) -> b n p", p=p)  # [N, n, p]
    parent_ids = torch.where(parents >= 0, parent_ids, n)  # [N, n, p]
    groups = torch.cat([node_ids.unsqueeze(2), parent_ids], dim=2)  # [N, n, 1+p]
    labels = torch.full((N, n, 1 + p), IGNORE_INDEX, dtype=torch.int64)
    labels[:, :, -1] = reachable.long()
    return rearrange(groups, "b n g -> b (n g)"), rearrange(labels, "b n g -> b (n g)")  # [N, T] each


def dag_reachability(
    config: DAGReachabilityConfig, num_examples: int, *, seed: int | None = None,
    generator: torch.Generator | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """`num_examples` tokenized graphs (`encode_graphs(sample_graphs(...))`). Exactly one of `seed` and
    `generator`. Returns `(inputs, targets)`, both int64 `[N, T]`, T = n·(1 + p): n labelled positions per row,
    n/2 of them 1.

        >>> inputs, targets = dag_reachability(DAGReachabilityConfig(num_nodes=4), 1, seed=0)
        >>> inputs.tolist()
        [[3, 4, 1, 4, 2, 1, 0, 3]]
        >>> targets.tolist()
        [[-100, 1, -100, 0, -100, 0, -100, 1]]
    """
    return encode_graphs(sample_graphs(config, num_examples, seed=seed, generator=generator))


@dataclass(frozen=True)
class DAGReachability(ConfigTask):
    """The DAG-reachability task (see `dag_reachability`); metric: accuracy over the n labelled positions. No
    `with_seq_len`: T is n·(1 + p), so a longer row is a new `num_nodes`."""

    name: ClassVar[str] = "dag"
    config_class: ClassVar[type] = DAGReachabilityConfig
    config: DAGReachabilityConfig = DAGReachabilityConfig()

    def generate(
        self, num_examples: int, *, seed: int | None = None, generator: torch.Generator | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Returns `(inputs, targets)`, both int64 `[N, n·(1 + p)]`; see `dag_reachability`."""
        return dag_reachability(self.config, num_examples, seed=seed, generator=generator)

    def metric(self, logits: torch.Tensor, targets: torch.Tensor) -> dict[str, float]:
        """logits `[N, T, V]`, targets `[N, T]` -> {"accuracy"} over the labelled (last-of-group) positions."""
        return {"accuracy": accuracy(logits, targets)}
