"""Self-modifying Titans (regmem/nested/self_modifying.py; Nested Learning arXiv:2512.24695, eqs. 86-91): the engine's
three forms give one result, mini-batch 1 is the token recurrence, the sequence can be split and continued, outputs
are causal, every ablation switch changes the computation, and with every projection static and a linear main
memory it reduces to known linear memories (spec claim: static memories + linear memory + no DGD = gated linear
attention; + l2 = a decoupled gated delta rule). The mixer contract is in tests/layers/test_mixers.py."""

import pytest
import torch
import torch.nn.functional as F

from helpers import assert_close
from regmem.nested import OuterParams, SelfModifyingConfig, initial_state, self_modifying_titans
from regmem.nested.self_modifying import _read
from regmem.ops import InnerModel, gated_linear_attn, momentum_delta_rule

B, T, H, d = 2, 11, 2, 4


def _params(config, seed=0):
    gen = torch.Generator().manual_seed(seed)
    f = torch.float64
    init = {name: 0.5 * torch.randn(H, config.model(name, d).num_params(d, d), generator=gen, dtype=f)
            for name in config.used()}
    ln = {name: (1.0 + 0.5 * torch.randn(H, d, generator=gen, dtype=f), 0.5 * torch.randn(H, d, generator=gen, dtype=f))
          for name in config.used() if config.affine(name, d)}  # each memory its own LN affine
    return OuterParams(init, torch.randn(H, d, generator=gen, dtype=f),
                       torch.randn(H, d, generator=gen, dtype=f) if config.weight_decay else None,
                       torch.randn(H, d, generator=gen, dtype=f) if config.momentum else None,
                       torch.randn(H, d, d, generator=gen, dtype=f) if not config.adaptive_q else None, ln=ln)


def _config(**options) -> SelfModifyingConfig:
    """The function's tests feed one input x [B, T, H, d] to every memory (inputs="shared", as eq. 94 prints); the
    layer's separate k, v, q views are tested in test_separate_views_read_their_own_rows and tests/layers."""
    return SelfModifyingConfig(**{"inputs": "shared", **options})


def _x(seed=1):
    return torch.randn(B, T, H, d, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)


# The paper's read-out (eq. 90) and unnormalised values, as the configuration's defaults once were; the mixer's
# defaults (read "updated", normalize_v) are covered by the ablation test and tests/layers.
PAPER = {"read": "anchor", "normalize_v": False, "self_values": True, "dgd": True}  # eqs. 87, 88, 90 as printed
FULL = _config(momentum=True, mini_batch=2, mini_batch_memory=4, eta_max=0.3, **PAPER)


def _close_states(a, b, label):
    for name, sa, sb in zip(a._fields, a, b, strict=True):
        if sa is None:
            assert sb is None
            continue
        for field, ta, tb in zip(sa._fields, sa, sb, strict=True):
            assert_close(ta, tb, f"{label} {name}.{field}")


@pytest.mark.parametrize("read", ["anchor", "updated"])
def test_the_engines_three_forms_give_one_result(read):
    config = _config(momentum=True, mini_batch=2, mini_batch_memory=4, read=read, eta_max=0.3,
                                 normalize_v=False)
    params, x = _params(config), _x()
    y_ref, s_ref = self_modifying_titans(x, config, params, mode="reference")
    for mode in ("recurrent", "chunk"):
        y, s = self_modifying_titans(x, config, params, mode=mode)
        assert_close(y, y_ref, f"{mode} y")
        _close_states(s, s_ref, mode)


@pytest.mark.parametrize("config", [FULL, _config(mini_batch=1, mini_batch_memory=1, eta_max=0.3, **PAPER),
                                    _config(mini_batch=2, eta_max=0.3)], ids=["full", "mb1", "defaults"])
def test_token_steps_and_a_split_sequence_equal_one_call(config):
    params, x = _params(config), _x()
    y_full, s_full = self_modifying_titans(x, config, params)
    y_head, state = self_modifying_titans(x[:, :3], config, params)
    y_mid, state = self_modifying_titans(x[:, 3:8], config, params, state)  # continues mid mini-batch
    steps = [y_head, y_mid]
    for t in range(8, T):
        y_t, state = self_modifying_titans(x[:, t:t + 1], config, params, state, mode="recurrent")
        steps.append(y_t)
    assert_close(torch.cat(steps, dim=1), y_full, "y")
    _close_states(state, s_full, "final")


@pytest.mark.parametrize(("momentum", "layer_norm", "self_values", "memory_expand"),
                         [(False, False, True, 0), (True, False, True, 0), (True, True, True, 0),
                          (True, True, False, 0), (False, False, True, 4), (True, True, True, 4),
                          (True, True, False, 4)])
def test_the_fused_path_equals_the_reference_form(momentum, layer_norm, self_values, memory_expand):
    """Every memory updated on one mini-batch runs stacked (`_fused_piece`): six alike memories (memory_expand=0)
    as one engine block per mini-batch, the five generators and a main memory of its own shape (the default,
    memory_expand=4) as two; T = 11 ends inside a mini-batch and a continued call starts inside one, so both paths
    run and hand over."""
    config = _config(momentum=momentum, layer_norm=layer_norm, mini_batch=4, eta_max=0.3, self_values=self_values,
                     memory_expand=memory_expand)
    params, x = _params(config), _x()
    y_ref, s_ref = self_modifying_titans(x, config, params, mode="reference")
    y, s = self_modifying_titans(x, config, params)
    assert_close(y, y_ref, "y")
    _close_states(s, s_ref, "state")
    y_head, state = self_modifying_titans(x[:, :6], config, params)
    y_tail, state = self_modifying_titans(x[:, 6:], config, params, state)
    assert_close(torch.cat([y_head, y_tail], dim=1), y_ref, "split y")
    _close_states(state, s_ref, "split state")


def test_causal():
    params, x = _params(FULL), _x()
    y, _ = self_modifying_titans(x, FULL, params)
    for t in (0, 4, 9):
        later = x.clone()
        later[:, t + 1:] += 1.0
        y2, _ = self_modifying_titans(later, FULL, params)
        assert_close(y2[:, :t + 1], y[:, :t + 1], f"outputs up to {t}")


@pytest.mark.parametrize("flag", [{"dgd": False}, {"momentum": False}, {"weight_decay": False},
                                  {"static": frozenset({"k"})}, {"static": frozenset({"v"})},
                                  {"adaptive_q": False}, {"self_values": False}, {"read": "updated"},
                                  {"layer_norm": False}, {"ln_affine": False},
                                  {"normalize_v": True}, {"memory_expand": 0}, {"memory_activation": "silu"},
                                  {"normalize_targets": True}])
def test_every_ablation_switch_changes_the_computation(flag):
    base = _config(momentum=True, mini_batch=2, mini_batch_memory=2, eta_max=0.3, **PAPER)
    ablated = SelfModifyingConfig(**{**base.__dict__, **flag})
    params_base, params_ablated = _params(base), _params(ablated)
    y, _ = self_modifying_titans(_x(), base, params_base)
    y2, state = self_modifying_titans(_x(), ablated, params_ablated)
    assert (y - y2).abs().max() > 1e-6, f"{flag} changed nothing"
    for name in flag.get("static", ()):
        assert torch.equal(getattr(state, name).params[0], params_ablated.init[name]), f"static {name} moved"


@pytest.mark.parametrize("fused", [True, False], ids=["fused", "general"])
def test_truncated_bptt_keeps_the_forward_and_cuts_the_gradient_at_its_boundaries(fused):
    """bptt=4: the outputs and states equal the full backward's; no output from token 4 on has a gradient into an
    input before it, while an output before token 4 still reaches the inputs before its mini-batch."""
    options = {"mini_batch": 2, "eta_max": 0.3} if fused else {"mini_batch": 2, "mini_batch_memory": 4, **PAPER}
    full, cut = _config(**options), _config(**options, bptt=4)
    params = _params(full)
    x = _x().requires_grad_()
    y, s = self_modifying_titans(x, full, params)
    y_cut, s_cut = self_modifying_titans(x, cut, params)
    assert_close(y_cut, y, "y")
    _close_states(s_cut, s, "state")
    later, = torch.autograd.grad(y_cut[:, 4:].sum(), x, retain_graph=True)
    assert torch.equal(later[:, :4], torch.zeros_like(later[:, :4])) and later[:, 4:].abs().max() > 0
    earlier, = torch.autograd.grad(y_cut[:, 3].sum(), x)
    assert earlier[:, :2].abs().max() > 0
    full_grad, = torch.autograd.grad(y[:, 4:].sum(), x)
    assert full_grad[:, :4].abs().max() > 0  # without the cut the gradient crosses


@pytest.mark.parametrize("fused", [True, False], ids=["fused", "general"])
def test_target_stop_grad_keeps_the_forward_and_cuts_the_targets_path_into_the_state(fused):
    """target_stop_grad: outputs and states equal the full backward's; the gradient into x changes (a path is cut),
    and the memories' initial weights still get one."""
    options = {"mini_batch": 2, "eta_max": 0.3} if fused else {"mini_batch": 2, "mini_batch_memory": 4, **PAPER}
    full, cut = _config(**options), _config(**options, target_stop_grad=True)
    params = _params(full)
    for p in params.init.values():
        p.requires_grad_()
    x = _x().requires_grad_()
    y, s = self_modifying_titans(x, full, params)
    y_cut, s_cut = self_modifying_titans(x, cut, params)
    assert_close(y_cut, y, "y")
    _close_states(s_cut, s, "state")
    g_full, = torch.autograd.grad(y[:, -1].norm(), x, retain_graph=True)
    g_cut, init_grad = torch.autograd.grad(y_cut[:, -1].norm(), [x, params.init["memory"]])
    assert (g_cut - g_full).abs().max() > 1e-6 and init_grad.abs().max() > 0


def _generated(config, params, x):
    """k, v, q, eta, g of a configuration whose projections are all static (functions of x alone)."""
    state = initial_state(config, params, B)
    k = F.normalize(_read(config, "k", state.k, x, params), dim=-1)
    v = _read(config, "v", state.v, x, params)
    q = F.normalize(_read(config, "q", state.q, x, params), dim=-1)
    eta = config.eta_max * torch.sigmoid((_read(config, "eta", state.eta, x, params) * params.w_eta).sum(-1))
    g = F.logsigmoid((_read(config, "alpha", state.alpha, x, params) * params.w_alpha).sum(-1))
    return q, k, v, eta, g


STATIC = frozenset({"k", "v", "q", "eta", "alpha"})


def test_static_projections_linear_memory_dot_loss_no_dgd_is_gated_linear_attention():
    config = _config(static=STATIC, memory_model=InnerModel(), dgd=False, momentum=False, step_rule="explicit",
                                 loss="dot", self_values=False, read="updated", mini_batch=1, mini_batch_memory=1,
                                 normalize_v=False, eta_max=1.0)
    params, x = _params(config), _x()
    params.init["memory"].zero_()
    y, _ = self_modifying_titans(x, config, params)
    q, k, v, eta, g = _generated(config, params, x)
    expected, _ = gated_linear_attn(q, k, v * eta.unsqueeze(-1), g, scale=1.0)
    assert_close(y, expected, "y")


def test_with_the_l2_objective_it_is_the_decoupled_gated_delta_rule():
    config = _config(static=STATIC, memory_model=InnerModel(), dgd=False, momentum=False, step_rule="explicit",
                                 self_values=False, read="updated", mini_batch=1, mini_batch_memory=1,
                                 normalize_v=False, eta_max=1.0)
    params, x = _params(config), _x()
    params.init["memory"].zero_()
    y, _ = self_modifying_titans(x, config, params)
    q, k, v, eta, g = _generated(config, params, x)
    expected, _ = momentum_delta_rule(q, k, v, g, eta, torch.full_like(g, -1e4), scale=1.0)
    assert_close(y, expected, "y")


@pytest.mark.parametrize("bad,field", [
    ({"static": frozenset({"memory"})}, "static"), ({"mini_batch_memory": 3}, "mini_batch_memory"),
    ({"mini_batch": 0}, "mini_batch"), ({"read": "later"}, "read"), ({"activation": "softplus"}, "activation"),
    ({"loss": "l1"}, "loss"), ({"eta_max": -0.1}, "eta_max"), ({"hidden": -1}, "hidden"),
    ({"step_rule": "implicit"}, "step_rule"), ({"inputs": "tied"}, "inputs"), ({"bptt": 3}, "bptt"),
    ({"bptt": 0}, "bptt"), ({"mini_batch": 4, "bptt": 6}, "bptt"),
    ({"target_stop_grad": True, "self_values": False}, "target_stop_grad"),
])
def test_bad_configuration_raises_value_error_naming_it(bad, field):
    with pytest.raises(ValueError, match=f"^{field} must"):
        SelfModifyingConfig(**bad)


def test_static_accepts_any_collection_and_the_main_memory_has_its_own_mini_batch():
    assert _config(static=("k", "v")).static == frozenset({"k", "v"})
    assert _config(mini_batch=4).mini_batch_of("memory") == 4
    assert _config(mini_batch=4, mini_batch_memory=8).mini_batch_of("memory") == 8


def test_bad_input_raises_value_error():
    with pytest.raises(ValueError, match="x must"):
        self_modifying_titans(torch.zeros(2, 3, 4), FULL, _params(FULL))


def test_separate_views_read_their_own_rows():
    """inputs="separate": three equal views give the shared function; changing only v's view changes the values
    written (so the outputs), and an x without the view axis raises."""
    shared = _config(momentum=True, mini_batch=2, eta_max=0.3)
    separate = SelfModifyingConfig(**{**shared.__dict__, "inputs": "separate"})
    params, x = _params(shared), _x()
    y_shared, _ = self_modifying_titans(x, shared, params)
    y_same, _ = self_modifying_titans(torch.stack([x, x, x], dim=2), separate, params)
    assert_close(y_same, y_shared, "three equal views")
    y_v, _ = self_modifying_titans(torch.stack([x, _x(seed=5), x], dim=2), separate, params)
    assert (y_v - y_shared).abs().max() > 1e-3
    with pytest.raises(ValueError, match=r"x must have shape \[B, T, 3, H, d\]"):
        self_modifying_titans(x, separate, params)
