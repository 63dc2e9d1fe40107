"""Every mixer: prefill + one-token steps == one full forward; padding (left or right) leaves the outputs of
real tokens unchanged; gradients reach every parameter."""

import pytest
import torch

from regmem.layers import MIXERS, build_mixer

D_MODEL, HEADS = 32, 4
VARIANTS = {
    "attn": {},
    "attn-qknorm-gqa-conv": {"qk_norm": True, "n_kv_heads": 2, "short_conv": 3},
    "linear": {},
    "linear-elu-gqa": {"feature_map": "elu_plus_one", "n_kv_heads": 2, "qk_norm": True},
    "linear-taylor2": {"feature_map": "taylor2", "head_dim": 4, "output_gate": False},
    "retnet": {},
    "mamba2": {"state_size": 16},
    "mamba2-groups": {"state_size": 8, "n_groups": 2, "head_dim": 8},
    "gla": {"expand_v": 2.0},
    "deltanet": {},
    "deltanet-negeig": {"allow_neg_eigval": True, "chunk_size": 16},
    "gated_deltanet": {"allow_neg_eigval": True},
    "longhorn": {},
    "nlms": {"qk_norm": False},
    "delta_product": {"n_householder": 2},
    "delta_product-3": {"n_householder": 3, "n_kv_heads": 2, "gate": False},
    "titans": {},
    "mesa": {},
    "mesa-cg": {"solver": "cg", "cg_steps": 40, "n_kv_heads": 2},
    "mesa-keyconv-nogate": {"short_conv": 2, "short_conv_on": "k", "write_gate": False, "n_kv_heads": 2},
    "rls": {"qk_norm": False, "ridge_init": 2.0},
    "local_linear": {},
    "local_linear-gqa-conv": {"n_kv_heads": 2, "short_conv": 3, "qk_norm": False},
    "hla": {},
    "hla-normalized-gqa-conv": {"normalize": True, "n_kv_heads": 2, "short_conv": 3},
    "hla-nodecay": {"decay": False},
    "ahla": {},
    "ahla-gqa": {"n_kv_heads": 2},
}


def _mixer(variant: str):
    torch.manual_seed(0)
    name = variant.split("-")[0]  # variant ids: mixer name, then a description of the options
    return build_mixer(name, D_MODEL, HEADS, **VARIANTS[variant]).eval()


def _assert_close(actual, expected, what):
    torch.testing.assert_close(actual, expected, rtol=1e-5, atol=1e-5, msg=lambda m: f"{what}: {m}")


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_output_shape_and_recipe(variant):
    mixer = _mixer(variant)
    y, _ = mixer(torch.randn(2, 11, D_MODEL))
    assert y.shape == (2, 11, D_MODEL)
    assert mixer.recipe is not None and mixer.state_size(11) > 0


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_prefill_then_single_steps_equals_full_forward(variant):
    mixer = _mixer(variant)
    x = torch.randn(2, 70, D_MODEL)
    with torch.no_grad():
        y_full, _ = mixer(x)
        y_prefill, state = mixer(x[:, :45])
        steps = []
        for t in range(45, 70):
            y_t, state = mixer(x[:, t:t + 1], state)
            steps.append(y_t)
    _assert_close(torch.cat([y_prefill, *steps], dim=1), y_full, "prefill + steps")


@pytest.mark.parametrize("side", ["left", "right"])
@pytest.mark.parametrize("variant", list(VARIANTS))
def test_padding_does_not_change_real_tokens(variant, side):
    mixer = _mixer(variant)
    lengths = [30, 19]
    T = max(lengths)
    x = torch.randn(2, T, D_MODEL)
    mask = torch.zeros(2, T, dtype=torch.bool)
    for b, n in enumerate(lengths):
        real = slice(T - n, T) if side == "left" else slice(0, n)
        mask[b, real] = True
    with torch.no_grad():
        y, _ = mixer(x.masked_fill(~mask.unsqueeze(-1), 7.0), attention_mask=mask)  # garbage in the padding
        for b, n in enumerate(lengths):
            real = slice(T - n, T) if side == "left" else slice(0, n)
            alone, _ = mixer(x[b:b + 1, real])
            _assert_close(y[b:b + 1, real], alone, f"row {b}")


@pytest.mark.parametrize("variant", ["attn", "linear", "mamba2"])
def test_left_padded_prefill_then_steps_equals_unpadded(variant):
    mixer = _mixer(variant)
    x = torch.randn(1, 40, D_MODEL)
    pad = torch.randn(1, 6, D_MODEL)
    mask = torch.cat([torch.zeros(1, 6, dtype=torch.bool), torch.ones(1, 30, dtype=torch.bool)], dim=1)
    with torch.no_grad():
        y_alone, _ = mixer(x)
        y, state = mixer(torch.cat([pad, x[:, :30]], dim=1), attention_mask=mask)
        steps = []
        for t in range(30, 40):
            y_t, state = mixer(x[:, t:t + 1], state)
            steps.append(y_t)
    _assert_close(torch.cat([y[:, 6:], *steps], dim=1), y_alone, "padded prefill + steps")


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_gradients_reach_every_parameter(variant):
    mixer = _mixer(variant).train()
    y, _ = mixer(torch.randn(2, 20, D_MODEL))
    (y * torch.randn_like(y)).sum().backward()
    for name, p in mixer.named_parameters():
        assert p.grad is not None and p.grad.abs().sum() > 0, f"no gradient reaches {name}"


def test_unknown_mixer_and_bad_input_raise():
    with pytest.raises(ValueError, match="mixer"):
        build_mixer("lstm", D_MODEL, HEADS)
    with pytest.raises(ValueError, match="x must have shape"):
        _mixer("gla")(torch.randn(2, 5, D_MODEL + 1))
    with pytest.raises(ValueError, match="attention_mask"):
        _mixer("attn")(torch.randn(2, 5, D_MODEL), attention_mask=torch.ones(2, 6))


def test_registry_covers_the_issue_mixers():
    assert set(MIXERS) == {"attn", "linear", "retnet", "mamba2", "gla", "deltanet", "gated_deltanet", "longhorn",
                           "nlms", "delta_product", "titans", "local_linear", "mesa", "rls", "hla",
                           "ahla"}
