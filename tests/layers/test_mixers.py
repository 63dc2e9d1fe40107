"""The mixer contract (regmem/layers/base.py), checked for every mixer of the registry in float64:

- a prefill that returns a state, then one-token steps, equals one full forward;
- left or right padding leaves the outputs of the real tokens unchanged;
- a left- or right-padded prefill, then one-token steps, equals the unpadded run;
- `state_floats(T)` is exactly the number of floats the state holds after T tokens;
- `recipe` is the mixer's point of the design space; gradients reach every parameter.

The cases are every key of `MIXERS` with its defaults (a new mixer is covered by being registered), plus
variants of some mixers' options. Sizes are small and chunks short (4), so prefills and padded runs cross
several chunk boundaries and end inside a chunk.
"""

import inspect

import pytest
import torch

from helpers import one_intra_op_thread  # noqa: F401 -- the fixture, used by pytestmark
from regmem.layers import MIXERS, build_mixer
from regmem.recipe import Recipe, Regressor, Solver, Weights

D_MODEL, HEADS, CHUNK = 16, 2, 4
OPTION_VARIANTS = {  # "<registry key>-<what the options do>": options beyond the defaults
    "attn-qknorm-gqa-conv": {"qk_norm": True, "n_kv_heads": 1, "short_conv": 3},
    "attn-norotary": {"rotary": False},
    "attn-headnorm": {"head_norm": True},
    "fox-rotary-qknorm-gqa-conv-headnorm": {"rotary": True, "qk_norm": True, "n_kv_heads": 1, "short_conv": 3,
                                            "head_norm": True, "gate_bias_init": 2.0},
    "fox-bilinear": {"gate": "bilinear"},
    "fox-bilinear-rotary-qknorm-gqa-conv": {"gate": "bilinear", "rotary": True, "qk_norm": True, "n_kv_heads": 1,
                                            "short_conv": 3},
    "linear-elu-gqa": {"feature_map": "elu_plus_one", "n_kv_heads": 1, "qk_norm": True},
    "linear-taylor2": {"feature_map": "taylor2", "head_dim": 4, "output_gate": False},
    "mamba2-groups": {"n_groups": 2, "head_dim": 4},
    "mamba2-noconv": {"short_conv": 0},
    "gla-expandv": {"expand_v": 2.0},
    "deltanet-negeig": {"allow_neg_eigval": True},
    "deltanet-noconv": {"short_conv": 0},
    "nlms-nonorm": {"qk_norm": False},
    "delta_product-3": {"n_householder": 3, "n_kv_heads": 1, "gate": False},
    "titans-noconv": {"short_conv": 0},
    "mesa-cg": {"solver": "cg", "cg_steps": 40, "n_kv_heads": 1},
    "mesa-keyconv-nogate": {"short_conv": 2, "short_conv_on": "k", "write_gate": False, "n_kv_heads": 1},
    "rls-ridge": {"qk_norm": False, "ridge_init": 2.0},
    "local_linear-gqa-conv": {"n_kv_heads": 1, "short_conv": 3, "qk_norm": False},
    "local_linear-rotary": {"rotary": True},
    "hla-normalized-gqa-conv": {"normalize": True, "n_kv_heads": 1, "short_conv": 3},
    "hla-nodecay": {"decay": False},
    "ahla-gqa": {"n_kv_heads": 1},
    "ttt_linear-mb1": {"mini_batch": 1},
    "ttt_mlp-mb2-gqa": {"mini_batch": 2, "n_kv_heads": 1},
    "ttt_mlp-position-step": {"mini_batch": 4, "position_step": True},
    "ttt_mlp-official": {"mini_batch": 4, "position_step": True, "rotary": True, "output_norm": "layer",
                         "gate_activation": "gelu_tanh", "activation": "gelu_tanh", "short_conv": 0, "qk_norm": False},
    "ttt_linear-rotary-headnorm-gelu-gate": {"mini_batch": 2, "rotary": True, "gate_activation": "gelu_tanh"},
    "titans_mlp-mb4-dgd-depth3": {"mini_batch": 4, "dgd": True, "depth": 3, "expand": 1},
    "titans_mlp-noconv": {"mini_batch": 2, "short_conv": 0},
    "titans_mlp-nomomentum-nodecay": {"mini_batch": 2, "momentum": False, "weight_decay": False},
    "titans_mlp-decay-spread": {"mini_batch": 2, "decay_init": (1e-4, 1e-2)},
    "mamba-simple-noconv": {"discretization": "simple", "short_conv": 0},
    "self_modifying_titans-mb2-4": {"mini_batch": 2, "mini_batch_memory": 4},
    "hope-cms-nested": {"mini_batch": 2, "cms_chunk_sizes": (2, 4), "cms_variant": "nested", "cms_lr": 0.05},
    "hope_attention-independent": {"cms_chunk_sizes": (3,), "cms_variant": "independent", "cms_lr": 0.05},
    "self_modifying_titans-ablations": {"mini_batch": 4, "dgd": True, "momentum": True, "weight_decay": False,
                                        "static": ("k", "v"), "adaptive_q": False, "read": "updated"},
    "lstm-conv-narrow": {"short_conv": 3, "hidden_size": 8},
    "deltaformer-gqa-conv-token-beta": {"n_kv_heads": 1, "short_conv": 3, "beta": "token"},
    "deltaformer-linear-round-norotary": {"erase_kernel": "linear", "read_kernel": "round", "rotary": False},
    "deltaformer-rms-gqa-conv": {"normalizer": "rms", "n_kv_heads": 1, "short_conv": 3},
    "deltaformer-rms-token-beta": {"normalizer": "rms", "beta": "token"},
    "moe_attn-top2-qknorm-gqa-conv": {"top_k": 2, "qk_norm": True, "n_kv_heads": 1, "short_conv": 3},
    "moba-top1-norotary-headnorm": {"top_k": 1, "rotary": False, "head_norm": True},
}
CASES = {name: {} for name in MIXERS} | OPTION_VARIANTS
# Defaults that are large for these sizes (Hope's CMS levels would not update within the tests' 13 tokens).
SMALLER = {"mamba2": {"state_size": 8}, "mamba": {"state_size": 4}, "hope": {"cms_chunk_sizes": (2, 4, 8)},
           "hope_standin": {"cms_chunk_sizes": (2, 4, 8)},
           "hope_attention": {"cms_chunk_sizes": (2, 4)}, "moe_attn": {"block_size": 3},
           "moba": {"block_size": 3, "top_k": 2}}

_LIN, _GD = Regressor("linear"), Solver("gd_step")
# Each mixer's point of the design space (arXiv:2501.12352, Sec. 3 and Table 1; HLA is arXiv:2510.27258).
RECIPES = {
    "attn": Recipe(Weights("query_similarity"), Regressor("local_polynomial", degree=0), Solver("analytic")),
    "hope_attention": Recipe(Weights("query_similarity"), Regressor("local_polynomial", degree=0), Solver("analytic")),
    "linear": Recipe(Weights("uniform"), _LIN, _GD),
    "linear-elu-gqa": Recipe(Weights("uniform"), Regressor("feature_linear", feature_map="phi"), _GD),
    "linear-taylor2": Recipe(Weights("uniform"), Regressor("feature_linear", feature_map="phi"), _GD),
    "retnet": Recipe(Weights("constant_decay"), _LIN, _GD),
    "mamba2": Recipe(Weights("scalar_decay"), _LIN, _GD),
    "mamba": Recipe(Weights("diagonal_decay"), _LIN, _GD),
    "self_modifying_titans": Recipe(Weights("uniform"), Regressor("mlp"), Solver("dgd")),  # eq. 88's DGD
    "self_modifying_titans-ablations": Recipe(Weights("uniform"), Regressor("mlp"), Solver("dgd")),
    "hope": Recipe(Weights("uniform"), Regressor("mlp"), Solver("dgd")),
    # the stand-ins: plain SGD with momentum and weight decay (no DGD term)
    "self_modifying_titans_standin": Recipe(Weights("uniform"), Regressor("mlp"), Solver("sgd_momentum")),
    "hope_standin": Recipe(Weights("uniform"), Regressor("mlp"), Solver("sgd_momentum")),
    "gla": Recipe(Weights("diagonal_decay"), _LIN, _GD),
    "deltanet": Recipe(Weights("uniform"), _LIN, Solver("sgd")),
    "gated_deltanet": Recipe(Weights("uniform"), _LIN, Solver("sgd_weight_decay")),
    "longhorn": Recipe(Weights("uniform"), _LIN, Solver("sgd_adaptive")),
    "nlms": Recipe(Weights("uniform"), _LIN, Solver("sgd_adaptive")),
    "delta_product": Recipe(Weights("uniform"), _LIN, Solver("sgd", steps=2)),
    "delta_product-3": Recipe(Weights("uniform"), _LIN, Solver("sgd", steps=3)),
    "titans": Recipe(Weights("uniform"), _LIN, Solver("sgd_momentum")),
    "mesa": Recipe(Weights("scalar_decay"), _LIN, Solver("analytic")),
    "mesa-keyconv-nogate": Recipe(Weights("scalar_decay"), _LIN, Solver("analytic")),
    "rls": Recipe(Weights("uniform"), _LIN, Solver("analytic")),
    "local_linear": Recipe(Weights("query_similarity"), Regressor("local_polynomial", degree=1), Solver("analytic")),
    "hla": Recipe(Weights("constant_decay"), _LIN, Solver("metric_gd_step")),
    "ahla": Recipe(Weights("constant_decay"), _LIN, _GD),
    "ttt_linear": Recipe(Weights("uniform"), _LIN, Solver("sgd")),
    "ttt_mlp": Recipe(Weights("uniform"), Regressor("mlp"), Solver("sgd")),
    "titans_mlp": Recipe(Weights("uniform"), Regressor("mlp"), Solver("sgd_momentum")),
    "deltaformer": Recipe(Weights("uniform"), Regressor("kernel"), Solver("sgd")),
    "lstm": None,  # a nonlinear recurrence, no point of the design space (regmem/layers/lstm.py)
    "fox": None,  # query similarity times a scalar decay: no single weighting (regmem/layers/fox.py)
    "moe_attn": None,  # query similarity times a block-routing gate (regmem/layers/block_attention.py)
    "moba": None,
}


pytestmark = pytest.mark.usefixtures("one_intra_op_thread")


def _registry_key(case: str) -> str:
    return case.split("-")[0]


def _takes_chunk_size(cls) -> bool:
    return any("chunk_size" in inspect.signature(c.__init__).parameters for c in cls.__mro__ if "__init__" in vars(c))


def _mixer(case: str):
    torch.manual_seed(0)
    name = _registry_key(case)
    kwargs = SMALLER.get(name, {}) | ({"chunk_size": CHUNK} if _takes_chunk_size(MIXERS[name]) else {})
    return build_mixer(name, D_MODEL, HEADS, **(kwargs | CASES[case])).double().eval()


def _x(B: int, T: int) -> torch.Tensor:
    return torch.randn(B, T, D_MODEL, dtype=torch.float64)


def _assert_close(actual, expected, what):
    torch.testing.assert_close(actual, expected, rtol=1e-9, atol=1e-10, msg=lambda m: f"{what}: {m}")


def _decode(mixer, state, steps: torch.Tensor):
    """Feeds steps [B, n, d_model] one token at a time; returns the outputs [B, n, d_model] and the state."""
    ys = []
    for t in range(steps.shape[1]):
        y_t, state = mixer(steps[:, t:t + 1], state)
        ys.append(y_t)
    return torch.cat(ys, dim=1), state


def _floats(state) -> int:
    """Floats held by a (nested) decoding state: the elements of its floating-point tensors."""
    if isinstance(state, torch.Tensor):
        return state.numel() if state.is_floating_point() else 0
    if state is None:
        return 0
    return sum(_floats(s) for s in state)


def _pad_mask(lengths, T, side):
    mask = torch.zeros(len(lengths), T, dtype=torch.bool)
    for b, n in enumerate(lengths):
        mask[b, _real(n, T, side)] = True
    return mask


def _real(n, T, side):
    return slice(T - n, T) if side == "left" else slice(0, n)


def test_cases_cover_every_registered_mixer_and_name_one():
    assert set(MIXERS) <= set(CASES)
    assert all(_registry_key(case) in MIXERS for case in CASES), "a variant must start with a registry key"


@pytest.mark.parametrize("case", list(CASES))
def test_recipe_is_the_mixers_point_of_the_design_space(case):
    mixer = _mixer(case)
    expected = RECIPES.get(case, RECIPES.get(_registry_key(case)))
    assert mixer.recipe == expected, f"{case}: {mixer.recipe} != {expected}"


@pytest.mark.parametrize("case", list(CASES))
def test_state_floats_is_the_floats_of_the_state(case):
    mixer = _mixer(case)
    with torch.no_grad():
        y, state = mixer(_x(3, 9))
        assert y.shape == (3, 9, D_MODEL)
        assert _floats(state) == 3 * mixer.state_floats(9), f"{_floats(state) / 3} floats per row held"
        _, state = mixer(_x(3, 1), state)
        assert _floats(state) == 3 * mixer.state_floats(10), f"{_floats(state) / 3} floats per row after a step"


@pytest.mark.parametrize("case", list(CASES))
def test_prefill_then_single_steps_equals_full_forward(case):
    mixer = _mixer(case)
    x = _x(2, 13)
    with torch.no_grad():
        y_full, _ = mixer(x)
        y_prefill, state = mixer(x[:, :7])
        y_steps, _ = _decode(mixer, state, x[:, 7:])
    _assert_close(torch.cat([y_prefill, y_steps], dim=1), y_full, "prefill + steps")


@pytest.mark.parametrize("side", ["left", "right"])
@pytest.mark.parametrize("case", list(CASES))
def test_padding_does_not_change_real_tokens(case, side):
    mixer = _mixer(case)
    lengths, T = [10, 6, 1], 10
    x = _x(3, T)
    mask = _pad_mask(lengths, T, side)
    with torch.no_grad():
        y, _ = mixer(x.masked_fill(~mask.unsqueeze(-1), 7.0), attention_mask=mask)  # garbage in the padding
        for b, n in enumerate(lengths):
            alone, _ = mixer(x[b:b + 1, _real(n, T, side)])
            _assert_close(y[b:b + 1, _real(n, T, side)], alone, f"row {b}")


@pytest.mark.parametrize("case", list(CASES))
def test_a_mask_without_padding_is_no_mask(case):
    mixer = _mixer(case)
    x, ones = _x(2, 9), torch.ones(2, 9, dtype=torch.bool)
    with torch.no_grad():
        y, state = mixer(x)
        y_masked, state_masked = mixer(x, attention_mask=ones)
        _assert_close(y_masked, y, "prefill")
        y_step, _ = mixer(x[:, :1], state)
        y_step_masked, _ = mixer(x[:, :1], state_masked)
    _assert_close(y_step_masked, y_step, "a step after the prefill")


@pytest.mark.parametrize("side", ["left", "right"])
@pytest.mark.parametrize("case", list(CASES))
def test_padded_prefill_then_steps_equals_unpadded_run(case, side):
    """Rows of 9, 5 and 6 prompt tokens padded to 9, then 4 tokens decoded one at a time."""
    mixer = _mixer(case)
    lengths, T, n_steps = [9, 5, 6], 9, 4
    mask = _pad_mask(lengths, T, side)
    prompts = _x(3, T).masked_fill(~mask.unsqueeze(-1), -3.0)
    steps = _x(3, n_steps)
    with torch.no_grad():
        y_prefill, state = mixer(prompts, attention_mask=mask)
        y_steps, _ = _decode(mixer, state, steps)
        for b, n in enumerate(lengths):
            real = _real(n, T, side)
            alone, _ = mixer(torch.cat([prompts[b:b + 1, real], steps[b:b + 1]], dim=1))
            _assert_close(y_prefill[b:b + 1, real], alone[:, :n], f"row {b}, prefill")
            _assert_close(y_steps[b:b + 1], alone[:, n:], f"row {b}, steps")


@pytest.mark.parametrize("case", list(CASES))
def test_gradients_reach_every_parameter(case):
    mixer = _mixer(case).train()
    y, _ = mixer(_x(2, 9))
    (y * torch.randn_like(y)).sum().backward()
    for name, p in mixer.named_parameters():
        assert p.grad is not None and p.grad.abs().sum() > 0, f"no gradient reaches {name}"


def test_unknown_mixer_and_bad_input_raise():
    with pytest.raises(ValueError, match="mixer"):
        build_mixer("gru", D_MODEL, HEADS)
    with pytest.raises(ValueError, match="x must have shape"):
        _mixer("gla")(_x(2, 5)[..., :-1])
    with pytest.raises(ValueError, match="attention_mask"):
        _mixer("attn")(_x(2, 5), attention_mask=torch.ones(2, 6))
    with pytest.raises(ValueError, match="position_step"):  # official TTT's step: no momentum, no weight decay
        build_mixer("titans_mlp", D_MODEL, HEADS, position_step=True)
    with pytest.raises(ValueError, match="output_norm must be one of"):
        build_mixer("ttt_mlp", D_MODEL, HEADS, output_norm="group")
    with pytest.raises(ValueError, match="gate_activation must be one of"):
        build_mixer("ttt_linear", D_MODEL, HEADS, gate_activation="gelu")


def test_titans_mlp_without_a_gate_is_the_gate_held_at_zero():
    """`momentum=False` / `weight_decay=False` (Titans' Table 5 ablations) equal the full memory with mu_t = 0 and
    alpha_t = 0: the full layer's mu and alpha logits pinned far below zero, every other weight shared."""
    torch.manual_seed(0)
    full = build_mixer("titans_mlp", D_MODEL, HEADS, mini_batch=2).double()
    x = _x(2, 9).double()
    for momentum, weight_decay in [(False, True), (True, False), (False, False)]:
        ablated = build_mixer("titans_mlp", D_MODEL, HEADS, mini_batch=2, momentum=momentum,
                              weight_decay=weight_decay).double()
        kept = [0] + ([1] if momentum else []) + ([2] if weight_decay else [])  # full's gates: eta, mu, alpha
        state = {k: v for k, v in full.state_dict().items() if not k.startswith("gate_")}
        ablated.load_state_dict(state, strict=False)
        w = full.gate_proj.weight.view(3, HEADS, D_MODEL)
        b = full.gate_bias.view(3, HEADS)
        with torch.no_grad():
            ablated.gate_proj.weight.copy_(w[kept].reshape(-1, D_MODEL))
            ablated.gate_bias.copy_(b[kept].reshape(-1))
            reference = build_mixer("titans_mlp", D_MODEL, HEADS, mini_batch=2).double()
            reference.load_state_dict(full.state_dict())
            for gate in {1, 2} - set(kept):  # mu = sigmoid(-1e4) = 0; alpha = sigmoid(-1e4) = 0
                reference.gate_proj.weight.view(3, HEADS, D_MODEL)[gate] = 0.0
                reference.gate_bias.view(3, HEADS)[gate] = -1e4
        expected, _ = reference(x)
        got, _ = ablated(x)
        torch.testing.assert_close(got, expected, rtol=1e-10, atol=1e-10)
        assert not torch.allclose(got, full(x)[0], atol=1e-6)  # the gate mattered


@pytest.mark.parametrize("name", ["titans_mlp", "self_modifying_titans", "hope"])
def test_decay_init_sets_the_initial_weight_decay_per_head(name):
    """`decay_init`: None keeps Titans' alpha = sigmoid(-4.6) ~ 0.01 a token; (lo, hi) spreads alpha geometrically over
    the heads from hi to lo (layers/gates.py), so the slowest head keeps exp(-1) of a value for ~1 / lo tokens."""
    def alpha(mixer):
        if name == "titans_mlp":
            return torch.sigmoid(mixer.gate_bias.detach().view(3, HEADS)[-1])
        return torch.sigmoid(-mixer.b_alpha.detach())  # b_alpha is the retention's logit
    titans = torch.sigmoid(torch.tensor(-4.6)).expand(HEADS)
    torch.testing.assert_close(alpha(build_mixer(name, D_MODEL, HEADS)), titans)
    spread = alpha(build_mixer(name, D_MODEL, HEADS, decay_init=(1e-4, 1e-2)))
    torch.testing.assert_close(spread, torch.logspace(-2, -4, HEADS), rtol=1e-5, atol=0)
    one = alpha(build_mixer(name, D_MODEL, HEADS, decay_init=1e-3))
    torch.testing.assert_close(one, torch.full((HEADS,), 1e-3), rtol=1e-5, atol=0)
    for bad in (0.0, 1.5, (1e-2, 1e-4), (1e-4,)):
        with pytest.raises(ValueError, match="decay_init"):
            build_mixer(name, D_MODEL, HEADS, decay_init=bad)
    with pytest.raises(ValueError, match="decay_init.*weight_decay"):
        build_mixer(name, D_MODEL, HEADS, decay_init=1e-3, weight_decay=False)


def test_registry_covers_the_issue_mixers():
    """The mixers the library promises stay registered (a new mixer joins by its registration alone)."""
    assert set(MIXERS) >= {"attn", "linear", "retnet", "mamba2", "gla", "deltanet", "gated_deltanet", "longhorn",
                           "nlms", "delta_product", "titans", "local_linear", "mesa", "rls", "hla",
                           "ahla", "ttt_linear", "ttt_mlp", "titans_mlp", "mamba",
                           "self_modifying_titans", "lstm", "hope", "hope_attention", "fox", "deltaformer",
                           "moe_attn", "moba"}
