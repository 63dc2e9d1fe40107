"""The autograd.Functions whose backward is written by hand (segsum, the chunk decays, the diagonal gate's decayed
scores, the UT inverse and the delta rule's state pass across chunks) against autograd through the plain formulas
they replace, and torch's gradcheck."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from regmem.ops.common import chunk_decays, decayed_scores, segsum
from regmem.ops.delta.wy import chunk_state_scan, unit_lower_inverse

f64 = torch.float64


def _plain_segsum(g):
    """D[t, s] = sum_{s < j <= t} g_j by an explicit double loop (autograd records every term)."""
    T = g.shape[-1]
    rows = []
    for t in range(T):
        row = [g[..., s + 1:t + 1].sum(-1) if s <= t else torch.full_like(g[..., 0], float("-inf")) for s in range(T)]
        rows.append(torch.stack(row, dim=-1) if row else g.new_zeros(*g.shape[:-1], 0))
    return torch.stack(rows, dim=-2) if rows else g.new_zeros(*g.shape, 0)


@pytest.mark.hypothesis
@given(T=st.integers(1, 9), lead=st.lists(st.integers(1, 3), max_size=2), seed=st.integers(0, 2**16))
def test_segsum_values_and_gradient_match_the_plain_sums(T, lead, seed):
    gen = torch.Generator().manual_seed(seed)
    g = (-torch.rand(*lead, T, generator=gen, dtype=f64) * 3).requires_grad_()
    cotangent = torch.randn(*lead, T, T, generator=gen, dtype=f64)
    D, D_plain = segsum(g), _plain_segsum(g)
    torch.testing.assert_close(D, D_plain, rtol=1e-12, atol=1e-12)
    lower = torch.ones(T, T, dtype=torch.bool).tril()  # -inf above the diagonal has no gradient to compare
    (grad,) = torch.autograd.grad((D.masked_fill(~lower, 0) * cotangent).sum(), g, allow_unused=True)
    (grad_plain,) = torch.autograd.grad((D_plain.masked_fill(~lower, 0) * cotangent).sum(), g, allow_unused=True)
    grad_plain = torch.zeros_like(g) if grad_plain is None else grad_plain
    torch.testing.assert_close(grad, grad_plain, rtol=1e-12, atol=1e-12)


def test_segsum_of_an_empty_sequence_is_empty_and_differentiable():
    g = torch.zeros(2, 0, dtype=f64, requires_grad=True)
    D = segsum(g)
    assert D.shape == (2, 0, 0)
    (grad,) = torch.autograd.grad(D.sum() + g.sum(), g)
    assert grad.shape == (2, 0)


def test_segsum_gradient_ignores_the_upper_triangle_and_passes_gradcheck():
    g = (-torch.rand(2, 7, dtype=f64)).requires_grad_()
    lower = torch.ones(7, 7, dtype=torch.bool).tril()
    nan_above = torch.ones(2, 7, 7, dtype=f64).masked_fill(~lower, float("nan"))  # as if exp(-inf) met an inf
    (grad,) = torch.autograd.grad(segsum(g), g, grad_outputs=nan_above)
    assert torch.isfinite(grad).all()
    torch.testing.assert_close(grad[:, 0], torch.zeros(2, dtype=f64))  # no segment sum contains g_0
    assert torch.autograd.gradcheck(lambda x: torch.exp(segsum(x)), (g,))


@pytest.mark.parametrize("C", [1, 2, 8])
def test_unit_lower_inverse_is_the_inverse_and_its_gradient_touches_only_the_strict_lower_triangle(C):
    gen = torch.Generator().manual_seed(C)
    A = torch.randn(3, C, C, generator=gen, dtype=f64).requires_grad_()
    inverse = unit_lower_inverse(A)
    M = torch.eye(C, dtype=f64) + A.detach().tril(-1)
    torch.testing.assert_close(inverse, torch.linalg.inv(M), rtol=1e-12, atol=1e-12)
    cotangent = torch.randn(3, C, C, generator=gen, dtype=f64)
    (grad,) = torch.autograd.grad((inverse * cotangent).sum(), A)
    A_free = A.detach().tril(-1).requires_grad_()
    (expected,) = torch.autograd.grad((torch.linalg.inv(torch.eye(C, dtype=f64) + A_free) * cotangent).sum(), A_free)
    torch.testing.assert_close(grad, expected.tril(-1), rtol=1e-10, atol=1e-12)
    assert torch.autograd.gradcheck(lambda a: unit_lower_inverse(a), (A,))


def _plain_state_scan(W, U_prime, k_out, decay, S0):
    entering, pseudo, S = [], [], S0
    for n in range(W.shape[0]):
        entering.append(S)
        U = U_prime[n] - W[n] @ S
        pseudo.append(U)
        S = decay[n] * S + k_out[n].transpose(-1, -2) @ U
    return torch.stack(entering), torch.stack(pseudo), S


@pytest.mark.parametrize("diagonal", [False, True], ids=["scalar-decay", "diagonal-decay"])
@pytest.mark.parametrize("used", ["all", "no-final-state", "only-final-state"])
def test_chunk_state_scan_matches_autograd_through_the_loop(diagonal, used):
    N, R, C, K, V = 3, 2, 4, 3, 5
    gen = torch.Generator().manual_seed(7)
    shapes = [(N, R, C, K), (N, R, C, V), (N, R, C, K), (N, R, K if diagonal else 1, 1), (R, K, V)]
    inputs = [torch.randn(*s, generator=gen, dtype=f64).requires_grad_() for s in shapes]
    outs, plain = chunk_state_scan(*inputs), _plain_state_scan(*inputs)
    for name, a, b in zip(["entering", "pseudo", "final"], outs, plain, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-12, msg=lambda m, n=name: f"{n}: {m}")
    picks = {"all": (0, 1, 2), "no-final-state": (0, 1), "only-final-state": (2,)}[used]
    cotangents = [torch.randn(outs[i].shape, generator=gen, dtype=f64) for i in picks]
    grads = torch.autograd.grad(sum((outs[i] * c).sum() for i, c in zip(picks, cotangents, strict=True)), inputs)
    expected = torch.autograd.grad(sum((plain[i] * c).sum() for i, c in zip(picks, cotangents, strict=True)), inputs)
    for name, a, b in zip(["W", "U_prime", "k_out", "decay", "S0"], grads, expected, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-12, msg=lambda m, n=name: f"d{n}: {m}")
    assert torch.autograd.gradcheck(lambda *x: chunk_state_scan(*x), tuple(inputs))


def _plain_chunk_decays(g):
    """The three chunk decays by explicit sums over the gates each spans (autograd records every term)."""
    C = g.shape[-2]
    into = torch.stack([g[..., : t + 1, :].sum(-2) for t in range(C)], dim=-2)
    out_of = torch.stack([g[..., s + 1:, :].sum(-2) for s in range(C)], dim=-2)
    return torch.exp(into), torch.exp(out_of), torch.exp(g.sum(-2))


@pytest.mark.parametrize("channels", [1, 4], ids=["scalar", "diagonal"])
@pytest.mark.parametrize("used", [(0, 1, 2), (0,), (1,), (2,), (0, 2)])
def test_chunk_decays_match_autograd_through_the_plain_sums(channels, used):
    gen = torch.Generator().manual_seed(len(used) + channels)
    g = (-torch.rand(2, 3, 7, channels, generator=gen, dtype=f64) * 4).requires_grad_()
    outs, plain = chunk_decays(g), _plain_chunk_decays(g)
    for a, b in zip(outs, plain, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-14)
    cotangents = [torch.randn(outs[i].shape, generator=gen, dtype=f64) for i in used]
    (grad,) = torch.autograd.grad(sum((outs[i] * c).sum() for i, c in zip(used, cotangents, strict=True)), g)
    (expected,) = torch.autograd.grad(sum((plain[i] * c).sum() for i, c in zip(used, cotangents, strict=True)), g)
    torch.testing.assert_close(grad, expected, rtol=1e-10, atol=1e-12)
    assert torch.autograd.gradcheck(lambda x: chunk_decays(x), (g,))


def _plain_diagonal_scores(q, k, g):
    """A_ts = sum_k q_tk k_sk exp(sum_{s<j<=t} g_jk) for s <= t, by explicit sums per pair (the definition)."""
    C = k.shape[-2]
    rows = []
    for t in range(C):
        row = [(q[..., t, :] * k[..., s, :] * torch.exp(g[..., s + 1:t + 1, :].sum(-2))).sum(-1) if s <= t
               else (q[..., t, :] * k[..., s, :]).sum(-1) * 0.0 for s in range(C)]
        rows.append(torch.stack(row, dim=-1))
    return torch.stack(rows, dim=-2)


@pytest.mark.hypothesis
@given(C=st.integers(1, 19), lead=st.lists(st.integers(1, 2), max_size=1), strength=st.sampled_from([0.0, 1.0, 30.0]),
       seed=st.integers(0, 2**16))
def test_diagonal_scores_values_and_gradients_match_the_plain_sums(C, lead, strength, seed):
    """Chunks of every size (powers of two or padded to one), queries with extra leading dims that share the keys."""
    gen = torch.Generator().manual_seed(seed)
    q = torch.randn(*lead, 2, C, 3, generator=gen, dtype=f64).requires_grad_()
    k = torch.randn(2, C, 3, generator=gen, dtype=f64).requires_grad_()
    g = (-torch.rand(2, C, 3, generator=gen, dtype=f64) * strength).requires_grad_()
    A, A_plain = decayed_scores(q, k, g), _plain_diagonal_scores(q, k, g)
    torch.testing.assert_close(A, A_plain, rtol=1e-12, atol=1e-12)
    cotangent = torch.randn(A.shape, generator=gen, dtype=f64)
    grads = torch.autograd.grad((A * cotangent).sum(), (q, k, g))
    expected = torch.autograd.grad((A_plain * cotangent).sum(), (q, k, g))
    for name, a, b in zip("qkg", grads, expected, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-11, msg=lambda m, n=name: f"d{n}: {m}")


@pytest.mark.parametrize("C", [1, 2, 5, 8])
def test_diagonal_scores_pass_gradcheck_and_give_no_gradient_to_a_chunks_first_gate(C):
    gen = torch.Generator().manual_seed(C)
    q, k = (torch.randn(2, C, 3, generator=gen, dtype=f64).requires_grad_() for _ in range(2))
    g = (-torch.rand(2, C, 3, generator=gen, dtype=f64)).requires_grad_()
    assert torch.autograd.gradcheck(decayed_scores, (q, k, g))
    (dg,) = torch.autograd.grad(decayed_scores(q, k, g).sum(), g)
    assert torch.equal(dg[:, 0], torch.zeros_like(dg[:, 0]))  # no decay inside the chunk contains g_0


def test_diagonal_scores_are_exact_under_total_decay_in_float32():
    """g = -200 per step: every off-diagonal score is exactly 0 and the diagonal is q_t . k_t; no exponent is
    positive, so nothing overflows on the way (a factorisation e^{b_t} e^{-b_s} would give inf * 0 = nan)."""
    gen = torch.Generator().manual_seed(3)
    q, k = (torch.randn(4, 16, 8, generator=gen) for _ in range(2))
    g = torch.full((4, 16, 8), -200.0, requires_grad=True)
    A = decayed_scores(q, k, g)
    torch.testing.assert_close(A, torch.diag_embed((q * k).sum(-1)), rtol=0, atol=0)
    (dg,) = torch.autograd.grad(A.sum(), g)
    assert torch.isfinite(dg).all()
