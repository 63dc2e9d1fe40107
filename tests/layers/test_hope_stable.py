"""Hope and self-modifying Titans build the paper's mechanisms by default (Nested Learning, arXiv:2512.24695, eqs.
84-97: self-generated values, DGD, momentum, weight decay, a CMS whose levels move) and keep every weight bounded from
initialisation: 2048 tokens of 30 randn inputs at an inner step far above any default cannot blow a memory or a CMS
level up (under the default "normalized" CMS step and the "capped" one), where the printed explicit steps go
non-finite. The stand-in of before LMConfig format 7 stays reachable.
"""

import pytest
import torch

from helpers import one_intra_op_thread  # noqa: F401 -- the fixture, used by pytestmark
from regmem.layers import build_mixer
from regmem.models import LM, LMConfig
from regmem.nested import CMS, CMSConfig

pytestmark = pytest.mark.usefixtures("one_intra_op_thread")
MEMORIES = ("k", "v", "q", "eta", "alpha", "memory")


def test_defaults_are_the_papers_mechanisms_and_the_stand_in_is_the_old_model():
    hope = build_mixer("hope", 32, 2)
    config = hope.config
    assert config.self_values and config.dgd and config.momentum and config.weight_decay and config.adaptive_q
    assert not config.static
    assert hope.cms.config.step_rule == "normalized" and hope.cms.config.rates() == (1e-3,) * 3
    standin = build_mixer("hope_standin", 32, 2)
    assert not standin.config.self_values and not standin.config.dgd
    assert standin.cms.config.step_rule == "normalized" and standin.cms.config.rates() == (1e-3,) * 3
    assert build_mixer("hope_standin", 32, 2, dgd=True).config.dgd  # options given override the stand-in's
    titans = build_mixer("self_modifying_titans_standin", 32, 2)
    assert not titans.config.self_values and not titans.config.dgd


def _largest_weights(name: str, segments: int = 8, **options) -> list[dict]:
    """The largest |weight| of each memory (and of the CMS) after each of `segments` pieces of 256 tokens of
    30 randn, the state carried; eta_t = eta_max / 2 for every token (w_eta = 0)."""
    torch.manual_seed(0)
    mixer = build_mixer(name, 32, 2, **options)
    generator = torch.Generator().manual_seed(1)
    state, largest = None, []
    with torch.no_grad():
        mixer.w_eta.zero_()
        for _ in range(segments):
            y, state = mixer(30 * torch.randn(1, 256, 32, generator=generator), state)
            inner = state.inner.memory if hasattr(state, "inner") else state.memory
            row = {name: getattr(inner, name).params.abs().max() for name in MEMORIES}
            if getattr(state, "cms", None) is not None:
                row["cms"] = max(w.abs().max() for level in state.cms.levels for w in level.theta)
            row["y"] = y.abs().max()
            largest.append(row)
    return largest


@pytest.mark.parametrize("name", ["hope", "self_modifying_titans"])
def test_default_weights_stay_bounded_under_large_inputs_at_a_huge_inner_step(name):
    """eta_t = 500 (eta_max 1000), 500 times the default's largest step, on inputs 30x the unit scale; the CMS at lr
    1000 under either bounded rule: every weight and output stays finite and below 10^3 over 2048 tokens."""
    for cms in ({}, {"cms_step_rule": "capped"}):
        options = {"eta_max": 1000.0, **({"cms_lr": 1000.0, **cms} if name == "hope" else {})}
        for row in _largest_weights(name, **options):
            for what, value in row.items():
                assert torch.isfinite(value) and value < 1e3, (what, cms, row)


def test_the_printed_explicit_steps_go_non_finite_on_the_same_input():
    """Eq. 88 and eq. 71 as printed (step_rule "explicit"), the default eta_max 1 and CMS lr 0.03: the memories'
    weights overflow within the first 256 tokens."""
    first = _largest_weights("hope", segments=1, step_rule="explicit", cms_step_rule="explicit", cms_lr=0.03)[0]
    assert not all(torch.isfinite(value) for value in first.values()), first


def test_normalized_targets_keep_self_generated_values_bounded_where_raw_ones_overflow():
    """Eq. 87's raw targets M(v_t) grow with the memory that makes them; with eq. 89's memories (no layer norm)
    that feedback overflows at eta 500, and the normalised target M(v) / ||M(v)|| stops it. (The default's layer
    norm bounds the target by itself: the test above.)"""
    raw = _largest_weights("self_modifying_titans", segments=4, eta_max=1000.0, layer_norm=False, normalize_v=False)
    assert not all(torch.isfinite(v) and v < 1e3 for row in raw for v in row.values())
    normalized = _largest_weights("self_modifying_titans", segments=4, eta_max=1000.0, layer_norm=False,
                                  normalize_v=False, normalize_targets=True)
    assert all(torch.isfinite(v) and v < 1e3 for row in normalized for v in row.values())


def test_capped_cms_levels_stay_bounded_where_the_explicit_step_overflows():
    """A 3-level CMS at lr 1000 on 30 randn inputs: the capped step's weights stay near their initial scale, eq. 71's
    explicit step overflows."""
    largest = {}
    for rule in ("capped", "explicit"):
        torch.manual_seed(0)
        cms = CMS(16, CMSConfig(chunk_sizes=(4, 16, 64), lr=1000.0, hidden=32, step_rule=rule))
        with torch.no_grad():
            _, state = cms(30 * torch.randn(2, 2048, 16, generator=torch.Generator().manual_seed(1)))
        largest[rule] = max(w.abs().max() for level in state.levels for w in level.theta)
    assert largest["capped"] < 10, largest
    assert not largest["explicit"] < 1e6, largest


def test_configs_saved_before_format_7_load_as_the_stand_in():
    """An LM config of format 6 names no mixer option: it loads with the defaults it was trained with."""
    old = LMConfig(vocab_size=16, d_model=32, n_heads=2, n_layers=1, mixer="hope").to_dict()
    old["format"] = 6
    model = LM(LMConfig.from_dict(old))
    mixer = model.blocks[0].mixer
    assert not mixer.config.self_values and not mixer.config.dgd
    assert mixer.cms.config.step_rule == "normalized" and mixer.cms.config.rates() == (1e-3,) * 3
    assert LMConfig.from_dict(LMConfig.from_dict(old).to_dict()) == LMConfig.from_dict(old)


def _sensitivity(options: dict, T: int = 128) -> torch.Tensor:
    """||d ||y_T|| / d x_s|| for every input s of an initial Hope layer (d_model 32, 2 heads), in float64."""
    torch.manual_seed(0)
    layer = build_mixer("hope", 32, 2, **options).double()
    x = torch.randn(1, T, 32, dtype=torch.float64, requires_grad=True)
    y, _ = layer(x)
    grad, = torch.autograd.grad(y[0, -1].norm(), x)
    return grad[0].norm(dim=-1)  # [T]


def test_a_bounded_layer_norm_gain_stops_the_backward_growing_with_distance():
    """The memories' layer norm multiplies a perturbation of its input by 1 / std; their MLP outputs start with a
    small spread, so with eps 1e-6 the last output depends more on the first input than on the last ones (at
    T 128: ~46x); with eps 1 (gain at most 1) it depends on the first ~100x less (regmem/nested/self_modifying.py,
    `ln_eps`)."""
    default, bounded = _sensitivity({}), _sensitivity({"ln_eps": 1.0})
    assert default[0] > 10 * default[-2]
    assert bounded[0] < default[-2] / 10 and bounded[0] < bounded[-2] / 10


def test_ln_eps_is_the_memories_layer_norm_epsilon():
    from regmem.nested import SelfModifyingConfig
    from regmem.ops import InnerModel
    assert SelfModifyingConfig(ln_eps=0.5).model("memory", 8).ln_eps == 0.5
    with pytest.raises(ValueError, match="ln_eps must be > 0"):
        InnerModel(layer_norm=True, ln_eps=0.0)
    model, x = InnerModel(residual=True, layer_norm=True, ln_eps=0.7), torch.randn(3, 5, 4, dtype=torch.float64)
    w = torch.randn(3, 4, 4, dtype=torch.float64)
    y, _ = model.forward([w], x, None)
    torch.testing.assert_close(y, x + torch.nn.functional.layer_norm(x @ w, (4,), eps=0.7))
