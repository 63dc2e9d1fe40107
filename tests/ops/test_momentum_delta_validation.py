"""Bad input to momentum_delta_rule fails fast with a ValueError naming the argument."""

import pytest
import torch

from regmem.ops import MomentumState, momentum_delta_rule

B, T, H, K, V = 2, 10, 3, 4, 5


def _good():
    return {
        "q": torch.randn(B, T, H, K), "k": torch.randn(B, T, H, K), "v": torch.randn(B, T, H, V),
        "g": -torch.rand(B, T, H), "beta": torch.rand(B, T, H), "log_mu": -torch.rand(B, T, H),
    }


def _call(**override):
    args = {**_good(), **override}
    positional = [args.pop(n) for n in ("q", "k", "v", "g", "beta", "log_mu")]
    return momentum_delta_rule(*positional, **args)


BAD = {
    "q rank 3": ({"q": torch.randn(B, T, H)}, "q"),
    "k mismatched K": ({"k": torch.randn(B, T, H, K + 1)}, "k"),
    "v mismatched T": ({"v": torch.randn(B, T + 1, H, V)}, "v"),
    "g diagonal": ({"g": -torch.rand(B, T, H, K)}, "g"),
    "g positive": ({"g": torch.rand(B, T, H)}, "g"),
    "log_mu wrong shape": ({"log_mu": -torch.rand(B, T, H + 1)}, "log_mu"),
    "log_mu positive": ({"log_mu": torch.rand(B, T, H)}, "log_mu"),
    "beta rank 4": ({"beta": torch.rand(B, T, H, 1)}, "beta"),
    "beta negative": ({"beta": -torch.rand(B, T, H)}, "beta"),
    "beta integer": ({"beta": torch.ones(B, T, H, dtype=torch.int64)}, "beta"),
    "initial_state a tensor": ({"initial_state": torch.zeros(B, H, K, V)}, "initial_state"),
    "initial_state.S wrong shape": ({"initial_state": MomentumState(torch.zeros(B, H, V, K), torch.zeros(B, H, K, V))},
                                    "initial_state.S"),
    "initial_state.P wrong shape": ({"initial_state": MomentumState(torch.zeros(B, H, K, V), torch.zeros(B, H, K))},
                                    "initial_state.P"),
    "cu_seqlens with B > 1": ({"cu_seqlens": torch.tensor([0, 4, T])}, "cu_seqlens"),
    "mode unknown": ({"mode": "parallel"}, "mode"),
    "chunk_size not a power of two": ({"chunk_size": 48}, "chunk_size"),
    "scale a tensor": ({"scale": torch.tensor(1.0)}, "scale"),
    "beta on meta": ({"beta": torch.rand(B, T, H, device="meta")}, "beta"),
}


@pytest.mark.parametrize("case", list(BAD))
def test_bad_input_raises_value_error_naming_the_argument(case):
    override, name = BAD[case]
    with pytest.raises(ValueError, match=name):
        _call(**override)


def test_error_message_repeats_the_documented_shape():
    expected = r"initial_state.P must have shape \[N, H, K, V\] = \[2, 3, 4, 5\], got shape \[2, 3, 4, 4\]"
    with pytest.raises(ValueError, match=expected):
        _call(initial_state=MomentumState(torch.zeros(B, H, K, V), torch.zeros(B, H, K, K)))


def test_initial_state_count_must_match_the_number_of_sequences():
    args = {n: x[:1] for n, x in _good().items()}
    state = MomentumState(torch.zeros(1, H, K, V), torch.zeros(1, H, K, V))
    with pytest.raises(ValueError, match="initial_state.S"):
        _call(**args, cu_seqlens=torch.tensor([0, 3, T]), initial_state=state)


def test_the_old_argument_name_log_eta_still_works_for_one_release_with_a_warning():
    """`log_eta` was renamed `log_mu` (regmem keeps eta for step sizes, mu for momentum retentions; CHANGELOG.md), in
    momentum_delta_rule and ttt: the old name gives the same result with a DeprecationWarning; both is a ValueError."""
    from regmem.ops import ttt

    gen = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, 6, 2, 3, generator=gen, dtype=torch.float64) for _ in range(3))
    g, beta = -0.1 * torch.rand(1, 6, 2, generator=gen, dtype=torch.float64), torch.rand(1, 6, 2, dtype=torch.float64)
    log_mu = -0.5 * torch.rand(1, 6, 2, generator=gen, dtype=torch.float64)
    for op, args in ((momentum_delta_rule, (q, k, v, g, beta)), (ttt, (q, k, v, beta, g))):
        expected, _ = op(*args, log_mu=log_mu)
        with pytest.warns(DeprecationWarning, match="log_eta= is renamed log_mu="):
            o, _ = op(*args, log_eta=log_mu)
        torch.testing.assert_close(o, expected, rtol=0, atol=0)
        with pytest.raises(ValueError, match="give log_mu only"):
            op(*args, log_mu=log_mu, log_eta=log_mu)
    with pytest.raises(ValueError, match="log_mu .* is required"):
        momentum_delta_rule(q, k, v, g, beta)
