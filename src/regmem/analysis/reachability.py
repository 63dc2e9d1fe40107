"""Reachability through a matrix inverse, Sec. 3.3 ("The Power of Matrix Inverse") of *Understanding Transformer
from the Perspective of Associative Memory* (Zhong, Xu, Ao, Shi; arXiv:2505.19488), and a one-layer DeltaFormer
that labels reachability on a DAG.

With the nodes of a DAG listed in topological order, the parent matrix P (P[t, p] = 1 when p is a parent of t,
p < t) is strictly lower triangular, hence nilpotent, so (I - P)^{-1} = I + P + ... + P^{n-1} exactly; entry
[t, s] counts the paths from s to t. (The paper says the inverse "approximates" the series; for a DAG it is equal.)
DeltaFormer's value pass U = (I + A)^{-1} V (eqs. 96-97) is this inverse with A = -P, which one hand-set layer
realises (`reachability_construction`): one-hot node keys k_t = e_{id(t)}, erase vectors
w_t = -sum_{p parent of t} e_{id(p)}, linear kappa_1, so A[t, p] = k_p . w_t = -1 on the edges; values
v_t = 1[t = 0] make u_t the number of paths from node 0 to t; reading the node's own slot (q_t = k_t, linear
kappa_2) returns u_t, and the label is u_t > 0. A Transformer needs O(log n) layers for this (Sanford et al.).
This works on the graph's structure; experiments/repro/am_dag_handset.py sets the weights of a one-layer
DeltaFormer LM so that it computes the same from the DAG task's tokens (with a short convolution of width 2).

Input: `parents`, one list of parent positions per position (the root's list empty; several parents make a general
DAG, one parent a forest). Shapes: P [n, n] float64; labels [n] bool (position 0 reaches itself).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from regmem.analysis.swap_construction import delta_read, delta_values


def parent_matrix(parents: Sequence[Sequence[int]]) -> torch.Tensor:
    """P [n, n] float64, P[t, p] = 1 for each parent p of position t; every parent must come before its child."""
    n = len(parents)
    P = torch.zeros(n, n, dtype=torch.float64)
    for t, row in enumerate(parents):
        for p in row:
            if not isinstance(p, int) or not 0 <= p < t:
                raise ValueError(f"parents[{t}] must list earlier positions (topological order), got {list(row)}")
            P[t, p] = 1.0
    return P


def path_counts(parents: Sequence[Sequence[int]]) -> torch.Tensor:
    """(I - P)^{-1} [n, n] by one unit-lower-triangular solve: entry [t, s] is the number of paths from s to t."""
    P = parent_matrix(parents)
    identity = torch.eye(len(parents), dtype=torch.float64)
    return torch.linalg.solve_triangular(-P, identity, upper=False, unitriangular=True)


def path_count_series(P: torch.Tensor) -> torch.Tensor:
    """sum_{k=0}^{n-1} P^k [n, n] for a square P [n, n] (equal to (I - P)^{-1} when P is nilpotent)."""
    if P.ndim != 2 or P.shape[0] != P.shape[1]:
        raise ValueError(f"P must be [n, n], got shape {tuple(P.shape)}")
    total = power = torch.eye(P.shape[0], dtype=P.dtype)
    for _ in range(P.shape[0] - 1):
        power = power @ P
        total = total + power
    return total


def bfs_reachable(parents: Sequence[Sequence[int]], source: int = 0) -> torch.Tensor:
    """[n] bool: which positions a path from `source` reaches (breadth-first over the child lists; source included)."""
    n = len(parents)
    if not 0 <= source < n:
        raise ValueError(f"source must be a position in [0, {n}), got {source}")
    children = [[] for _ in range(n)]
    for t, row in enumerate(parents):
        for p in row:
            children[p].append(t)
    reached, frontier = {source}, [source]
    while frontier:
        frontier = [c for node in frontier for c in children[node] if c not in reached]
        reached.update(frontier)
    return torch.tensor([t in reached for t in range(n)], dtype=torch.bool)


def reachability_construction(parents: Sequence[Sequence[int]], *,
                              node_ids: torch.Tensor | None = None) -> torch.Tensor:
    """[n] bool: the hand-set one-layer DeltaFormer's label "reachable from position 0" for each position.

    node_ids: [n] int64, a permutation giving each position's node id (ids are labels only: the one-hot keys sit in
    these slots), or None for the identity. The layer: k_t = e_{id(t)}, w_t = -sum_{p in parents[t]} e_{id(p)},
    v_t = 1[t = 0], linear kappa_1 and kappa_2, q_t = k_t; label = o_t > 0 (o_t = number of paths 0 -> t)."""
    n = len(parents)
    ids = torch.arange(n) if node_ids is None else torch.as_tensor(node_ids, dtype=torch.int64)
    if ids.shape != (n,) or not torch.equal(ids.sort().values, torch.arange(n)):
        raise ValueError(f"node_ids must be a permutation of range({n}), got {ids.tolist()}")
    keys = torch.eye(n, dtype=torch.float64)[ids]  # [n, n], one-hot node keys in topological order
    erase = -parent_matrix(parents) @ keys  # [n, n]: w_t = -sum of the parents' keys
    values = torch.zeros(n, 1, dtype=torch.float64)
    values[0] = 1.0
    u = delta_values(keys, values, kernel="linear", erase=erase)  # [n, 1] path counts from node 0
    o = delta_read(keys, keys, u, kernel="linear")  # [n, 1], each node reads its own slot
    return o[:, 0] > 0.5
