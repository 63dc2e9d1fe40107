"""Theorem 1 (state exchange) of *Understanding Transformer from the Perspective of Associative Memory* (Zhong, Xu,
Ao, Shi; arXiv:2505.19488, Sec. 3.2 and App. E): a one-layer DeltaFormer with hand-set keys tracks arbitrarily many
swaps of n elements, far more than the key dimension d, once its kernel snaps near-integers to integers.

The mechanism (eqs. 41-42 with kappa_1 = kappa_2 = f, no normalisation or temperature, w_t = k_t, alpha = beta = 1):

    u_t = v_t - sum_{i<t} f(k_i . k_t) u_i        (the matrix form of eqs. 96-97: U = (I + A)^{-1} V, A strictly
    o_t = sum_{i<=t} f(q_t . k_i) u_i              lower with A[t, i] = f(k_i . k_t); one unitriangular solve)

Tokens: first the n initial pairs (k_i, v_i = e_i) with keys satisfying Assumption 1 (unit, coherence eps < 1/8;
keys.py), then one token per swap of the elements at positions t1 > t2, k_t = k_{t1} - k_{t2}, v_t = 0. Reading
position j (q = k_j) after any number of swaps returns e_{element now at j} exactly when f satisfies Assumption 2
(f(x~) = x for x in {-1, 0, 1, 2} and |x~ - x| < 4 eps; integer rounding does). The variant without initial tokens
(the input holds swap tokens only, as in the S5 task) uses v_t = e_{t2} - e_{t1} and reads o_t + e_j.

Lemma 1 (f is linear on the dot products that occur) carries the induction (eqs. 101-110); `lemma1_gap` checks it
exhaustively. With the linear kernel and orthonormal keys, I - k k^T for a swap key is the Householder reflection
that exchanges two coordinates (`swap_reflection`), the negative-eigenvalue mechanism of DeltaNet; it cannot hold
more than d elements, which is the stress test of Fig. 5. App. E.2's eq. (111) builds an Assumption-2 kernel from
G = 4 exponential heads (`gqa_erase_weights`); the fit is exact only at the four points (see its docstring).

Shapes: keys [n, d] (position j's key in row j); token keys [T, d], values [T, n] (T = n + S with initial tokens,
else S); swaps [S, 2] int64 rows (t1, t2), t1 > t2; arrangements [S, n], the element at each position after each
swap. Everything is float64.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from regmem.ops.common.kernels import check_score_kernel, score_kernel

Kernel = str | Callable[[torch.Tensor], torch.Tensor]  # a name of SCORE_KERNELS, or f applied elementwise
GQA_POINTS = (-1.0, 0.0, 1.0, 2.0)  # Assumption 2's points, where eq. (111)'s mixture must equal the identity


def apply_kernel(kernel: Kernel, scores: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
    """f(scores) elementwise (integer rounding for "round"); entries where `mask` is False are 0."""
    if callable(kernel):
        out = kernel(scores)
        return out if mask is None else out.masked_fill(~mask, 0.0)
    check_score_kernel("kernel", kernel)
    if kernel == "softmax":
        raise ValueError("kernel must be elementwise (Theorem 1 has no normalisation), got 'softmax'")
    return score_kernel(kernel, scores, mask)


def delta_values(keys: torch.Tensor, values: torch.Tensor, *, kernel: Kernel = "round",
                 erase: torch.Tensor | None = None) -> torch.Tensor:
    """u [T, V]: u_t = v_t - sum_{i<t} f(k_i . w_t) u_i (eq. 41, alpha = beta = 1) as one unit-lower-triangular
    solve (eqs. 96-97). keys [T, K]; values [T, V]; erase [T, K], the erase vectors w_t (None: w = k, Theorem 1)."""
    erase = keys if erase is None else erase
    if keys.ndim != 2 or values.ndim != 2 or erase.shape != keys.shape or values.shape[0] != keys.shape[0]:
        raise ValueError(f"keys, erase must be [T, K] and values [T, V], got {tuple(keys.shape)}, "
                         f"{tuple(erase.shape)}, {tuple(values.shape)}")
    T = keys.shape[0]
    strictly_lower = torch.ones(T, T, dtype=torch.bool).tril(-1)
    a = apply_kernel(kernel, erase @ keys.T, strictly_lower)  # [T, T]: a[t, i] = f(w_t . k_i), i < t
    return torch.linalg.solve_triangular(a, values, upper=False, unitriangular=True)  # (I + A) U = V


def delta_read(queries: torch.Tensor, keys: torch.Tensor, u: torch.Tensor, *, kernel: Kernel = "round") -> torch.Tensor:
    """o [T, V]: o_t = sum_{i<=t} f(q_t . k_i) u_i (eq. 42). queries, keys [T, K]; u [T, V]."""
    T = keys.shape[0]
    causal = torch.ones(T, T, dtype=torch.bool).tril()
    return apply_kernel(kernel, queries @ keys.T, causal) @ u


def random_swaps(n: int, num_swaps: int, *, generator: torch.Generator) -> torch.Tensor:
    """[num_swaps, 2] int64: pairs of distinct positions drawn uniformly, each row ordered (t1, t2) with t1 > t2."""
    if not isinstance(n, int) or n < 2:
        raise ValueError(f"n must be an int >= 2, got {n!r}")
    if not isinstance(num_swaps, int) or num_swaps < 0:
        raise ValueError(f"num_swaps must be a non-negative int, got {num_swaps!r}")
    first = torch.randint(n, (num_swaps,), generator=generator)
    second = torch.randint(n - 1, (num_swaps,), generator=generator)
    second = second + (second >= first).long()  # uniform over the other n - 1 positions
    return torch.stack([torch.maximum(first, second), torch.minimum(first, second)], dim=1)


def arrangements(swaps: torch.Tensor, n: int) -> torch.Tensor:
    """[S, n] int64: row s holds the element at each position after swaps[: s + 1], from the identity arrangement
    (element i at position i); a brute-force simulation, the reference the mechanism is checked against."""
    current = list(range(n))
    rows = []
    for a, b in swaps.tolist():
        current[a], current[b] = current[b], current[a]
        rows.append(list(current))
    return torch.tensor(rows, dtype=torch.int64).reshape(len(rows), n)


def exchange_tokens(keys: torch.Tensor, swaps: torch.Tensor, *,
                    initial_tokens: bool = True) -> tuple[torch.Tensor, torch.Tensor]:
    """Token keys [T, d] and values [T, n] of Theorem 1: the n initial pairs (k_i, e_i) (if `initial_tokens`), then
    (k_{t1} - k_{t2}, 0) per swap; without initial tokens the swap values are e_{t2} - e_{t1}."""
    n = keys.shape[0]
    if (swaps.ndim != 2 or swaps.shape[1] != 2 or bool((swaps[:, 0] <= swaps[:, 1]).any())
            or bool((swaps[:, 1] < 0).any()) or bool((swaps[:, 0] >= n).any())):
        raise ValueError(f"swaps must be [S, 2] rows (t1, t2) with n > t1 > t2 >= 0 (n = {n}), "
                         f"got shape {tuple(swaps.shape)}")
    t1, t2 = swaps[:, 0], swaps[:, 1]
    swap_keys = keys[t1] - keys[t2]  # [S, d]
    eye = torch.eye(n, dtype=keys.dtype)
    if initial_tokens:
        return torch.cat([keys, swap_keys]), torch.cat([eye, torch.zeros(len(swaps), n, dtype=keys.dtype)])
    return swap_keys, eye[t2] - eye[t1]


def decode_positions(keys: torch.Tensor, token_keys: torch.Tensor, u: torch.Tensor, positions: torch.Tensor, *,
                     kernel: Kernel = "round", initial_tokens: bool = True) -> torch.Tensor:
    """[S, P] int64: after each swap token, argmax over values of the read with q = k_j for each j in `positions`
    [P] (plus e_j without initial tokens). token_keys [T, d] and u [T, n] as from `exchange_tokens` and
    `delta_values`. Step by step, re-decoding only the reads a token changes (f(q . k_t) != 0), so the [S, P, n]
    reads never sit in memory and a snapping kernel costs O(S n) rather than O(S P n)."""
    n = keys.shape[0]
    start = n if initial_tokens else 0
    weights = apply_kernel(kernel, keys[positions] @ token_keys.T)  # [P, T], f(q . k_i) for every token
    reads = weights[:, :start] @ u[:start]  # [P, n], the reads just before the first swap
    offset = torch.zeros_like(reads) if initial_tokens else torch.eye(n, dtype=u.dtype)[positions]  # [P, n]
    current = (reads + offset).argmax(-1)  # [P]
    decoded = torch.empty(token_keys.shape[0] - start, len(positions), dtype=torch.int64)
    for step, t in enumerate(range(start, token_keys.shape[0])):
        rows = torch.nonzero(weights[:, t]).squeeze(1)  # the reads this token changes
        reads[rows] += weights[rows, t, None] * u[t]
        current[rows] = (reads[rows] + offset[rows]).argmax(-1)
        decoded[step] = current
    return decoded


def simulate_state_exchange(keys: torch.Tensor, num_swaps: int, *, kernel: Kernel = "round",
                            initial_tokens: bool = True, positions: torch.Tensor | None = None,
                            num_sequences: int = 1, seed: int = 0) -> float:
    """The fraction of reads that return the right element: `num_sequences` sequences of `num_swaps` uniform random
    swaps of n = len(keys) elements, each position of `positions` (default all) read after every swap and decoded
    by argmax over values. 1.0 is exact tracking (Theorem 1)."""
    if not isinstance(num_sequences, int) or num_sequences < 1:
        raise ValueError(f"num_sequences must be a positive int, got {num_sequences!r}")
    n = keys.shape[0]
    positions = torch.arange(n) if positions is None else torch.as_tensor(positions, dtype=torch.int64)
    generator = torch.Generator().manual_seed(seed)
    correct = total = 0
    for _ in range(num_sequences):
        swaps = random_swaps(n, num_swaps, generator=generator)
        token_keys, values = exchange_tokens(keys, swaps, initial_tokens=initial_tokens)
        u = delta_values(token_keys, values, kernel=kernel)
        decoded = decode_positions(keys, token_keys, u, positions, kernel=kernel, initial_tokens=initial_tokens)
        truth = arrangements(swaps, n)[:, positions]  # [S, P]
        correct += int((decoded == truth).sum())
        total += truth.numel()
    return correct / max(total, 1)


def lemma1_gap(keys: torch.Tensor, kernel: Kernel = "round", *, ordered: bool = True) -> float:
    """max |f((k_i - k_j) . k_l) - f(k_i . k_l) + f(k_j . k_l)| over every pair of positions (j < i if `ordered`,
    as Lemma 1 states it; else every i != j) and every token key k_l: the n initial keys and the swap keys
    k_{l1} - k_{l2}, l1 > l2. 0.0 means Lemma 1 holds. keys [n, d], n >= 2 (O(n^4) work: small n)."""
    n = keys.shape[0]
    if n < 2:
        raise ValueError(f"keys must hold at least 2 rows, got {n}")
    l1, l2 = torch.tril_indices(n, n, -1)  # l1 > l2
    tokens = torch.cat([keys, keys[l1] - keys[l2]])  # [n + n(n-1)/2, d]
    i, j = (l1, l2) if ordered else torch.nonzero(~torch.eye(n, dtype=torch.bool), as_tuple=True)
    lhs = apply_kernel(kernel, (keys[i] - keys[j]) @ tokens.T)  # [pairs, tokens]
    single = apply_kernel(kernel, keys @ tokens.T)  # [n, tokens]
    return float((lhs - single[i] + single[j]).abs().max())


def swap_reflection(keys: torch.Tensor, a: int, b: int) -> torch.Tensor:
    """[d, d]: I - k k^T with k = k_a - k_b, DeltaNet's transition for the swap token (linear kernel, App. E). For
    orthonormal keys it is a Householder reflection (|k|^2 = 2) that maps k_a to k_b and fixes k_a + k_b and the
    complement."""
    if a == b:
        raise ValueError(f"a and b must differ, got {a} and {b}")
    k = keys[a] - keys[b]  # [d]
    return torch.eye(keys.shape[1], dtype=keys.dtype) - torch.outer(k, k)


def gqa_erase_weights(points: tuple[float, ...] = GQA_POINTS) -> torch.Tensor:
    """a [G] (G = len(points), 4 by default) with sum_{j=1..G} a_j exp(j x) = x at each x of `points`: eq. (111)
    with erase vectors w^j = j k_t gives kappa_1(x) = sum_j a_j exp(j x). For the default points a is about
    (-5.1822, 7.6687, -2.7289, 0.2424). The mixture interpolates the identity only at the points, with slopes in
    the hundreds near x = 2 (|error| about 4 at 2 +- 0.01), so Assumption 2 holds only for eps near 0."""
    x = torch.tensor(points, dtype=torch.float64)
    if x.ndim != 1 or len(x) < 1 or len(torch.unique(x)) != len(x):
        raise ValueError(f"points must be distinct numbers, got {points!r}")
    heads = torch.arange(1, len(x) + 1, dtype=torch.float64)
    return torch.linalg.solve(torch.exp(x[:, None] * heads), x)  # [G]


def gqa_erase_kernel(scores: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
    """sum_{j=1..G} weights[j-1] exp(j scores), elementwise (eq. 111's kappa_1 with w^j = j k); keeps the shape."""
    heads = torch.arange(1, len(weights) + 1, dtype=scores.dtype)
    return (weights.to(scores.dtype) * torch.exp(scores[..., None] * heads)).sum(-1)
