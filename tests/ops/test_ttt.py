"""The test-time-training engine `ttt` (regmem/ops/ttt): its special cases are the linear memories regmem already
has, its mini-batch semantics match a brute-force loop, it is causal, the outer gradient reaches the initial memory,
and DGD's closed form is the exact proximal step (Nested Learning, arXiv:2512.24695, eqs. 56-57, 88).
The op-wide contract (three forms agree with gradients, state passing, varlen, bf16) is in test_every_op.py."""

import itertools

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st

from helpers import assert_close, random_log_gate
from regmem.ops import InnerModel, TTTState, delta_rule, dgd_step, gated_linear_attn, momentum_delta_rule, ttt

TTT_MLP = InnerModel((8,), "gelu", bias=True, residual=True, layer_norm=True)


def _inputs(B=2, T=13, H=2, K=4, V=4, seed=0, dtype=torch.float64):
    gen = torch.Generator().manual_seed(seed)
    q = torch.randn(B, T, H, K, generator=gen, dtype=dtype)
    k = F.normalize(torch.randn(B, T, H, K, generator=gen, dtype=dtype), dim=-1)
    v = torch.randn(B, T, H, V, generator=gen, dtype=dtype)
    beta = 0.5 * torch.rand(B, T, H, generator=gen, dtype=dtype)
    return q, k, v, beta


def _state(model, B, H, K, V, seed=1, momentum=False):
    gen = torch.Generator().manual_seed(seed)
    P = model.num_params(K, V)
    params = 0.3 * torch.randn(B, H, P, generator=gen, dtype=torch.float64)
    return TTTState(params, torch.zeros(B, H, P if momentum else 0, dtype=torch.float64), params,
                    torch.zeros(B, H, dtype=torch.float64))


@pytest.mark.parametrize("mode", ["reference", "recurrent", "chunk"])
def test_linear_l2_sgd_is_the_delta_rule(mode):
    q, k, v, beta = _inputs(K=4, V=3)
    o, _ = ttt(q, k, v, beta, mini_batch=1, mode=mode, chunk_size=4)
    expected, _ = delta_rule(q, k, v, beta, scale=1.0)
    assert_close(o, expected, "o")


@pytest.mark.parametrize("mode", ["reference", "recurrent", "chunk"])
def test_linear_l2_with_decay_and_momentum_is_the_titans_linear_memory(mode):
    q, k, v, beta = _inputs(K=4, V=3)
    g, log_mu = random_log_gate(beta.shape, 0.5, seed=2), random_log_gate(beta.shape, 1.0, seed=3)
    o, _ = ttt(q, k, v, beta, g, log_mu, mini_batch=1, mode=mode, chunk_size=4)
    expected, _ = momentum_delta_rule(q, k, v, g, beta, log_mu, scale=1.0)
    assert_close(o, expected, "o with momentum")
    o, _ = ttt(q, k, v, beta, g, mini_batch=1, mode=mode, chunk_size=4)  # weight decay alone: momentum retention 0
    expected, _ = momentum_delta_rule(q, k, v, g, beta, torch.full_like(g, -1e4), scale=1.0)
    assert_close(o, expected, "o with weight decay")


@pytest.mark.parametrize("mode", ["reference", "recurrent", "chunk"])
@pytest.mark.parametrize("mini_batch", [1, 4])
def test_dot_product_loss_is_gated_linear_attention(mode, mini_batch):
    """The dot-product gradient -k v^T does not depend on the memory, so the mini-batch changes nothing."""
    q, k, v, beta = _inputs(K=4, V=3)
    g = random_log_gate(beta.shape, 0.5, seed=2)
    o, _ = ttt(q, k, v, beta, g, loss="dot", mini_batch=mini_batch, mode=mode, chunk_size=2)
    expected, _ = gated_linear_attn(q, k, v * beta.unsqueeze(-1), g, scale=1.0)
    assert_close(o, expected, "o")


def _brute_force_ttt_mlp(q, k, v, beta, params, ln_w, ln_b, C, token_eta=None):
    """TTT-MLP written independently of the engine: explicit W1, b1, W2, b2 per (b, h), every gradient of a
    mini-batch taken by autograd at the mini-batch's first parameters, plain SGD. With `token_eta` [C] official
    TTT's step (ttt-lm-pytorch): the output at position i of a mini-batch reads the anchor minus token_eta[i] times
    the summed eta-weighted gradients so far, and the mini-batch ends at token_eta[C - 1]."""
    B, T, H, K = q.shape
    hid = TTT_MLP.hidden[0]
    W1, W2 = TTT_MLP.unpack(params, K, K)  # [B, H, K + 1, hid], [B, H, hid + 1, K]
    out = torch.zeros_like(v)
    for b in range(B):
        for h in range(H):
            w1, b1, w2, b2 = W1[b, h, :K], W1[b, h, K], W2[b, h, :hid], W2[b, h, hid]

            def f(x, w1, b1, w2, b2, h=h):
                z = F.gelu(x @ w1 + b1) @ w2 + b2
                return x + F.layer_norm(z, (K,), ln_w[h], ln_b[h], eps=1e-6)

            for t in range(T):
                if t % C == 0:
                    anchor = [p.detach().requires_grad_() for p in (w1, b1, w2, b2)]
                    summed = [torch.zeros_like(p) for p in anchor]
                loss = 0.5 * (f(k[b, t, h], *anchor) - v[b, t, h]).pow(2).sum()
                grads = torch.autograd.grad(loss, anchor)
                if token_eta is None:
                    w1, b1, w2, b2 = (p - beta[b, t, h] * gr for p, gr in zip((w1, b1, w2, b2), grads, strict=True))
                    out[b, t, h] = f(q[b, t, h], w1, b1, w2, b2)
                    continue
                summed = [s + beta[b, t, h] * gr for s, gr in zip(summed, grads, strict=True)]
                i = t % C
                out[b, t, h] = f(q[b, t, h], *(a - token_eta[i] * s for a, s in zip(anchor, summed, strict=True)))
                if i == C - 1:
                    w1, b1, w2, b2 = (a - token_eta[C - 1] * s for a, s in zip(anchor, summed, strict=True))
    return out


@pytest.mark.parametrize("C", [1, 4])
def test_ttt_mlp_matches_a_brute_force_loop_with_gradients_frozen_at_mini_batch_starts(C):
    q, k, v, beta = _inputs(B=1, T=10, H=2, K=4, V=4)
    params = _state(TTT_MLP, 1, 2, 4, 4).params
    gen = torch.Generator().manual_seed(5)
    ln_w, ln_b = 1 + 0.1 * torch.randn(2, 4, generator=gen, dtype=torch.float64), torch.zeros(2, 4, dtype=torch.float64)
    expected = _brute_force_ttt_mlp(q, k, v, beta, params, ln_w, ln_b, C)
    for mode in ("reference", "recurrent", "chunk"):
        o, _ = ttt(q, k, v, beta, model=TTT_MLP, ln_weight=ln_w, ln_bias=ln_b, mini_batch=C, mode=mode,
                   initial_state=_state(TTT_MLP, 1, 2, 4, 4))
        assert_close(o, expected, f"{mode} o")


def test_read_scale_is_official_ttts_position_dependent_step():
    """Official TTT scales what the output at position i reads by 1/(i + 1) (plus a learnt bias) and ends the
    mini-batch at the last position's factor: beta = c_{C-1} eta and read_scale = c / c_{C-1} give it exactly."""
    q, k, v, beta = _inputs(B=1, T=10, H=2, K=4, V=4)
    C = 4
    token_eta = 1.0 / torch.arange(1, C + 1, dtype=torch.float64) + torch.tensor([0.0, 0.1, -0.05, 0.02],
                                                                                 dtype=torch.float64)
    params = _state(TTT_MLP, 1, 2, 4, 4).params
    gen = torch.Generator().manual_seed(5)
    ln_w, ln_b = 1 + 0.1 * torch.randn(2, 4, generator=gen, dtype=torch.float64), torch.zeros(2, 4, dtype=torch.float64)
    expected = _brute_force_ttt_mlp(q, k, v, beta, params, ln_w, ln_b, C, token_eta)
    plain = _brute_force_ttt_mlp(q, k, v, beta, params, ln_w, ln_b, C)
    assert (expected - plain).abs().max() > 1e-3, "the position-dependent step should change the outputs"
    for mode in ("reference", "recurrent", "chunk"):
        o, _ = ttt(q, k, v, beta * token_eta[-1], model=TTT_MLP, ln_weight=ln_w, ln_bias=ln_b, mini_batch=C,
                   mode=mode, initial_state=_state(TTT_MLP, 1, 2, 4, 4), read_scale=token_eta / token_eta[-1],
                   chunk_size=2)
        assert_close(o, expected, f"{mode} o")


def test_read_scale_changes_the_outputs_only_and_its_gradient_agrees_across_forms():
    q, k, v, beta = _inputs(T=13)
    g, log_mu = random_log_gate(beta.shape, 0.5, seed=2), random_log_gate(beta.shape, 1.0, seed=3)
    model = InnerModel((6,), "gelu", bias=True)
    state = _state(model, 2, 2, 4, 4, momentum=True)
    state = state._replace(anchor=state.params + 0.1, offset=torch.tensor([[1.0, 3.0], [0.0, 2.0]]).double())
    kw = {"model": model, "mini_batch": 4, "initial_state": state, "output_final_state": True, "dgd": True}
    o_none, s_none = ttt(q, k, v, beta, g, log_mu, mode="reference", **kw)
    o_ones, _ = ttt(q, k, v, beta, g, log_mu, mode="reference", read_scale=torch.ones(4).double(), **kw)
    assert_close(o_ones, o_none, "read_scale of ones")
    results = {}
    for mode, chunk_size in (("reference", 64), ("recurrent", 64), ("chunk", 1), ("chunk", 2), ("chunk", 4)):
        r = torch.tensor([[0.5, 1.5, 0.25, 2.0], [1.0, 0.0, 3.0, 0.75]], dtype=torch.float64, requires_grad=True)
        o, s = ttt(q, k, v, beta, g, log_mu, mode=mode, chunk_size=chunk_size, read_scale=r, **kw)
        grad, = torch.autograd.grad((o * torch.cos(o)).sum(), r)
        results[mode, chunk_size] = o, s, grad
        for name, a, b in zip(TTTState._fields, s, s_none, strict=True):
            assert_close(a, b, f"{mode} state {name}: the read scale never reaches the state")
    o_ref, _, grad_ref = results["reference", 64]
    assert (o_ref - o_none).abs().max() > 1e-3
    assert grad_ref.abs().min() > 0, "every position's scale is read"
    for key, (o, _, grad) in results.items():
        assert_close(o, o_ref, f"{key} o")
        assert_close(grad, grad_ref, f"{key} grad of read_scale")


def test_mini_batch_changes_the_function_and_chunk_size_does_not():
    q, k, v, beta = _inputs(T=20)
    model = InnerModel((6,), "silu")
    state = _state(model, 2, 2, 4, 4)
    ref, _ = ttt(q, k, v, beta, model=model, mini_batch=8, initial_state=state, mode="reference")
    for chunk_size in (1, 2, 4, 8, 64):
        o, _ = ttt(q, k, v, beta, model=model, mini_batch=8, initial_state=state, chunk_size=chunk_size)
        assert_close(o, ref, f"chunk_size {chunk_size}")
    other, _ = ttt(q, k, v, beta, model=model, mini_batch=1, initial_state=state)
    assert (other - ref)[:, 1:].abs().max() > 1e-3, "mini_batch 1 and 8 should differ after the first token"
    assert_close(other[:, :1], ref[:, :1], "the first token reads the same update")


@pytest.mark.parametrize("mini_batch", [1, 4])
@pytest.mark.parametrize("dgd", [False, True])
def test_causal_for_any_mini_batch(mini_batch, dgd):
    q, k, v, beta = _inputs(T=12)
    g, log_mu = random_log_gate(beta.shape, 0.5, seed=2), random_log_gate(beta.shape, 1.0, seed=3)
    model = InnerModel((6,), "gelu")
    state = _state(model, 2, 2, 4, 4, momentum=True)
    o, _ = ttt(q, k, v, beta, g, log_mu, model=model, mini_batch=mini_batch, dgd=dgd, initial_state=state)
    for t in (0, 5, 9):
        later = [x.clone() for x in (q, k, v, beta)]
        for x in later:
            x[:, t + 1:] = x[:, t + 1:] + 1.0
        o2, _ = ttt(*later, g, log_mu, model=model, mini_batch=mini_batch, dgd=dgd, initial_state=state)
        assert_close(o2[:, :t + 1], o[:, :t + 1], f"outputs up to {t}")


def test_outer_gradient_reaches_the_initial_memory_and_the_layer_norm():
    q, k, v, beta = _inputs(T=9)
    state = _state(TTT_MLP, 2, 2, 4, 4)
    init = state.params.clone().requires_grad_()
    ln_w = torch.ones(2, 4, dtype=torch.float64, requires_grad=True)
    ln_b = torch.zeros(2, 4, dtype=torch.float64, requires_grad=True)
    o, _ = ttt(q, k, v, beta, model=TTT_MLP, ln_weight=ln_w, ln_bias=ln_b, mini_batch=4,
               initial_state=state._replace(params=init, anchor=init))
    o.pow(2).sum().backward()
    weights = (init.grad != 0).double().mean()
    assert weights > 0.9, f"only {weights:.0%} of the initial parameters get a gradient"
    assert (ln_w.grad != 0).all() and (ln_b.grad != 0).all()


def test_dgd_on_a_linear_memory_is_equation_88():
    """M_t = M_{t-1}(alpha_t I - eta_t k k^T) - eta_t (M_{t-1} k - v) k^T, y_t = M_t q_t, in the paper's orientation."""
    q, k, v, beta = _inputs(B=1, T=8, H=1, K=4, V=3)
    g = random_log_gate(beta.shape, 0.5, seed=2)
    o, _ = ttt(q, k, v, beta, g, dgd=True, mini_batch=1, chunk_size=4)
    M = torch.zeros(3, 4, dtype=torch.float64)
    for t in range(8):
        kt, vt, eta, alpha = k[0, t, 0], v[0, t, 0], beta[0, t, 0], torch.exp(g[0, t, 0])
        transition = alpha * torch.eye(4, dtype=torch.float64) - eta * torch.outer(kt, kt)
        M = M @ transition - eta * torch.outer(M @ kt - vt, kt)
        assert_close(o[0, t, 0], M @ q[0, t, 0], f"token {t}")


def _one_input_dgd(W, x, grad_y, eta, proximal=True):
    """`dgd_step` for one input x with output gradient grad_y: G = x grad_y^T, C = x x^T."""
    return dgd_step(W, torch.outer(x, grad_y), torch.outer(x, x), eta, proximal=proximal)


def test_dgd_closed_form_is_the_exact_proximal_step():
    gen = torch.Generator().manual_seed(0)
    W = torch.randn(5, 3, generator=gen, dtype=torch.float64)
    x = torch.randn(5, generator=gen, dtype=torch.float64)
    grad_y = torch.randn(3, generator=gen, dtype=torch.float64)
    eta = 0.7
    # argmin_W 1/2 ||W^T x - u||^2 + 1/(2 eta) ||W - W_t||^2 with u = -grad_y: (x x^T + I/eta) W = x u^T + W_t/eta
    exact = torch.linalg.solve(torch.outer(x, x) + torch.eye(5, dtype=torch.float64) / eta,
                               torch.outer(x, -grad_y) + W / eta)
    assert_close(_one_input_dgd(W, x, grad_y, eta), exact, "eq. 57 vs the linear solve")
    unit = x / x.norm()  # the paper's eta / (1 + eta) is the case ||x|| = 1
    paper = W - eta / (1 + eta) * torch.outer(unit, unit @ W + grad_y)
    assert_close(_one_input_dgd(W, unit, grad_y, eta), paper, "||x|| = 1")


def test_dgd_explicit_and_proximal_steps_agree_to_first_order():
    gen = torch.Generator().manual_seed(1)
    W, x, grad_y = (torch.randn(*s, generator=gen, dtype=torch.float64) for s in ((4, 3), (4,), (3,)))
    gaps = [(_one_input_dgd(W, x, grad_y, eta) - _one_input_dgd(W, x, grad_y, eta, proximal=False)).norm()
            for eta in (1e-2, 1e-3)]
    step = (_one_input_dgd(W, x, grad_y, 1e-3) - W).norm()
    assert 90 < gaps[0] / gaps[1] < 110, "the gap shrinks as eta^2"
    assert gaps[1] < 1e-2 * step, "the gap is second order next to the first-order step"


def test_engine_dgd_on_a_linear_memory_is_the_explicit_dgd_step():
    """Without weight decay and momentum, with mini-batches of one, each token's update of `ttt(..., dgd=True)` is
    `dgd_step(proximal=False)` on that token's statistics (the l2 loss: dL/dy = k^T W - v)."""
    q, k, v, beta = _inputs(B=1, T=6, H=1, K=4, V=3)
    o, _ = ttt(q, k, v, beta, dgd=True, mini_batch=1, chunk_size=2)
    W = torch.zeros(4, 3, dtype=torch.float64)
    for t in range(6):
        kt, vt = k[0, t, 0], v[0, t, 0]
        W = _one_input_dgd(W, kt, kt @ W - vt, beta[0, t, 0], proximal=False)
        assert_close(o[0, t, 0], q[0, t, 0] @ W, f"token {t}")


@pytest.mark.parametrize("mini_batch", [1, 4])
def test_engine_proximal_dgd_on_a_linear_memory_is_the_exact_dgd_step(mini_batch):
    """step_rule="proximal": each token's update is `dgd_step(proximal=True)`, the exact minimiser of eq. 56 for
    that token, at any ||k|| (here ~10); the explicit rule is not, and the two differ at this scale. With
    mini-batches of 4 the gradient is taken at the mini-batch start, the DGD term at the current W."""
    q, k, v, beta = _inputs(B=1, T=8, H=1, K=4, V=3)
    k = 10 * k
    o, _ = ttt(q, k, v, beta, dgd=True, step_rule="proximal", mini_batch=mini_batch, chunk_size=2)
    explicit, _ = ttt(q, k, v, beta, dgd=True, mini_batch=mini_batch, chunk_size=2)
    W = anchor = torch.zeros(4, 3, dtype=torch.float64)
    for t in range(8):
        kt, vt = k[0, t, 0], v[0, t, 0]
        # DGD on the l2 loss: the delta term acts on W, the gradient at the anchor (eq. 88, TTT's mini-batches)
        grad = torch.outer(kt, kt @ anchor - vt)
        W = dgd_step(W, grad, torch.outer(kt, kt), beta[0, t, 0])
        anchor = W if (t + 1) % mini_batch == 0 else anchor
        assert_close(o[0, t, 0], q[0, t, 0] @ W, f"token {t}")
    assert (o - explicit).abs().max() > 1.0


@pytest.mark.parametrize("shape", [(2, 3), (2, 5, 3)], ids=["N2", "B2-N5"])
def test_dgd_step_batches_over_leading_dims_with_per_row_step_sizes(shape):
    gen = torch.Generator().manual_seed(2)
    *lead, n, d_in = shape
    W = torch.randn(*lead, d_in, 2, generator=gen, dtype=torch.float64)
    X = torch.randn(*lead, n, d_in, generator=gen, dtype=torch.float64)
    dY = torch.randn(*lead, n, 2, generator=gen, dtype=torch.float64)
    eta = torch.rand(tuple(lead), generator=gen, dtype=torch.float64) + 0.1
    out = dgd_step(W, X.transpose(-1, -2) @ dY, X.transpose(-1, -2) @ X, eta, delta=0.5)
    for index in itertools.product(*(range(n) for n in lead)):
        # delta/2 sum_n ||W^T x_n||^2 + sum_n <W^T x_n, dy_n> + 1/(2 eta) ||W - W_t||^2 is stationary at the step
        W_i = out[index].clone().requires_grad_(True)
        objective = 0.25 * (X[index] @ W_i).pow(2).sum() + (X[index] @ W_i * dY[index]).sum() \
            + (W_i - W[index]).pow(2).sum() / (2 * eta[index])
        (grad,) = torch.autograd.grad(objective, W_i)
        assert grad.abs().max() < 1e-12


@pytest.mark.parametrize(("W", "grad", "moment", "argument"), [
    (torch.zeros(4, 3), torch.zeros(4, 3), torch.zeros(3, 3), "moment"),
    (torch.zeros(4, 3), torch.zeros(3, 4), torch.zeros(4, 4), "grad"),
    (torch.zeros(4), torch.zeros(4), torch.zeros(4, 4), "W"),  # a vector is no layer: ValueError, not IndexError
    (torch.zeros(()), torch.zeros(()), torch.zeros(()), "W"),
], ids=["moment", "grad", "W-1d", "W-0d"])
def test_dgd_step_rejects_mismatched_statistics_naming_the_argument(W, grad, moment, argument):
    with pytest.raises(ValueError, match=f"^{argument} must"):
        dgd_step(W, grad, moment, 0.1)


@pytest.mark.parametrize(("loss", "param"), [("l2", None), ("dot", None), ("huber", 0.3), ("lp", 1.5), ("lp", 3.0)])
@pytest.mark.parametrize("act", ["gelu", "gelu_tanh", "silu", "relu", "tanh"])
def test_hand_derived_gradients_match_autograd_for_every_loss_and_activation(loss, param, act):
    """recurrent (hand-derived backward) == reference (autograd on the literal loss), dgd and momentum on."""
    q, k, v, beta = _inputs(T=7)
    g, log_mu = random_log_gate(beta.shape, 0.5, seed=2), random_log_gate(beta.shape, 1.0, seed=3)
    model = InnerModel((5,), act, bias=True)
    state = _state(model, 2, 2, 4, 4, momentum=True)
    kw = {"model": model, "loss": loss, "loss_param": param, "dgd": True, "mini_batch": 2, "initial_state": state}
    for step_rule in ("explicit", "proximal"):
        ref, _ = ttt(q, k, v, beta, g, log_mu, mode="reference", step_rule=step_rule, **kw)
        for mode in ("recurrent", "chunk"):
            o, _ = ttt(q, k, v, beta, g, log_mu, mode=mode, step_rule=step_rule, **kw)
            assert_close(o, ref, f"{mode} o, {step_rule}")


@settings(max_examples=15, deadline=None)
@given(B=st.integers(1, 2), T=st.integers(0, 19), H=st.integers(1, 2), K=st.integers(1, 5), V=st.integers(1, 4),
       depth=st.integers(1, 3), mini_batch=st.sampled_from([1, 2, 4, 8]), chunk_size=st.sampled_from([1, 2, 8]),
       dgd=st.booleans(), momentum=st.booleans(), offset=st.integers(0, 7),
       step_rule=st.sampled_from(["explicit", "proximal"]))
def test_forms_agree_over_shapes(B, T, H, K, V, depth, mini_batch, chunk_size, dgd, momentum, offset, step_rule):
    q, k, v, beta = _inputs(B, T, H, K, V, seed=T)
    g = random_log_gate(beta.shape, 0.5, seed=2)
    log_mu = random_log_gate(beta.shape, 1.0, seed=3) if momentum else None
    model = InnerModel((3,) * (depth - 1), "silu", bias=depth % 2 == 0)
    state = _state(model, B, H, K, V, momentum=momentum)
    gen = torch.Generator().manual_seed(offset)
    moved = 0.1 * torch.randn(state.params.shape, generator=gen, dtype=torch.float64)
    state = state._replace(anchor=state.params + moved,
                           offset=torch.full((B, H), float(offset % mini_batch), dtype=torch.float64))
    kw = {"model": model, "dgd": dgd, "mini_batch": mini_batch, "initial_state": state, "output_final_state": True,
          "step_rule": step_rule}
    ref, s_ref = ttt(q, k, v, beta, g, log_mu, mode="reference", **kw)
    for mode in ("recurrent", "chunk"):
        o, s = ttt(q, k, v, beta, g, log_mu, mode=mode, chunk_size=chunk_size, **kw)
        assert_close(o, ref, f"{mode} o")
        for name, a, b in zip(TTTState._fields, s, s_ref, strict=True):
            assert_close(a, b, f"{mode} {name}")


@pytest.mark.parametrize("chunk_size", [1, 64])  # blocks of 1 inside mini-batches of 4, and one block per mini-batch
def test_padding_by_token_mask_is_a_shorter_sequence(chunk_size):
    q, k, v, beta = _inputs(B=2, T=11)
    model = InnerModel((6,), "gelu")
    state = _state(model, 2, 2, 4, 4)
    mask = torch.arange(11) < torch.tensor([[11], [6]])
    o, s = ttt(q, k, v, beta, model=model, mini_batch=4, initial_state=state, token_mask=mask,
               output_final_state=True, chunk_size=chunk_size)
    o6, s6 = ttt(*(x[1:, :6] for x in (q, k, v, beta)), model=model, mini_batch=4,
                 initial_state=TTTState(*(f[1:] for f in state)), output_final_state=True)
    assert_close(o[1:, :6], o6, "o")
    for name, a, b in zip(TTTState._fields, s, s6, strict=True):
        assert_close(a[1:], b, name)


BAD = {
    "mini_batch": ({"mini_batch": 3}, "mini_batch"),
    "negative step": ({"beta": -torch.ones(1, 4, 1)}, "beta"),
    "gate > 0": ({"g": torch.ones(1, 4, 1)}, "g"),
    "beta shape": ({"beta": torch.ones(1, 5, 1)}, "beta"),
    "residual K != V": ({"v": torch.randn(1, 4, 1, 3), "model": InnerModel(residual=True)}, "residual"),
    "huber without delta": ({"loss": "huber"}, "loss_param"),
    "unknown loss": ({"loss": "l1"}, "loss"),
    "unknown step rule": ({"step_rule": "implicit"}, "step_rule"),
    "layer norm params without layer norm": ({"ln_weight": torch.ones(1, 2), "ln_bias": torch.ones(1, 2)},
                                             "ln_weight"),
    "model type": ({"model": "mlp"}, "model"),
    "activation": ({"model": None, "activation": "swish"}, "activation"),
    "token mask not a prefix": ({"token_mask": torch.tensor([[True, False, True, True]])}, "token_mask"),
    "state type": ({"initial_state": (torch.zeros(1, 1, 4),)}, "initial_state"),
    "read scale shape": ({"read_scale": torch.ones(3)}, "read_scale"),
    "read scale type": ({"read_scale": [1.0] * 16}, "read_scale"),
}


@pytest.mark.parametrize("case", list(BAD))
def test_bad_input_raises_value_error_naming_it(case):
    override, name = BAD[case]
    args = {"q": torch.randn(1, 4, 1, 2), "k": torch.randn(1, 4, 1, 2), "v": torch.randn(1, 4, 1, 2),
            "beta": torch.rand(1, 4, 1)} | override
    with pytest.raises(ValueError, match=name):
        if "activation" in args:
            InnerModel((3,), args.pop("activation"))
        args.pop("model", None) if args.get("model", 0) is None else None
        ttt(**args)


@pytest.mark.parametrize("affine", [False, True])
def test_the_inner_layer_norm_and_its_backward_equal_the_written_out_forms_with_their_gradients(affine):
    """`layer_norm` and `layer_norm_backward` run torch's fused LayerNorm kernels; the chunk form differentiates the
    backward once more (the outer gradient through the inner one). Both, and that second derivative, equal the
    written-out formulas: y = (h - mu) rstd gamma + beta, dh = rstd (g - mean g - xhat mean(g xhat)), g = dy gamma."""
    from regmem.ops.ttt.model import LN_EPS, layer_norm, layer_norm_backward

    torch.manual_seed(0)
    h = torch.randn(2, 3, 5, 8, dtype=torch.float64, requires_grad=True)
    dy = torch.randn(2, 3, 5, 8, dtype=torch.float64, requires_grad=True)
    ln = (torch.randn(3, 1, 8, dtype=torch.float64), torch.randn(3, 1, 8, dtype=torch.float64)) if affine else None
    mu, var = h.mean(-1, keepdim=True), h.var(-1, unbiased=False, keepdim=True)
    rstd = torch.rsqrt(var + LN_EPS)
    xhat = (h - mu) * rstd
    y_ref = xhat if ln is None else xhat * ln[0] + ln[1]
    g = dy if ln is None else dy * ln[0]
    dh_ref = rstd * (g - g.mean(-1, keepdim=True) - xhat * (g * xhat).mean(-1, keepdim=True))
    y, dh = layer_norm(h, ln), layer_norm_backward(h, dy, ln)
    assert_close(y, y_ref, "y")
    assert_close(dh, dh_ref, "dh")
    w = torch.randn_like(dh)
    for got, want in zip(torch.autograd.grad((dh * w).sum() + (y * w).sum(), (h, dy)),
                         torch.autograd.grad((dh_ref * w).sum() + (y_ref * w).sum(), (h, dy)), strict=True):
        assert_close(got, want, "second derivative")


@pytest.mark.parametrize("name", ["gelu", "gelu_tanh", "silu", "relu", "tanh", "none"])
def test_the_inner_activation_backward_equals_autograd_with_its_second_derivative(name):
    """`activation_backward` (GELU's through torch's gelu_backward, the others written out) is grad * act'(h) as
    autograd computes it, and so is its own gradient, which the chunk form's outer backward takes; for GELU also
    against the written-out Phi(h) + h phi(h)."""
    import math

    from regmem.ops.ttt.model import activation, activation_backward

    torch.manual_seed(0)
    h = torch.randn(3, 7, dtype=torch.float64, requires_grad=True)
    grad = torch.randn(3, 7, dtype=torch.float64, requires_grad=True)
    (want,) = torch.autograd.grad(activation(name, h), h, grad, create_graph=True)
    got = activation_backward(name, grad, h)
    assert_close(got, want, "grad * act'(h)")
    if name == "gelu":
        written = 0.5 * (1.0 + torch.erf(h * 2**-0.5)) + h * torch.exp(-0.5 * h * h) / math.sqrt(2 * math.pi)
        assert_close(got, grad * written, "against Phi(h) + h phi(h)")
    if name == "gelu_tanh":  # official TTT's hand-written derivative of the tanh approximation (ttt-lm-pytorch)
        t = torch.tanh(0.79788456 * h * (1 + 0.044715 * h * h))
        written = 0.5 * h * ((1 - t * t) * (0.79788456 + 0.1070322243 * h * h)) + 0.5 * (1 + t)
        torch.testing.assert_close(got, grad * written, rtol=1e-6, atol=1e-6)  # its constants have 8-10 digits
    w = torch.randn_like(got)
    for a, b in zip(torch.autograd.grad((got * w).sum(), (grad, h), allow_unused=True),
                    torch.autograd.grad((want * w).sum(), (grad, h), allow_unused=True), strict=True):
        if a is None or b is None:  # relu and the identity: act'' = 0, so nothing (or zeros) reaches h
            assert all(t is None or torch.all(t == 0) for t in (a, b))
        else:
            assert_close(a, b, "second derivative")


def test_a_forward_of_joined_rows_is_each_part_forward_and_backward():
    """`InnerModel.forward_parts` runs several row sets through the same weights as one call (self-modifying
    Titans' targets M(v_t) and inner forward M(k_t)). Each part's output, trace and back-propagated errors equal
    its own `forward` and `backward`, with their gradients. The parts' layer-norm statistics are strided views,
    which torch's CPU LayerNorm backward read as dense until `layer_norm_backward` made them contiguous."""
    from regmem.ops.ttt.model import InnerModel

    torch.manual_seed(0)
    model = InnerModel((6,), "silu", residual=True, layer_norm=True)
    weights = [(0.5 * torch.randn(3, *shape, dtype=torch.float64)).requires_grad_() for shape in model.shapes(4, 4)]
    ln = tuple(torch.randn(3, 1, 4, dtype=torch.float64) for _ in range(2))
    xs = [torch.randn(3, n, 4, dtype=torch.float64) for n in (5, 2)]
    for (y, trace), x in zip(model.forward_parts(weights, xs, ln), xs, strict=True):
        y_own, trace_own = model.forward(weights, x, ln)
        assert_close(y, y_own, "f(x)")
        for got, want in zip([*trace[0], *trace[1], *trace[2]], [*trace_own[0], *trace_own[1], *trace_own[2]],
                             strict=True):
            assert_close(got, want, "trace")
        dy = torch.randn_like(y)
        deltas, deltas_own = model.backward(weights, trace, dy, ln), model.backward(weights, trace_own, dy, ln)
        for got, want in zip(deltas, deltas_own, strict=True):
            assert_close(got, want, "delta")
        w = [torch.randn_like(d) for d in deltas]
        grads = torch.autograd.grad(sum((d * r).sum() for d, r in zip(deltas, w, strict=True)), weights,
                                    retain_graph=True)
        grads_own = torch.autograd.grad(sum((d * r).sum() for d, r in zip(deltas_own, w, strict=True)), weights)
        for got, want in zip(grads, grads_own, strict=True):
            assert_close(got, want, "gradient of delta")
