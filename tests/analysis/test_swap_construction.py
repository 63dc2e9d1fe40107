"""Expressivity constructions of *Understanding Transformer from the Perspective of Associative Memory*
(arXiv:2505.19488): Theorem 1's state exchange (App. E) with near-orthogonal keys, Lemma 1, the Householder view,
the GQA erase-kernel fit of eq. (111), and reachability through the inverse with a hand-set one-layer DeltaFormer
(Sec. 3.3)."""

import math

import pytest
import torch

from regmem.analysis.keys import (
    coherence,
    gaussian_keys,
    identity_hadamard_keys,
    make_keys,
    optimised_keys,
    orthonormal_keys,
    sylvester_hadamard,
    welch_bound,
)
from regmem.analysis.reachability import (
    bfs_reachable,
    parent_matrix,
    path_count_series,
    path_counts,
    reachability_construction,
)
from regmem.analysis.swap_construction import (
    apply_kernel,
    arrangements,
    decode_positions,
    delta_read,
    delta_values,
    exchange_tokens,
    gqa_erase_kernel,
    gqa_erase_weights,
    lemma1_gap,
    random_swaps,
    simulate_state_exchange,
    swap_reflection,
)
from regmem.ops.deltaformer import deltaformer


@pytest.fixture(scope="module")
def optimised_80():
    return optimised_keys(80, 64, steps=100)  # eps about 0.07 < 1/8, in a fraction of a second


# Theorem 1 (App. E) -----------------------------------------------------------------------------------------------

@pytest.mark.parametrize("n, d, construction, num_swaps", [
    (5, 8, "orthonormal", 2000),
    (64, 64, "orthonormal", 1000),
    (256, 128, "identity_hadamard", 1000),
], ids=["n5-d8-orthonormal", "n64-d64-orthonormal", "n256-d128-identity-hadamard"])
def test_theorem1_reads_the_exact_arrangement_after_every_swap(n, d, construction, num_swaps):
    keys = make_keys(construction, n, d)
    assert coherence(keys) < 1 / 8
    assert simulate_state_exchange(keys, num_swaps, kernel="round", seed=n) == 1.0  # every position, every step


def test_theorem1_holds_with_coherence_optimised_keys_beyond_d(optimised_80):
    assert coherence(optimised_80) < 1 / 8
    assert simulate_state_exchange(optimised_80, 1000, kernel="round", seed=3) == 1.0


@pytest.mark.parametrize("n, d, construction, num_swaps", [
    (5, 8, "orthonormal", 3000), (256, 128, "identity_hadamard", 1000)], ids=["n5-d8", "n256-d128"])
def test_theorem1_without_initial_tokens_reads_o_plus_e_j(n, d, construction, num_swaps):
    keys = make_keys(construction, n, d)
    assert simulate_state_exchange(keys, num_swaps, kernel="round", initial_tokens=False, seed=1) == 1.0


def test_linear_kernel_fails_with_twice_as_many_elements_as_dimensions():
    keys = identity_hadamard_keys(256, 128)  # n = 2d, Assumption 1 holds
    every_8th = torch.arange(0, 256, 8)  # a dense (linear) read updates every position at every step
    assert simulate_state_exchange(keys, 1000, kernel="linear", positions=every_8th, seed=0) < 0.6
    assert simulate_state_exchange(keys, 1000, kernel="round", positions=every_8th, seed=0) == 1.0  # same swaps


def test_linear_kernel_tracks_exactly_with_orthonormal_keys_householder_regime():
    keys = orthonormal_keys(16, 16)
    assert simulate_state_exchange(keys, 1000, kernel="linear", seed=0) == 1.0


def test_gaussian_keys_break_assumption_1_and_the_rounding_kernel_then_fails():
    keys = gaussian_keys(256, 128)
    assert coherence(keys) > 1 / 8
    assert simulate_state_exchange(keys, 512, kernel="round", positions=[0], seed=0) < 0.95


def test_swap_token_values_follow_the_induction_u_t_equals_v_t2_minus_v_t1():
    """Eqs. 101-110: u_t = v~_{t2} - v~_{t1}, the difference of the values held before the swap."""
    keys = orthonormal_keys(6, 8)
    swaps = random_swaps(6, 40, generator=torch.Generator().manual_seed(0))
    token_keys, values = exchange_tokens(keys, swaps)
    u = delta_values(token_keys, values, kernel="round")
    held = torch.cat([torch.arange(6)[None], arrangements(swaps, 6)[:-1]])  # [S, n], before each swap
    eye = torch.eye(6, dtype=torch.float64)
    expected = eye[held[torch.arange(40), swaps[:, 1]]] - eye[held[torch.arange(40), swaps[:, 0]]]
    assert torch.equal(u[:6], eye) and torch.equal(u[6:], expected)


def test_initial_pairs_do_not_interact_erratum_f_of_ki_kj_not_ki_ki():
    """App. E prints f(k_i . k_i) = 0; it is f(k_i . k_j) = 0 for i != j (f(k_i . k_i) = 1), so u_i = v_i."""
    keys = identity_hadamard_keys(256, 128)
    f = apply_kernel("round", keys @ keys.T)
    assert torch.equal(f.diagonal(), torch.ones(256, dtype=torch.float64))  # the printed statement is false
    assert torch.equal(f - torch.diag(f.diagonal()), torch.zeros(256, 256, dtype=torch.float64))
    values = torch.eye(256, dtype=torch.float64)
    assert torch.equal(delta_values(keys, values, kernel="round"), values)


def test_triangular_solve_matches_the_deltaformer_op_and_the_deltanet_recurrence():
    keys = identity_hadamard_keys(24, 16)
    swaps = random_swaps(24, 40, generator=torch.Generator().manual_seed(1))
    k, v = exchange_tokens(keys, swaps)  # [T, d], [T, n]
    q = torch.randn(k.shape, generator=torch.Generator().manual_seed(2), dtype=torch.float64)
    for kernel in ("round", "linear"):
        o = delta_read(q, k, delta_values(k, v, kernel=kernel), kernel=kernel)
        ref, _ = deltaformer(q[None, :, None], k[None, :, None], v[None, :, None], erase_kernel=kernel,
                             read_kernel=kernel, scale=1.0, mode="reference")
        torch.testing.assert_close(o, ref[0, :, 0], rtol=0, atol=1e-9)
    state = torch.zeros(v.shape[1], k.shape[1], dtype=torch.float64)  # S_t = S_{t-1}(I - k k^T) + v k^T (eq. 93)
    reads = []
    for t in range(k.shape[0]):
        state = state - torch.outer(state @ k[t], k[t]) + torch.outer(v[t], k[t])
        reads.append(state @ q[t])
    torch.testing.assert_close(delta_read(q, k, delta_values(k, v, kernel="linear"), kernel="linear"),
                               torch.stack(reads), rtol=0, atol=1e-9)


def test_decode_positions_matches_a_dense_read():
    keys = identity_hadamard_keys(40, 32)
    swaps = random_swaps(40, 60, generator=torch.Generator().manual_seed(4))
    k, v = exchange_tokens(keys, swaps)
    positions = torch.tensor([0, 7, 39])
    for kernel in ("round", "linear"):
        u = delta_values(k, v, kernel=kernel)
        dense = torch.stack([delta_read(keys[p].expand_as(k), k, u, kernel=kernel)[40:] for p in positions], 1)
        assert torch.equal(decode_positions(keys, k, u, positions, kernel=kernel), dense.argmax(-1))


# Lemma 1 and the Householder view (App. E) ------------------------------------------------------------------------

def test_lemma1_holds_exhaustively_for_integer_rounding(optimised_80):
    hadamard_mix = identity_hadamard_keys(256, 128)[torch.tensor([0, 1, 2, 3, 128, 129, 130, 200, 255])]
    for keys in (orthonormal_keys(8, 8), hadamard_mix, optimised_80[:12]):
        assert coherence(keys) < 1 / 8
        assert lemma1_gap(keys, "round") == 0.0
        assert lemma1_gap(keys, "round", ordered=False) == 0.0  # rounding needs no ordering (-2 snaps to -2)


def test_lemma1_fails_when_assumption_1_fails():
    keys = gaussian_keys(8, 4)
    assert coherence(keys) > 1 / 8 and lemma1_gap(keys, "round") >= 1.0


def test_lemma1_needs_the_ordering_for_a_kernel_exact_only_on_minus_one_to_two():
    weights = gqa_erase_weights()
    keys = orthonormal_keys(6, 6)
    assert lemma1_gap(keys, lambda s: gqa_erase_kernel(s, weights)) < 1e-9
    assert lemma1_gap(keys, lambda s: gqa_erase_kernel(s, weights), ordered=False) > 1.0  # f(-2) != -2


def test_swap_key_gives_a_householder_reflection_that_exchanges_two_coordinates():
    keys = orthonormal_keys(6, 6, seed=3)
    a, b = 4, 1
    H = swap_reflection(keys, a, b)
    torch.testing.assert_close(H, H.T, rtol=0, atol=1e-12)
    torch.testing.assert_close(H @ H, torch.eye(6, dtype=torch.float64), rtol=0, atol=1e-12)
    eigenvalues = torch.linalg.eigvalsh(H)
    torch.testing.assert_close(eigenvalues, torch.tensor([-1.0, 1, 1, 1, 1, 1], dtype=torch.float64),
                               rtol=0, atol=1e-12)
    swap = torch.eye(6, dtype=torch.float64)[[0, 4, 2, 3, 1, 5]]
    torch.testing.assert_close(keys @ H @ keys.T, swap, rtol=0, atol=1e-12)  # in the key basis: a <-> b
    assert torch.equal(swap_reflection(torch.eye(6, dtype=torch.float64), a, b), swap)


# GQA erase kernel, eq. (111) (App. E.2) ---------------------------------------------------------------------------

def test_gqa_fit_weights_and_exact_interpolation():
    weights = gqa_erase_weights()
    torch.testing.assert_close(weights, torch.tensor([-5.1822, 7.6687, -2.7289, 0.2424], dtype=torch.float64),
                               rtol=0, atol=1e-4)
    points = torch.tensor([-1.0, 0.0, 1.0, 2.0], dtype=torch.float64)
    torch.testing.assert_close(gqa_erase_kernel(points, weights), points, rtol=0, atol=1e-10)


def test_gqa_fit_is_exact_only_at_the_points_error_above_one_near_two():
    weights = gqa_erase_weights()
    for x in (1.99, 2.01):
        assert abs(float(gqa_erase_kernel(torch.tensor(x, dtype=torch.float64), weights)) - x) > 1.0


# Key constructions (Assumption 1) --------------------------------------------------------------------------------

def test_key_constructions_are_unit_with_their_coherence(optimised_80):
    for keys in (orthonormal_keys(64, 64), identity_hadamard_keys(256, 128), optimised_80, gaussian_keys(256, 128)):
        torch.testing.assert_close(keys.norm(dim=1), torch.ones(len(keys), dtype=torch.float64), rtol=0, atol=1e-12)
    assert coherence(orthonormal_keys(64, 64)) < 1e-12
    assert coherence(identity_hadamard_keys(256, 128)) == pytest.approx(1 / math.sqrt(128), abs=1e-12)
    H = sylvester_hadamard(16)
    assert torch.equal(H @ H.T, 16 * torch.eye(16, dtype=torch.float64))
    assert welch_bound(80, 64) <= coherence(optimised_80) < min(1 / 8, coherence(gaussian_keys(80, 64)) / 2)


# Reachability through the inverse (Sec. 3.3) ---------------------------------------------------------------------

def two_tree_instance(n: int, generator: torch.Generator) -> tuple[list[list[int]], torch.Tensor]:
    """Balanced two trees in topological order: class A = {0} and a random half of the rest, each node's parent
    uniform over earlier nodes of its class (the other class's first node is a root). Returns parents, labels."""
    in_a = torch.zeros(n, dtype=torch.bool)
    in_a[0] = True
    in_a[1 + torch.randperm(n - 1, generator=generator)[: n // 2 - 1]] = True
    parents = []
    for t in range(n):
        earlier = [p for p in range(t) if in_a[p] == in_a[t]]
        parents.append([earlier[int(torch.randint(len(earlier), (), generator=generator))]] if earlier else [])
    return parents, in_a


def random_dag(n: int, generator: torch.Generator) -> list[list[int]]:
    """Each node after the first has 0-3 distinct parents among earlier nodes."""
    parents = [[]]
    for t in range(1, n):
        count = min(t, int(torch.randint(4, (), generator=generator)))
        parents.append(torch.randperm(t, generator=generator)[:count].tolist())
    return parents


def test_inverse_equals_the_path_count_series_exactly_erratum_not_an_approximation():
    """Sec. 3.3 says (I - A)^{-1} approximates I + A + ... + A^n; for a DAG in topological order it is equal."""
    generator = torch.Generator().manual_seed(0)
    for _ in range(20):
        parents = random_dag(32, generator)
        counts = path_counts(parents)
        assert torch.equal(counts, path_count_series(parent_matrix(parents)))
        assert torch.equal(counts, counts.round()) and bool((counts >= 0).all())
        assert torch.equal(counts[:, 0] > 0, bfs_reachable(parents))


def test_hand_set_layer_labels_reachability_on_balanced_two_trees():
    generator = torch.Generator().manual_seed(1)
    for _ in range(100):
        parents, in_a = two_tree_instance(32, generator)
        assert int(in_a.sum()) == 16
        labels = reachability_construction(parents, node_ids=torch.randperm(32, generator=generator))
        assert torch.equal(labels, bfs_reachable(parents)) and torch.equal(labels, in_a)


def test_hand_set_layer_labels_reachability_on_multi_parent_dags():
    generator = torch.Generator().manual_seed(2)
    positives = 0
    for _ in range(100):
        parents = random_dag(32, generator)
        labels = reachability_construction(parents, node_ids=torch.randperm(32, generator=generator))
        assert torch.equal(labels, bfs_reachable(parents))
        positives += int(labels.sum())
    assert 100 < positives < 3100  # both labels occur


@pytest.mark.parametrize("call, argument", [
    (lambda: orthonormal_keys(9, 8), "n must be <= d"),
    (lambda: identity_hadamard_keys(300, 128), "n must be <= 2d"),
    (lambda: sylvester_hadamard(12), "d must be a power of 2"),
    (lambda: optimised_keys(8, 4, power=3), "power"),
    (lambda: make_keys("random", 4, 4), "construction"),
    (lambda: apply_kernel("softmax", torch.zeros(2, 2)), "kernel"),
    (lambda: exchange_tokens(orthonormal_keys(4, 4), torch.tensor([[1, 2]])), "swaps"),
    (lambda: exchange_tokens(orthonormal_keys(4, 4), torch.tensor([[4, 1]])), "swaps"),
    (lambda: parent_matrix([[], [1]]), r"parents\[1\]"),
    (lambda: reachability_construction([[], [0]], node_ids=torch.tensor([0, 0])), "node_ids"),
    (lambda: simulate_state_exchange(orthonormal_keys(4, 4), 3, num_sequences=0), "num_sequences"),
], ids=["orthonormal", "hadamard-size", "hadamard-dim", "power", "construction", "softmax", "swaps-order",
        "swaps-range", "parents", "node-ids", "num-sequences"])
def test_bad_input_raises_value_error_naming_the_argument(call, argument):
    with pytest.raises(ValueError, match=argument):
        call()
