"""The Continuum Memory System (Nested Learning, arXiv:2512.24695, Sec. 7.1, eqs. 70-74): the batched chunk form
against the token loop, the update schedule of eq. 71, the variants of eqs. 72-74, state passing, padding,
causality, meta-learning of the initial levels, and bad configurations."""

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from regmem.models import SwiGLU
from regmem.nested import CMS, CMSConfig
from regmem.nested.cms import SwiGLUWeights, swiglu

D = 6


def _cms(chunk_sizes=(2, 4), lr=0.05, variant="sequential", objective="value", dtype=torch.float64, seed=0,
         step_rule="normalized", persistent=False):
    torch.manual_seed(seed)
    cms = CMS(D, CMSConfig(chunk_sizes=chunk_sizes, lr=lr, hidden=5, variant=variant, objective=objective,
                           step_rule=step_rule, persistent=persistent))
    with torch.no_grad():  # break the identity value map and unit norms, so every outer parameter matters
        cms.value.add_(0.3 * torch.randn_like(cms.value)) if cms.value is not None else None
        cms.norm_weight.add_(0.2 * torch.randn_like(cms.norm_weight))
    return cms.to(dtype)


def _x(B, T, dtype=torch.float64, seed=1):
    return torch.randn(B, T, D, dtype=dtype, generator=torch.Generator().manual_seed(seed))


def _flat(state):
    """Every tensor of the levels' states: weights, accumulators, input norms, learnt reset values."""
    parts = [part for level in state.levels for part in level if part is not None]
    return [t for part in parts for t in (part if isinstance(part, tuple) else (part,))]


def _grads(cms, x, y, state):
    """Gradients of a random projection of the outputs and the final fast weights w.r.t. x and every parameter."""
    gen = torch.Generator().manual_seed(2)
    loss = (y * torch.randn(y.shape, dtype=y.dtype, generator=gen)).sum()
    for t in _flat(state):
        loss = loss + (t * torch.randn(t.shape, dtype=t.dtype, generator=gen)).sum()
    return torch.autograd.grad(loss, [x, *cms.parameters()])


@pytest.mark.parametrize("step_rule", ["explicit", "normalized", "capped"])
@pytest.mark.parametrize("variant", ["sequential", "nested", "nested_learned", "independent"])
@pytest.mark.parametrize("dtype,tol", [(torch.float64, 1e-10), (torch.float32, 1e-4)], ids=["f64", "f32"])
def test_batched_chunks_equal_the_token_loop_with_frozen_parameters(variant, step_rule, dtype, tol):
    cms = _cms(variant=variant, dtype=dtype, step_rule=step_rule, lr=(0.05, 0.3))
    x = _x(2, 11, dtype).requires_grad_()
    y, state = cms(x)
    y_ref, state_ref = cms(x, mode="reference")
    torch.testing.assert_close(y, y_ref, rtol=tol, atol=tol)
    for a, b in zip(_flat(state), _flat(state_ref), strict=True):
        torch.testing.assert_close(a, b, rtol=tol, atol=tol)
    for a, b in zip(_grads(cms, x, y, state), _grads(cms, x, y_ref, state_ref), strict=True):
        torch.testing.assert_close(a, b, rtol=10 * tol, atol=10 * tol)


@settings(max_examples=15, deadline=None)
@given(B=st.integers(1, 3), T=st.integers(1, 19), sizes=st.sampled_from([(1,), (3,), (2, 4), (4, 2), (1, 2, 8)]),
       variant=st.sampled_from(["sequential", "nested", "nested_learned", "independent"]), split=st.integers(0, 19),
       step_rule=st.sampled_from(["explicit", "normalized", "capped"]))
def test_forms_state_passing_and_steps_agree_over_shapes(B, T, sizes, variant, split, step_rule):
    if variant.startswith("nested") and sizes == (4, 2):
        sizes = (2, 4)
    cms = _cms(chunk_sizes=sizes, variant=variant, step_rule=step_rule, lr=0.3)
    x = _x(B, T)
    y, state = cms(x)
    torch.testing.assert_close(cms(x, mode="reference")[0], y, rtol=1e-10, atol=1e-10)
    split = min(split, T)
    y1, mid = cms(x[:, :split])
    y2, end = cms(x[:, split:], mid)
    torch.testing.assert_close(torch.cat([y1, y2], 1), y, rtol=1e-10, atol=1e-10)
    for a, b in zip(_flat(end), _flat(state), strict=True):
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("variant", ["sequential", "nested_learned"])
def test_prefill_then_one_token_steps_equal_one_call(variant):
    cms = _cms(chunk_sizes=(2, 6), variant=variant, lr=0.3)
    x = _x(2, 13)
    y, _ = cms(x)
    ys, state = [], None
    y0, state = cms(x[:, :5])
    ys.append(y0)
    for t in range(5, 13):
        y_t, state = cms(x[:, t:t + 1], state)
        ys.append(y_t)
    torch.testing.assert_close(torch.cat(ys, 1), y, rtol=1e-10, atol=1e-10)


def _curvature_by_jacobian(theta, u_t):
    """The normalized rule's c_t from the Jacobians of f_theta(u_t) [1, 1, D] in each weight matrix:
    lambda_max(J J^T) for W_down, trace(J J^T) for W_gate and W_up."""
    total = 0.0
    for name in ("gate", "up", "down"):
        def f(w, name=name):
            return swiglu(theta._replace(**{name: w}), u_t).reshape(-1)
        J = torch.func.jacrev(f)(getattr(theta, name)).reshape(D, -1)  # [D, parameters]
        gram = J @ J.T
        total = total + (torch.linalg.eigvalsh(gram)[-1] if name == "down" else gram.trace())
    return total


def _eta(rule, rate, curvature):
    """The step of a chunk of summed curvature bound `curvature` (regmem/nested/cms.py, step rules)."""
    if rule == "explicit":
        return rate
    return rate / (1 + rate * curvature) if rule == "normalized" else min(rate, 1 / curvature)


@pytest.mark.parametrize("step_rule,lr", [("explicit", 0.2), ("normalized", 0.2), ("capped", 0.005), ("capped", 0.2)])
def test_a_level_changes_only_at_multiples_of_its_chunk_by_the_summed_token_errors(step_rule, lr):
    """Eq. 71: theta is constant inside a chunk; at its end it moves by -eta * sum_t grad L(theta_start; u_t), eta =
    lr (explicit), lr / (1 + lr sum_t c_t) (normalized) or min(lr, 1 / sum_t c_t) (capped: at lr 0.005 the lr, at 0.2
    the cap, whose curvature bound here is ~56)."""
    cms = _cms(chunk_sizes=(3,), lr=lr, step_rule=step_rule)
    x = _x(1, 7)
    thetas = []
    state = None
    for t in range(7):
        _, state = cms(x[:, t:t + 1], state)
        thetas.append(state.levels[0].theta)
    changed = [t + 1 for t in range(1, 7) if not torch.equal(thetas[t].down, thetas[t - 1].down)]
    assert changed == [3, 6], f"updates after {changed} tokens"
    start = cms.initial_weights(0, 1)
    assert not torch.equal(thetas[2].down, start.down) and torch.equal(thetas[1].down, start.down)
    # The first update by hand: per-token gradients at the initial weights, summed over tokens 0..2.
    u = cms.level_input(0, x[:, :3])
    total, curvature = None, 0.0
    for t in range(3):
        theta = SwiGLUWeights(*(w.detach().clone().requires_grad_() for w in start))
        loss = 0.5 * ((swiglu(theta, u[:, t:t + 1]) - cms.target(0, u[:, t:t + 1])) ** 2).sum()
        g = torch.autograd.grad(loss, theta)
        total = g if total is None else [a + b for a, b in zip(total, g, strict=True)]
        curvature = curvature + _curvature_by_jacobian(start, u[:, t:t + 1])
    eta = _eta(step_rule, lr, curvature)
    if step_rule == "capped":  # which branch of the min this lr takes
        assert (eta == lr) == (lr < 0.01)
    for w, g, got in zip(start, total, thetas[2], strict=True):
        torch.testing.assert_close(got, w - eta * g, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("variant", ["sequential", "nested_learned"])
def test_normalized_steps_stay_bounded_on_large_inputs_where_explicit_ones_diverge(variant):
    """Level inputs of norm 10-100, lr 1, 1000 tokens: eq. 71 as printed blows up, the normalized and capped steps
    cannot."""
    weights = {}
    for rule in ("explicit", "normalized", "capped"):
        torch.manual_seed(0)  # the levels' initial weights
        cms = CMS(8, CMSConfig(chunk_sizes=(1, 4), lr=1.0, hidden=16, variant=variant, step_rule=rule)).double()
        with torch.no_grad():  # gains 4..35 on a unit-RMS input: ||u_t|| between ~11 and ~99
            cms.norm_weight.copy_(torch.linspace(4, 35, 8).repeat(2, 1))
        gen = torch.Generator().manual_seed(1)
        x = torch.randn(2, 1000, 8, dtype=torch.float64, generator=gen)
        x = x / x.norm(dim=-1, keepdim=True) * (10 + 90 * torch.rand(2, 1000, 1, generator=gen, dtype=torch.float64))
        u = cms.level_input(0, x)
        assert 10 < u.norm(dim=-1).min() and u.norm(dim=-1).max() < 100
        with torch.no_grad():
            y, state = cms(x)
        weights[rule] = torch.stack([w.abs().max() for level in state.levels for w in level.theta])
        if rule != "explicit":
            assert torch.isfinite(y).all()
    assert weights["normalized"].max() < 10, weights["normalized"]
    assert weights["capped"].max() < 10, weights["capped"]
    assert not (weights["explicit"] < 1e6).all(), weights["explicit"]  # overflowed to inf / NaN, or huge


def test_tokens_of_a_chunk_read_the_chunk_start_parameters():
    cms = _cms(chunk_sizes=(4,), lr=0.5)
    x = _x(2, 8)
    y, _ = cms(x)
    _, mid = cms(x[:, :4])
    u = cms.level_input(0, x[:, 4:])
    torch.testing.assert_close(y[:, 4:], x[:, 4:] + swiglu(mid.levels[0].theta, u), rtol=1e-10, atol=1e-12)


def test_nested_levels_reset_to_their_initial_value_when_the_parent_chunk_ends():
    cms = _cms(chunk_sizes=(2, 6), variant="nested", lr=0.4)
    x = _x(1, 12)
    init = cms.initial_weights(0, 1)
    state = None
    for t in range(12):
        _, state = cms(x[:, t:t + 1], state)
        child = state.levels[0].theta
        reset = torch.equal(child.gate, init.gate) and torch.equal(child.down, init.down)
        assert reset == ((t + 1) % 6 in (0, 1)), f"after {t + 1} tokens: at the initial value = {reset}"
    assert not torch.equal(state.levels[1].theta.down, cms.initial_weights(1, 1).down)  # the parent never resets
    assert cms.config.parents() == [1, None]


def test_independent_cms_with_weights_one_zero_is_one_level():
    cms = _cms(chunk_sizes=(2, 4), variant="independent")
    one = _cms(chunk_sizes=(2,), variant="sequential")
    with torch.no_grad():
        cms.mix.copy_(torch.tensor([1.0, 0.0]))
        for name in ("gate", "up", "down", "norm_weight", "value"):
            getattr(one, name).copy_(getattr(cms, name)[:1])
    x = _x(2, 9)
    torch.testing.assert_close(cms(x)[0], one(x)[0], rtol=1e-12, atol=1e-12)


def test_one_frozen_level_is_the_swiglu_block():
    """The conventional Transformer FFN is the one-level CMS that never updates (Sec. 7.1)."""
    cms = _cms(chunk_sizes=(4,), lr=0.0)
    ffn, norm = SwiGLU(D, 5).double(), torch.nn.RMSNorm(D, eps=1e-5).double()
    with torch.no_grad():
        ffn.gate_up.weight.copy_(torch.cat([cms.gate[0].T, cms.up[0].T]))
        ffn.down.weight.copy_(cms.down[0].T)
        norm.weight.copy_(cms.norm_weight[0])
    x = _x(2, 9)
    torch.testing.assert_close(cms(x)[0], x + ffn(norm(x)), rtol=1e-12, atol=1e-12)
    assert cms.state_floats() == 3 * D * 5  # no gradient accumulator for a frozen level


@pytest.mark.parametrize("sizes", [(1,), (3,), (2, 5)])
def test_causal_for_any_chunk_size(sizes):
    cms = _cms(chunk_sizes=sizes)
    x = _x(1, 10)
    y, _ = cms(x)
    for t in range(10):
        changed = x.clone()
        changed[:, t + 1:] += 1.0
        torch.testing.assert_close(cms(changed)[0][:, :t + 1], y[:, :t + 1], rtol=1e-12, atol=1e-12)


def test_left_padding_changes_no_real_token_nor_the_state():
    cms = _cms(chunk_sizes=(2, 3))
    x = _x(2, 9)
    mask = torch.ones(2, 9, dtype=torch.bool)
    mask[0, :4] = False
    y, state = cms(x, attention_mask=mask)
    y_alone, state_alone = cms(x[:1, 4:])
    torch.testing.assert_close(y[:1, 4:], y_alone, rtol=1e-10, atol=1e-10)
    for a, b in zip(_flat(state), _flat(state_alone), strict=True):
        torch.testing.assert_close(a[:1], b, rtol=1e-10, atol=1e-10)
    assert state.offset.tolist() == [5, 9]
    _, after = cms(x[:, :1], state)  # each row continues at its own offset
    _, after_alone = cms(x[:1, :1], state_alone)
    for a, b in zip(_flat(after), _flat(after_alone), strict=True):
        torch.testing.assert_close(a[:1], b, rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("variant", ["sequential", "nested", "independent"])
def test_gradients_reach_every_initial_level(variant):
    cms = _cms(chunk_sizes=(2, 4), variant=variant)
    x = _x(2, 12)
    y, _ = cms(x)
    y.square().sum().backward()
    for name, p in cms.named_parameters():
        assert p.grad is not None and p.grad.abs().sum() > 0, name
    # The slow level's initial state gets gradient through the unrolled updates, not only through its first chunk.
    unrolled = _cms(chunk_sizes=(2, 4), variant=variant)
    y2, _ = unrolled(x)
    y2[:, 8:].square().sum().backward()
    assert unrolled.up.grad[1].abs().sum() > 0


def test_reconstruct_objective_pulls_the_branch_toward_the_identity():
    cms = _cms(chunk_sizes=(2,), objective="reconstruct", lr=0.05)
    assert cms.value is None
    x = _x(1, 2)  # one pair of tokens, written 40 times: the level fits it
    u = cms.level_input(0, x)
    state = None
    errors = []
    for _ in range(40):
        _, state = cms(x, state)
        errors.append((swiglu(state.levels[0].theta, u) - u).square().sum().item())
    assert errors[-1] < 0.5 * errors[0]


@pytest.mark.parametrize("kwargs,match", [
    ({"chunk_sizes": ()}, "chunk_sizes"), ({"chunk_sizes": (2, 0)}, "chunk_sizes"),
    ({"chunk_sizes": (2, 4), "lr": (0.1,)}, "lr lists 1 levels"), ({"lr": -1.0}, "lr must be"),
    ({"variant": "chain"}, "variant"), ({"objective": "ntp"}, "objective"), ({"hidden": -1}, "hidden"),
    ({"chunk_sizes": (3, 4), "variant": "nested"}, "multiple"), ({"step_rule": "adam"}, "step_rule"),
    ({"lr": (0.1, -0.1, 0.1)}, "lr must"), ({"persistent": (True,)}, "persistent lists 1"),
    ({"persistent": 1}, "persistent must"), ({"persistent": (True, False, "yes")}, "persistent must"),
    ({"chunk_sizes": (2, 4), "variant": "nested_learned", "persistent": (False, True)}, "persistent: a nested"),
    ({"chunk_sizes": (2, 4), "variant": "nested_learned", "persistent": (True, False)}, "persistent: a nested"),
])
def test_bad_configuration_raises_value_error_naming_it(kwargs, match):
    with pytest.raises(ValueError, match=match):
        CMSConfig(**kwargs)


def test_bad_input_raises_value_error():
    cms = _cms()
    with pytest.raises(ValueError, match="x must have shape"):
        cms(_x(1, 3)[..., :4])
    with pytest.raises(ValueError, match="attention_mask"):
        cms(_x(1, 3), attention_mask=torch.ones(1, 4))
    with pytest.raises(ValueError, match="mode"):
        cms(_x(1, 3), mode="recurrent")
    _, state = cms(_x(2, 3), attention_mask=torch.tensor([[0, 1, 1], [1, 1, 1]]))
    with pytest.raises(ValueError, match="one offset"):
        cms(_x(2, 2), state)


def test_norm_eps_is_every_levels_rmsnorm_eps():
    cms = CMS(D, CMSConfig(chunk_sizes=(2,), hidden=5), norm_eps=0.5).double()
    h = _x(1, 3)
    expected = h / (h.square().mean(-1, keepdim=True) + 0.5).sqrt() * cms.norm_weight[0]
    torch.testing.assert_close(cms.level_input(0, h), expected, rtol=1e-12, atol=1e-12)


def _token_loop(cms, x):
    """A sequential or nested_learned CMS written as a plain loop over tokens (one row): every level reads its
    chunk-start weights and accumulates per-token gradients (torch.func.grad) and curvatures; at a chunk's end it
    steps (eq. 71), and at its parent's chunk's end its reset value takes the parent's step toward it and the level
    restarts there (eq. 72 learnt in context)."""
    config = cms.config
    sizes, rates, parents = config.chunk_sizes, config.rates(), config.parents()
    k, rule = config.levels, config.step_rule
    theta = [cms.initial_weights(level, 1) for level in range(k)]
    init = list(theta)
    grads = [SwiGLUWeights(*(torch.zeros_like(w) for w in t)) for t in theta]
    curvature = [0.0] * k

    def loss(w, u_t, target_t):
        return 0.5 * ((swiglu(w, u_t) - target_t) ** 2).sum()

    ys = []
    for t in range(x.shape[1]):
        h = x[:, t:t + 1]
        for level in range(k):
            u = cms.level_input(level, h)
            g = torch.func.grad(loss)(theta[level], u, cms.target(level, u))
            grads[level] = SwiGLUWeights(*(a + b for a, b in zip(grads[level], g, strict=True)))
            curvature[level] = curvature[level] + (_curvature_by_jacobian(theta[level], u) if rule != "explicit"
                                                   else 0.0)
            h = h + swiglu(theta[level], u)
        ys.append(h)
        for level in range(k):
            if (t + 1) % sizes[level] == 0:
                eta = _eta(rule, rates[level], curvature[level])
                theta[level] = SwiGLUWeights(*(w - eta * g for w, g in zip(theta[level], grads[level], strict=True)))
                grads[level] = SwiGLUWeights(*(torch.zeros_like(w) for w in grads[level]))
                curvature[level] = 0.0
            parent = parents[level]
            if config.variant == "nested_learned" and parent is not None and (t + 1) % sizes[parent] == 0:
                step = _eta(rule, rates[parent], 1.0)  # the reset value's objective has curvature 1
                init[level] = SwiGLUWeights(*(i + step * (w - i) for i, w in zip(init[level], theta[level],
                                                                                   strict=True)))
                theta[level] = init[level]
    return torch.cat(ys, 1), theta, init


@pytest.mark.parametrize("step_rule,lr", [("explicit", (0.1, 0.3)), ("normalized", (0.3, 0.5)),
                                          ("capped", (0.3, 0.5)), ("capped", (20.0, 2.0))])
def test_nested_learned_equals_a_plain_token_loop(step_rule, lr):
    cms = _cms(chunk_sizes=(2, 6), variant="nested_learned", lr=lr, step_rule=step_rule)
    x = _x(1, 14)
    y, state = cms(x)
    y_loop, theta, init = _token_loop(cms, x)
    torch.testing.assert_close(y, y_loop, rtol=1e-10, atol=1e-10)
    for level in range(2):
        for a, b in zip(state.levels[level].theta, theta[level], strict=True):
            torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-10)
    for a, b in zip(state.levels[0].init, init[0], strict=True):  # the parent moved the child's reset value
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-10)
    assert not torch.equal(state.levels[0].init.down, cms.initial_weights(0, 1).down)
    assert state.levels[1].init is None  # the slowest level has no parent


def test_the_token_loop_is_the_sequential_chain_without_parents():
    cms = _cms(chunk_sizes=(2, 6), lr=(0.3, 0.5))
    x = _x(1, 14)
    torch.testing.assert_close(cms(x)[0], _token_loop(cms, x)[0], rtol=1e-10, atol=1e-10)


def test_nested_learned_with_a_frozen_parent_is_the_reset_variant_and_otherwise_differs():
    x = _x(2, 15)
    for rates, same in (((0.3, 0.0), True), ((0.3, 0.5), False)):
        learned = _cms(chunk_sizes=(2, 6), variant="nested_learned", lr=rates)
        reset = _cms(chunk_sizes=(2, 6), variant="nested", lr=rates)
        y, state = learned(x)
        y_reset, state_reset = reset(x)
        assert torch.allclose(y, y_reset, rtol=1e-12, atol=1e-12) == same
        if same:
            torch.testing.assert_close(state.levels[0].init, learned.initial_weights(0, 2))
            without_init = state._replace(levels=tuple(level._replace(init=None) for level in state.levels))
            for a, b in zip(_flat(without_init), _flat(state_reset), strict=True):
                torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-12)


def test_a_persistent_slow_level_changes_every_c_tokens_of_the_stream_across_sequences():
    """Sequences of 3, 4, 6 and 2 tokens (none a multiple of C = 5), token by token: the persistent slow level moves
    after stream tokens 5, 10 and 15 only, while the fast level restarts with every sequence."""
    cms = _cms(chunk_sizes=(2, 5), lr=0.3, persistent=(False, True))
    x = _x(1, 15)
    state, changed, t = None, [], 0
    for length in (3, 4, 6, 2):
        state = cms.next_sequence(state) if state is not None else None
        if state is not None:
            assert torch.equal(state.levels[0].theta.down, cms.initial_weights(0, 1).down)  # the fast level restarts
            assert state.offset.tolist() == [0] and state.stream.tolist() == [t]
        for _ in range(length):
            before = state.levels[1].theta.down if state is not None else cms.initial_weights(1, 1).down
            _, state = cms(x[:, t:t + 1], state)
            t += 1
            if not torch.equal(state.levels[1].theta.down, before):
                changed.append(t)
    assert changed == [5, 10, 15]


@pytest.mark.parametrize("variant", ["sequential", "nested_learned", "independent"])
def test_a_stream_of_sequences_equals_token_steps_and_a_lone_persistent_level_one_long_call(variant):
    """Each sequence in one call equals it token by token (the clocks of both levels); and a CMS whose one level
    persists gives over the stream exactly what one call over the concatenated stream gives."""
    cms = _cms(chunk_sizes=(2, 6), lr=0.3, variant=variant, persistent=True)
    x = _x(2, 17)
    lengths = (3, 5, 7, 2)
    state, state_steps, ys = None, None, []
    t = 0
    for length in lengths:
        if state is not None:
            state, state_steps = cms.next_sequence(state), cms.next_sequence(state_steps)
        y, state = cms(x[:, t:t + length], state)
        ys.append(y)
        for i in range(length):
            y_i, state_steps = cms(x[:, t + i:t + i + 1], state_steps)
            torch.testing.assert_close(y_i, y[:, i:i + 1], rtol=1e-10, atol=1e-10)
        t += length
    for a, b in zip(_flat(state), _flat(state_steps), strict=True):
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-10)
    y_all, state_all = cms(x)  # every level persists: the stream is one long sequence
    torch.testing.assert_close(torch.cat(ys, 1), y_all, rtol=1e-10, atol=1e-10)
    for a, b in zip(_flat(state), _flat(state_all), strict=True):
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-10)
    assert not any(t.requires_grad for t in _flat(cms.next_sequence(state_all)))  # no gradient across sequences


def test_next_sequence_restarts_the_other_levels_and_none_resets_everything():
    cms = _cms(chunk_sizes=(2, 4), lr=0.3)  # nothing persists: every sequence starts fresh
    x = _x(2, 9)
    _, state = cms(x)
    y_next, _ = cms(x[:, :5], cms.next_sequence(state))
    torch.testing.assert_close(y_next, cms(x[:, :5])[0], rtol=1e-12, atol=1e-12)
    persistent = _cms(chunk_sizes=(2, 4), lr=0.3, persistent=(False, True))
    _, state = persistent(x)
    y_carried, _ = persistent(x[:, :5], persistent.next_sequence(state))
    assert not torch.allclose(y_carried, persistent(x[:, :5])[0])  # the slow level remembers the first sequence
    assert persistent.state_floats() == cms.state_floats()
