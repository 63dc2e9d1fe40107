"""The stability bounds of DeltaFormer's two passes, eqs. (50)-(52) of arXiv:2505.19488 (Sec. 3.2): they hold on
random instances built from DeltaFormer's own matrices, they are tight on a constructed instance, and eq. (51)'s
first-order bound fails for the true error once its small-perturbation hypothesis is violated (where the exact
bound still holds, with equality)."""

import pytest
import torch

from regmem.analysis.stability import (
    deltaformer_pass_matrices,
    read_bound,
    read_error,
    spectral_norm,
    value_pass_bound,
    value_pass_error,
    value_pass_exact_bound,
    value_pass_first_order,
)
from regmem.ops import deltaformer

T, K, D = 8, 4, 3
KERNELS = [("softmax", "softmax"), ("exp", "softmax"), ("linear", "linear"), ("relu", "exp")]


def _instance(seed, erase_kernel, read_kernel, size=0.1):
    """DeltaFormer's (A_1, A_2) for random q, k, w, plus random perturbations of spectral norm `size` relative to
    the matrix, and random V."""
    g = torch.Generator().manual_seed(seed)
    q, k, w = (torch.randn(T, K, generator=g, dtype=torch.float64) for _ in range(3))
    A1, A2 = deltaformer_pass_matrices(q, k, w, erase_kernel=erase_kernel, read_kernel=read_kernel, beta=0.5)
    dA1, dA2 = (torch.randn(T, T, generator=g, dtype=torch.float64) for _ in range(2))
    dA1 = dA1 * size / spectral_norm(dA1) / spectral_norm(torch.linalg.inv(A1))  # ||A^-1|| ||dA|| = size
    dA2 = dA2 * size * spectral_norm(A2) / spectral_norm(dA2)
    V = torch.randn(T, D, generator=g, dtype=torch.float64)
    return A1, dA1, A2, dA2, V


def _largest_singular_value(A):
    return torch.linalg.svdvals(A)[0]


@pytest.mark.parametrize("kernels", KERNELS, ids=lambda k: "-".join(k))
@pytest.mark.parametrize("seed", range(5))
def test_eq51_and_eq52_hold_on_random_deltaformer_instances(seed, kernels):
    A1, dA1, A2, dA2, V = _instance(seed, *kernels)
    U = torch.linalg.solve(A1, V)
    assert value_pass_first_order(A1, dA1, V) <= value_pass_bound(A1, dA1, V) * (1 + 1e-12)
    assert value_pass_error(A1, dA1, V) <= value_pass_exact_bound(A1, dA1, V) * (1 + 1e-12)
    assert read_error(A2, dA2, U) <= read_bound(A2, dA2, U) * (1 + 1e-12)


@pytest.mark.parametrize("seed", range(3))
def test_eq51_first_order_term_is_the_error_to_first_order(seed):
    """The "~" of eq. (51): error / first-order term -> 1 as the perturbation shrinks."""
    for size, tolerance in [(1e-3, 1e-2), (1e-6, 1e-5)]:
        A1, dA1, _, _, V = _instance(seed, "softmax", "softmax", size=size)
        ratio = value_pass_error(A1, dA1, V) / value_pass_first_order(A1, dA1, V)
        assert abs(ratio - 1) < tolerance, (size, ratio)


def test_the_bounds_are_the_equations_computed_directly():
    """Each function against a direct transcription: explicit inverses, norms from singular values."""
    A1, dA1, A2, dA2, V = _instance(0, "exp", "softmax")
    inv = torch.linalg.inv(A1)
    frob = lambda X: X.pow(2).sum().sqrt()  # noqa: E731
    expected_bound = _largest_singular_value(inv) ** 2 * _largest_singular_value(dA1) * frob(V)
    torch.testing.assert_close(value_pass_bound(A1, dA1, V), expected_bound, rtol=1e-10, atol=0)
    torch.testing.assert_close(value_pass_first_order(A1, dA1, V), frob(inv @ dA1 @ inv @ V), rtol=1e-10, atol=0)
    torch.testing.assert_close(value_pass_error(A1, dA1, V), frob(torch.linalg.inv(A1 + dA1) @ V - inv @ V),
                               rtol=1e-8, atol=0)
    U = inv @ V
    torch.testing.assert_close(read_error(A2, dA2, U), frob(dA2 @ U), rtol=1e-10, atol=1e-14)
    torch.testing.assert_close(read_bound(A2, dA2, U), _largest_singular_value(dA2) * frob(U), rtol=1e-10, atol=0)


def test_eq51_is_tight_on_the_top_singular_pair():
    """V along the top right-singular vector of A^-1 and dA = eps (that vector)(the top left-singular vector)^T
    make every inequality of eq. (51) an equality, ||A^-1 dA A^-1 V|| = eps sigma_1^2 ||V||; the true error
    approaches it as eps -> 0."""
    A1, *_ = _instance(1, "softmax", "softmax")
    U_svd, S, Vh = torch.linalg.svd(torch.linalg.inv(A1))
    top_in, top_out, sigma = Vh[0], U_svd[:, 0], S[0]  # A^-1 top_in = sigma top_out
    eps, V = 1e-7, Vh[0].unsqueeze(-1)  # [T, 1]
    dA = eps * torch.outer(top_in, top_out)  # ||dA|| = eps; dA A^-1 V = eps sigma top_in
    bound = value_pass_bound(A1, dA, V)
    torch.testing.assert_close(bound, eps * sigma ** 2, rtol=1e-10, atol=0)
    torch.testing.assert_close(value_pass_first_order(A1, dA, V), bound, rtol=1e-10, atol=0)
    assert abs(value_pass_error(A1, dA, V) / bound - 1) < 1e-4


def test_eq52_is_tight_for_a_rank_one_perturbation_along_u():
    g = torch.Generator().manual_seed(3)
    U, y = torch.randn(T, D, generator=g, dtype=torch.float64), torch.randn(T, generator=g, dtype=torch.float64)
    top = torch.linalg.svd(U)[0][:, 0]  # the left singular vector of U's top singular value
    dA2 = torch.outer(y, top) * 0.3
    A2 = torch.randn(T, T, generator=g, dtype=torch.float64).tril()
    # U = top r^T: dA2 U = 0.3 y r^T, so ||dA2 U||_F = 0.3 ||y|| ||r|| = ||dA2||_2 ||U||_F, the bound
    rank_one = torch.outer(top, torch.randn(D, generator=g, dtype=torch.float64))
    torch.testing.assert_close(read_error(A2, dA2, rank_one), read_bound(A2, dA2, rank_one), rtol=1e-10, atol=0)
    assert read_error(A2, dA2, U) < read_bound(A2, dA2, U)  # strict for a generic U


def test_eq51_fails_for_the_true_error_when_the_perturbation_is_not_small():
    """With ||A^-1|| ||dA|| = 0.9 the first-order bound is ten times too small (A_1 = I: a layer with beta = 0,
    dA = -0.9 I), while the exact bound holds with equality."""
    A1, dA, V = torch.eye(T, dtype=torch.float64), -0.9 * torch.eye(T, dtype=torch.float64), torch.ones(T, D).double()
    error = value_pass_error(A1, dA, V)  # ||(0.1 I)^-1 V - V|| = 9 ||V||
    torch.testing.assert_close(error, 9 * torch.linalg.norm(V), rtol=1e-12, atol=0)
    assert error > 9 * value_pass_bound(A1, dA, V)
    torch.testing.assert_close(value_pass_exact_bound(A1, dA, V), error, rtol=1e-12, atol=0)
    assert torch.isinf(value_pass_exact_bound(A1, -1.5 * torch.eye(T, dtype=torch.float64), V))


def test_pass_matrices_are_the_deltaformer_op():
    """O = A_2 A_1^{-1} V equals the `deltaformer` op with the same kernels, beta and a single head."""
    g = torch.Generator().manual_seed(4)
    q, k, w = (torch.randn(T, K, generator=g, dtype=torch.float64) for _ in range(3))
    V = torch.randn(T, D, generator=g, dtype=torch.float64)
    A1, A2 = deltaformer_pass_matrices(q, k, w, erase_kernel="softmax", read_kernel="exp", beta=0.7)
    beta = torch.full((1, T, 1), 0.7, dtype=torch.float64)
    o, _ = deltaformer(q[None, :, None], k[None, :, None], V[None, :, None], w[None, :, None], None, beta,
                       erase_kernel="softmax", read_kernel="exp", mode="reference")
    torch.testing.assert_close(o[0, :, 0], A2 @ torch.linalg.solve(A1, V), rtol=1e-10, atol=1e-12)


def test_bad_shapes_raise_value_error_naming_the_argument():
    A, V = torch.eye(3, dtype=torch.float64), torch.ones(3, 2, dtype=torch.float64)
    with pytest.raises(ValueError, match="A1 must be a square"):
        value_pass_bound(torch.ones(3, 2, dtype=torch.float64), A, V)
    with pytest.raises(ValueError, match="perturbation"):
        value_pass_error(A, torch.ones(2, 2, dtype=torch.float64), V)
    with pytest.raises(ValueError, match="U must be"):
        read_bound(A, A, torch.ones(4, 2, dtype=torch.float64))
    with pytest.raises(ValueError, match="erase_kernel"):
        deltaformer_pass_matrices(V, V, V, erase_kernel="gauss", read_kernel="softmax")
