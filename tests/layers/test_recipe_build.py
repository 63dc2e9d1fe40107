"""`build_mixer(recipe, ...)` (regmem/layers/registry.py): a point of the design space builds the named mixer there,
or the test-time-training engine (regmem/layers/engine.py) for any (uniform, linear | mlp, SGD-family) point, which
keeps the mixer contract."""

import subprocess
import sys

import pytest
import torch

from regmem.layers import (
    MIXERS,
    TTTMLP,
    DeltaNet,
    EngineMixer,
    LinearAttention,
    Mixer,
    TitansMLP,
    build_mixer,
    named_mixer,
)
from regmem.models import LM, LMConfig
from regmem.recipe import Recipe, Regressor, Solver, Weights


def _recipe(weights, regressor, solver):
    return Recipe(Weights(weights), Regressor(regressor), Solver(solver))


@pytest.mark.parametrize(("point", "cls"), [
    (("uniform", "linear", "gd_step"), LinearAttention),
    (("uniform", "linear", "sgd"), DeltaNet),
    (("uniform", "mlp", "sgd_momentum"), TitansMLP),
    (("uniform", "mlp", "sgd"), TTTMLP),
])
def test_a_point_with_a_named_mixer_builds_that_mixer(point, cls):
    mixer = build_mixer(_recipe(*point), 16, 2)
    assert type(mixer) is cls and mixer.recipe == _recipe(*point)


def test_every_registered_mixer_is_what_its_recipe_builds_or_shares_its_point():
    for name, cls in MIXERS.items():
        if cls(16, 2).recipe is None:  # outside the design space: the LSTM (regmem/layers/lstm.py), FoX
            continue
        built = build_mixer(cls(16, 2).recipe, 16, 2)
        assert built.recipe == cls(16, 2).recipe, name


def test_a_class_declares_the_point_its_default_instance_sits_at():
    for name, cls in MIXERS.items():
        assert cls.default_recipe() == cls(16, 2).recipe, name


def test_finding_the_mixer_at_a_point_builds_no_mixer(monkeypatch):
    """build_mixer indexes mixers by their declared point: no instance is constructed to look it up."""
    def refuse(self, *args, **kwargs):
        raise AssertionError("a mixer was built")

    monkeypatch.setattr(Mixer, "__init__", refuse)
    assert named_mixer(_recipe("uniform", "linear", "sgd")) == "deltanet"
    assert named_mixer(_recipe("uniform", "linear", "dgd")) is None


def test_build_mixer_needs_no_earlier_import_of_the_layers():
    """A fresh interpreter that imports only regmem.layers.build_mixer and regmem.recipe builds at a point (no
    registration happens as a side effect of `import regmem`)."""
    code = ("from regmem.recipe import Recipe, Regressor, Solver, Weights\n"
            "from regmem.layers import build_mixer\n"
            "m = build_mixer(Recipe(Weights('uniform'), Regressor('linear'), Solver('dgd')), 16, 2)\n"
            "print(type(m).__name__)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "EngineMixer"


@pytest.mark.parametrize("point", [("uniform", "linear", "dgd"), ("uniform", "mlp", "gd_step")])
def test_other_points_build_the_engine_and_keep_the_mixer_contract(point):
    torch.manual_seed(0)
    mixer = build_mixer(_recipe(*point), 16, 2, chunk_size=2, mini_batch=4).double().eval()
    assert isinstance(mixer, EngineMixer) and mixer.recipe == _recipe(*point)
    x = torch.randn(2, 11, 16, dtype=torch.float64)
    with torch.no_grad():
        full, _ = mixer(x)
        head, state = mixer(x[:, :6])
        steps = []
        for t in range(6, 11):
            y, state = mixer(x[:, t:t + 1], state)
            steps.append(y)
        mask = torch.arange(11) >= torch.tensor([[0], [4]])  # row 1 left-padded by 4
        padded, _ = mixer(x.masked_fill(~mask.unsqueeze(-1), 3.0), attention_mask=mask)
        alone, _ = mixer(x[1:, 4:])
    torch.testing.assert_close(torch.cat([head, *steps], dim=1), full, rtol=1e-9, atol=1e-10)
    torch.testing.assert_close(padded[1:, 4:], alone, rtol=1e-9, atol=1e-10)


def test_a_recipe_name_builds_through_build_mixer_and_an_lm():
    mixer = build_mixer("recipe:uniform/linear/dgd", 16, 2)
    assert isinstance(mixer, EngineMixer) and mixer.weight_decay and mixer.dgd and not mixer.momentum
    lm = LM(LMConfig(vocab_size=11, d_model=16, n_layers=1, n_heads=2, mixer="recipe:uniform/linear/sgd_momentum"))
    logits = lm(torch.randint(0, 11, (2, 7)))
    logits = logits[0] if isinstance(logits, tuple) else logits
    assert logits.shape[:2] == (2, 7) and torch.isfinite(logits).all()


@pytest.mark.parametrize(("name", "match"), [
    ("recipe:uniform/mlp", "recipe:<weights>"),
    ("recipe:uniform/cubic/sgd", "Regressor.kind"),
    ("recipe:uniform/kernel/sgd_momentum", "does not build"),
    ("recipe:scalar_decay/mlp/sgd", "does not build"),
])
def test_a_point_that_does_not_build_raises_value_error(name, match):
    with pytest.raises(ValueError, match=match):
        build_mixer(name, 16, 2)


def test_the_kernel_delta_rule_point_builds_deltaformer():
    """Uniform weights, a kernel regressor, streaming SGD: the delta rule in the exp kernel's feature space, read by
    a normalised kernel (arXiv:2505.19488 eqs. 37-42)."""
    assert type(build_mixer("recipe:uniform/kernel/sgd", 16, 2)).__name__ == "DeltaFormer"
