"""Bad input to the delta-rule family fails fast with a ValueError naming the argument."""

import pytest
import torch

from regmem.ops import (
    decoupled_gated_delta_rule,
    delta_product,
    delta_rule,
    delta_rule_multistep,
    gated_delta_rule,
    leaky_lms,
    longhorn,
    nlms,
)

B, T, H, K, V, n_h = 2, 10, 3, 4, 5, 2


def _good():
    return {
        "q": torch.randn(B, T, H, K), "k": torch.randn(B, T, H, K), "v": torch.randn(B, T, H, V),
        "g": -torch.rand(B, T, H), "beta": torch.rand(B, T, H),
    }


def _call(**override):
    args = {**_good(), **override}
    return gated_delta_rule(args.pop("q"), args.pop("k"), args.pop("v"), args.pop("g"), args.pop("beta"), **args)


BAD = {
    "q rank 3": ({"q": torch.randn(B, T, H)}, "q"),
    "k mismatched K": ({"k": torch.randn(B, T, H, K + 1)}, "k"),
    "v mismatched T": ({"v": torch.randn(B, T + 1, H, V)}, "v"),
    "v other dtype": ({"v": torch.randn(B, T, H, V, dtype=torch.float64)}, "v"),
    "g None": ({"g": None}, "g"),
    "g wrong shape": ({"g": -torch.rand(B, T, H, K + 1)}, "g"),
    "g positive": ({"g": torch.rand(B, T, H)}, "g"),
    "beta wrong shape": ({"beta": torch.rand(B, T, H, 1)}, "beta"),
    "beta negative": ({"beta": -torch.rand(B, T, H)}, "beta"),
    "beta integer": ({"beta": torch.ones(B, T, H, dtype=torch.int64)}, "beta"),
    "initial_state wrong shape": ({"initial_state": torch.zeros(B, H, V, K)}, "initial_state"),
    "cu_seqlens with B > 1": ({"cu_seqlens": torch.tensor([0, 4, T])}, "cu_seqlens"),
    "mode unknown": ({"mode": "parallel"}, "mode"),
    "chunk_size not a power of two": ({"chunk_size": 48}, "chunk_size"),
    "scale a tensor": ({"scale": torch.tensor(1.0)}, "scale"),
}


@pytest.mark.parametrize("case", list(BAD))
def test_bad_input_raises_value_error_naming_the_argument(case):
    override, name = BAD[case]
    with pytest.raises(ValueError, match=name):
        _call(**override)


def test_error_message_repeats_the_documented_shape():
    expected = r"beta must have shape \[B, T, H\] = \[2, 10, 3\], got shape \[2, 10, 4\]"
    with pytest.raises(ValueError, match=expected):
        _call(beta=torch.rand(B, T, H + 1))


def test_named_gated_form_needs_a_gate():
    x = _good()
    with pytest.raises(ValueError, match="use delta_rule"):
        gated_delta_rule.chunk(x["q"], x["k"], x["v"], None, x["beta"])


def test_delta_rule_and_initial_state_count_with_cu_seqlens():
    x = {n: t[:1] for n, t in _good().items()}
    with pytest.raises(ValueError, match="initial_state"):
        delta_rule(x["q"], x["k"], x["v"], x["beta"], cu_seqlens=torch.tensor([0, 3, T]),
                   initial_state=torch.zeros(1, H, K, V))


def test_parameterisation_arguments_are_validated():
    x = _good()
    q, k, v, beta = x["q"], x["k"], x["v"], x["beta"]
    with pytest.raises(ValueError, match="delta must be >= 0"):
        longhorn(q, k, v, -beta)
    with pytest.raises(ValueError, match="delta must have shape"):
        longhorn(q, k, v, beta[..., :1])
    with pytest.raises(ValueError, match="eps"):
        nlms(q, k, v, eps=-1.0)
    with pytest.raises(ValueError, match="lam must be >= 0"):
        leaky_lms(q, k, v, beta, -beta)
    with pytest.raises(ValueError, match=r"lam: beta \* lam must be < 1"):
        leaky_lms(q, k, v, 2 * torch.ones(B, T, H), 0.5 * torch.ones(B, T, H))
    with pytest.raises(ValueError, match="lam: lam must be < 1"):
        decoupled_gated_delta_rule(q, k, v, beta, torch.ones(B, T, H))
    with pytest.raises(ValueError, match="beta must be >= 0"):
        decoupled_gated_delta_rule(q, k, v, -beta, 0.5 * beta)


def test_delta_product_arguments_are_validated():
    x = _good()
    q = x["q"]
    k, v, beta = torch.randn(B, T, H, n_h, K), torch.randn(B, T, H, n_h, V), torch.rand(B, T, H, n_h)
    with pytest.raises(ValueError, match=r"k must have shape \[B, T, H, n_h, K\]"):
        delta_product(q, x["k"], v, beta)
    with pytest.raises(ValueError, match="v must have shape"):
        delta_product(q, k, torch.randn(B, T, H, n_h + 1, V), beta)
    with pytest.raises(ValueError, match=r"beta must have shape \[B, T, H, n_h\]"):
        delta_product(q, k, v, x["beta"])
    with pytest.raises(ValueError, match="g must have shape"):
        delta_product(q, k, v, beta, g=-torch.rand(B, T, H, K))  # only a scalar gate
    with pytest.raises(ValueError, match="cu_seqlens"):
        delta_product(q, k, v, beta, cu_seqlens=torch.tensor([0, T]))


def test_multistep_betas_are_validated():
    x = _good()
    q, k, v = x["q"], torch.nn.functional.normalize(x["k"], dim=-1), x["v"]
    with pytest.raises(ValueError, match="betas"):
        delta_rule_multistep(q, k, v, x["beta"])
    with pytest.raises(ValueError, match="betas must be >= 0"):
        delta_rule_multistep(q, k, v, -torch.rand(B, T, H, 2))
    with pytest.raises(ValueError, match="betas give a negative effective step"):
        delta_rule_multistep(q, k, v, 3 * torch.ones(B, T, H, 2))  # (1 - 3)^2 = 4 > 1
