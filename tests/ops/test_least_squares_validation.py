"""Bad input to least_squares fails fast with a ValueError naming the argument."""

import pytest
import torch

from regmem.ops.regression import LeastSquaresState, least_squares

B, T, H, K, V = 2, 10, 3, 4, 5


def _call(**override):
    args = {"q": torch.randn(B, T, H, K), "k": torch.randn(B, T, H, K), "v": torch.randn(B, T, H, V), **override}
    positional = [args.pop(n) for n in ("q", "k", "v")]
    return least_squares(*positional, **args)


def _state(R_shape=(B, H, K, K), S_shape=(B, H, K, V)):
    R = torch.eye(K).expand(B, H, K, K) if R_shape == (B, H, K, K) else torch.zeros(R_shape)
    return LeastSquaresState(R.clone(), torch.zeros(S_shape))


BAD = {
    "q rank 3": ({"q": torch.randn(B, T, H)}, "q"),
    "k mismatched K": ({"k": torch.randn(B, T, H, K + 1)}, "k"),
    "v mismatched H": ({"v": torch.randn(B, T, H + 1, V)}, "v"),
    "v other dtype": ({"v": torch.randn(B, T, H, V, dtype=torch.float64)}, "v"),
    "g diagonal": ({"g": -torch.rand(B, T, H, K)}, "g"),
    "g mismatched T": ({"g": -torch.rand(B, T + 1, H)}, "g"),
    "g positive": ({"g": torch.rand(B, T, H) + 0.1}, "g"),
    "g integer": ({"g": torch.zeros(B, T, H, dtype=torch.int64)}, "g"),
    "g on meta": ({"g": torch.zeros(B, T, H, device="meta")}, "g"),
    "ridge negative": ({"ridge": -0.1}, "ridge"),
    "ridge infinite": ({"ridge": float("inf")}, "ridge"),
    "ridge nan": ({"ridge": float("nan")}, "ridge"),
    "ridge a bool": ({"ridge": True}, "ridge"),
    "ridge a string": ({"ridge": "1.0"}, "ridge"),
    "ridge wrong shape": ({"ridge": torch.ones(H + 1)}, "ridge"),
    "ridge [H, F] wrong F": ({"ridge": torch.ones(H, K + 1)}, "ridge"),
    "ridge [B, H]": ({"ridge": torch.ones(B, H)}, "ridge"),
    "ridge tensor negative": ({"ridge": -torch.ones(H)}, "ridge"),
    "ridge integer tensor": ({"ridge": torch.ones(H, dtype=torch.int64)}, "ridge"),
    "ridge on meta": ({"ridge": torch.ones(H, device="meta")}, "ridge"),
    "ridge zero without initial_state": ({"ridge": 0.0}, "ridge"),
    "ridge zero tensor without initial_state": ({"ridge": torch.zeros(H, K)}, "ridge"),
    "initial_state a tensor": ({"initial_state": torch.zeros(B, H, K, V)}, "initial_state"),
    "initial_state a tuple": ({"initial_state": (torch.zeros(B, H, K, K), torch.zeros(B, H, K, V))}, "initial_state"),
    "initial_state.R wrong shape": ({"initial_state": _state(R_shape=(B, H, K, V))}, "initial_state.R"),
    "initial_state.S wrong shape": ({"initial_state": _state(S_shape=(B, H, V, K))}, "initial_state.S"),
    "initial_state.R on meta": (
        {"initial_state": LeastSquaresState(torch.zeros(B, H, K, K, device="meta"), torch.zeros(B, H, K, V))}, "R"),
    "feature_map unknown": ({"feature_map": "softmax"}, "feature_map"),
    "feature_map changes the batch": ({"feature_map": lambda x: x[:1]}, "feature_map"),
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


def test_zero_ridge_message_says_how_to_fix_it():
    with pytest.raises(ValueError, match=r"pass ridge > 0 or an initial_state with positive-definite R"):
        _call(ridge=0.0)


def test_zero_ridge_with_an_initial_state_is_accepted():
    o, _ = _call(ridge=0.0, initial_state=_state())
    assert torch.isfinite(o).all()


def test_error_message_repeats_the_documented_shape():
    expected = r"initial_state.S must have shape \[N, H, F, V\] = \[2, 3, 4, 5\], got shape \[2, 3, 5, 4\]"
    with pytest.raises(ValueError, match=expected):
        _call(initial_state=_state(S_shape=(B, H, V, K)))
