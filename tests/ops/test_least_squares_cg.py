"""The conjugate-gradient solver of least_squares.chunk (MesaNet, arXiv:2506.05233) converges to the exact
Cholesky solve: in exact arithmetic CG solves an F x F system in F steps, so F + 2 steps reach float64 rounding. Its
backward is implicit (ops/regression/cg.py), so at convergence its gradients are the exact solve's too."""

from functools import partial

import pytest
import torch
from test_least_squares_forms import ls_inputs

from helpers import run_with_grads
from regmem.ops.common import split_chunks
from regmem.ops.regression import LeastSquaresState, least_squares
from regmem.ops.regression.cg import conjugate_gradient, operator_pieces, torch_solve


@pytest.mark.parametrize("gate", [pytest.param(None, id="uniform"), pytest.param(1.0, id="decay")])
@pytest.mark.parametrize("T", [pytest.param(1, id="T1"), pytest.param(45, id="T45")])
def test_cg_converges_to_the_cholesky_solve(gate, T):
    K = 8
    inputs = ls_inputs(2, T, 2, K, 5, gate=gate, ridge="per_channel")
    exact = run_with_grads(partial(least_squares.chunk, chunk_size=16), inputs)
    cg = run_with_grads(partial(least_squares.chunk, chunk_size=16, solver="cg", cg_steps=K + 2), inputs)
    for name, expected in exact.items():
        err = (cg[name] - expected).abs().max() / expected.abs().max().clamp_min(1.0)
        assert err < 1e-8, f"{name}: CG error {err:.3g}"


def test_cg_error_shrinks_with_the_number_of_steps():
    inputs = ls_inputs(1, 60, 2, 16, 4, gate=0.5, ridge="scalar")
    exact, _ = least_squares.chunk(**inputs, chunk_size=16)
    errors = [(least_squares.chunk(**inputs, chunk_size=16, solver="cg", cg_steps=n)[0] - exact).abs().max()
              for n in (0, 2, 4, 8)]
    assert all(b < a for a, b in zip(errors, errors[1:], strict=False)), errors
    assert errors[-1] < 1e-2 * errors[0]  # half of F = 16 steps: two orders of magnitude on this well-posed system


@pytest.mark.parametrize(("override", "match"), [
    ({"solver": "lu"}, "^solver must"),
    ({"solver": "cg", "cg_steps": -1}, "^cg_steps must"),
    ({"solver": "cg", "cg_steps": 2.5}, "^cg_steps must"),
    ({"cg_steps": 10}, "^cg_steps applies"),  # the default exact solver has no steps
    ({"solver": "cholesky", "cg_steps": 0}, "^cg_steps applies"),
], ids=["solver", "negative-steps", "float-steps", "steps-default-solver", "steps-cholesky"])
def test_bad_solver_arguments_raise_naming_them(override, match):
    inputs = ls_inputs(1, 5, 1, 3, 2, with_state=False)
    with pytest.raises(ValueError, match=match):
        least_squares.chunk(**inputs, **override)


def test_cg_steps_none_means_30():
    """A system CG has not solved in 30 steps (K = 40 > 30, ridge 0.01), so 29, 30 and 31 steps differ."""
    inputs = {**ls_inputs(1, 80, 1, 40, 2), "ridge": 1e-2}
    default, _ = least_squares.chunk(**inputs, chunk_size=16, solver="cg")
    steps = {n: least_squares.chunk(**inputs, chunk_size=16, solver="cg", cg_steps=n)[0] for n in (29, 30, 31)}
    assert torch.equal(default, steps[30])
    assert not torch.equal(default, steps[29]) and not torch.equal(default, steps[31])


def test_cg_handles_an_exactly_solved_system():
    """Orthonormal keys, ridge 0 and R_0 = I: the Jacobi start x_0 is already exact; the steps must stay finite."""
    K = 4
    q = torch.randn(1, 3, 1, K, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    k = torch.eye(K, dtype=torch.float64)[:3].reshape(1, 3, 1, K)
    v = torch.ones(1, 3, 1, 2, dtype=torch.float64)
    R0 = torch.eye(K, dtype=torch.float64).expand(1, 1, K, K)
    state = LeastSquaresState(R0, torch.zeros(1, 1, K, 2, dtype=torch.float64))
    o_cg, _ = least_squares.chunk(q, k, v, ridge=0.0, initial_state=state, solver="cg", cg_steps=5)
    o, _ = least_squares.chunk(q, k, v, ridge=0.0, initial_state=state)
    torch.testing.assert_close(o_cg, o, rtol=1e-12, atol=1e-12)


def test_cg_gradients_stay_finite_where_tokens_converge_early():
    """Early tokens (t < F) converge in a few CG steps; the remaining steps must not divide 0 by 0 in the
    forward or the backward (the Mesa layer trained to NaN before the converged tokens were frozen)."""
    gen = torch.Generator().manual_seed(0)
    q, k, v = (torch.nn.functional.normalize(torch.randn(2, 100, 1, 64, generator=gen), dim=-1).requires_grad_()
               for _ in range(3))
    ridge = torch.full((1, 64), 0.3, requires_grad=True)
    o, _ = least_squares.chunk(q, k, v, ridge=ridge, solver="cg", cg_steps=30)
    o.sum().backward()
    for name, t in (("q", q), ("k", k), ("v", v), ("ridge", ridge)):
        assert torch.isfinite(t.grad).all(), f"grad_{name} is not finite"
    exact, _ = least_squares.chunk(q, k, v, ridge=ridge.detach())
    assert (o - exact).abs().max() < 1e-5


def test_cg_backward_is_one_more_solve_not_autograd_through_the_iterations():
    """The backward is implicit (MesaNet's): dq = the same CG applied to dz (A_t is symmetric). Two steps do not
    solve this system, and there the gradient through the iterations (what regmem differentiated before) differs."""
    inputs = ls_inputs(1, 40, 2, 16, 2, gate=0.5, ridge="per_channel")
    k, g, ridge, R0 = inputs["k"], inputs["g"], inputs["ridge"], inputs["initial_state"].R
    q = inputs["q"].clone().requires_grad_()
    dz = torch.randn(q.shape, dtype=q.dtype, generator=torch.Generator().manual_seed(5))
    z, _ = conjugate_gradient(q, k, g, R0, ridge, 16, 2)
    (dq,) = torch.autograd.grad(z, q, dz)
    adjoint, _ = conjugate_gradient(dz, k, g, R0, ridge, 16, 2)
    torch.testing.assert_close(dq, adjoint, rtol=1e-12, atol=1e-12)

    k_c, g_c, R_in, _ = operator_pieces(k, g, R0, 16)
    unrolled = torch_solve(split_chunks(q, 16), k_c, g_c, R_in, ridge, 2)  # autograd through the two steps
    (dq_unrolled,) = torch.autograd.grad(unrolled, q, split_chunks(dz, 16))
    assert (dq_unrolled - dq).abs().max() > 1e-2 * dq.abs().max()
