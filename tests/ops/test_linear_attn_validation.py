"""Bad input fails fast with a ValueError naming the argument."""

import pytest
import torch

from regmem.ops import NormalizedState, gated_linear_attn, linear_attn

B, T, H, K, V = 2, 10, 3, 4, 5


def _good():
    return torch.randn(B, T, H, K), torch.randn(B, T, H, K), torch.randn(B, T, H, V), -torch.rand(B, T, H)


def _call(**override):
    q, k, v, g = _good()
    args = {"q": q, "k": k, "v": v, "g": g, **override}
    kwargs = {n: args.pop(n) for n in list(args) if n not in ("q", "k", "v", "g")}
    return gated_linear_attn(args["q"], args["k"], args["v"], args["g"], **kwargs)


BAD = {
    "q rank 3": ({"q": torch.randn(B, T, H)}, "q"),
    "k mismatched T": ({"k": torch.randn(B, T + 1, H, K)}, "k"),
    "k mismatched K": ({"k": torch.randn(B, T, H, K + 1)}, "k"),
    "v mismatched H": ({"v": torch.randn(B, T, H + 1, V)}, "v"),
    "v mismatched B": ({"v": torch.randn(B + 1, T, H, V)}, "v"),
    "q integer dtype": ({"q": torch.ones(B, T, H, K, dtype=torch.int64)}, "q"),
    "v other dtype": ({"v": torch.randn(B, T, H, V, dtype=torch.float64)}, "v"),
    "g wrong shape": ({"g": -torch.rand(B, T, H, K + 1)}, "g"),
    "g rank 2": ({"g": -torch.rand(B, T)}, "g"),
    "g positive": ({"g": torch.rand(B, T, H)}, "g"),
    "g integer": ({"g": torch.zeros(B, T, H, dtype=torch.int32)}, "g"),
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
    expected = r"k must have shape \[B, T, H, K\] = \[2, 10, 3, 4\], got shape \[2, 10, 3, 5\]"
    with pytest.raises(ValueError, match=expected):
        _call(k=torch.randn(B, T, H, K + 1))


@pytest.mark.parametrize("offsets", [[0, 4], [1, 10], [0, 6, 3, 10]])
def test_bad_cu_seqlens_raise(offsets):
    q, k, v, g = (x[:1] for x in _good())
    with pytest.raises(ValueError, match="cu_seqlens"):
        gated_linear_attn(q, k, v, g, cu_seqlens=torch.tensor(offsets))


def test_initial_state_count_must_match_the_number_of_sequences():
    q, k, v, g = (x[:1] for x in _good())
    with pytest.raises(ValueError, match="initial_state"):
        gated_linear_attn(q, k, v, g, cu_seqlens=torch.tensor([0, 3, 10]), initial_state=torch.zeros(1, H, K, V))


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device to put inputs on two devices")
def test_inputs_on_different_devices_raise():
    q, k, v, g = _good()
    with pytest.raises(ValueError, match="k is on"):
        gated_linear_attn(q, k.cuda(), v, g)


def test_meta_device_mismatch_raises_without_cuda():
    q, k, v, g = _good()
    with pytest.raises(ValueError, match="v is on meta"):
        gated_linear_attn(q, k, v.to("meta"), g)


def test_linear_attn_validation():
    q, k, v, _ = _good()
    with pytest.raises(ValueError, match="feature_map"):
        linear_attn(q, k, v, feature_map="softmax")
    with pytest.raises(ValueError, match="normalize"):
        linear_attn(q, k, v, normalize=True)
    with pytest.raises(ValueError, match="initial_state"):
        linear_attn(q, k, v, feature_map="relu", normalize=True, initial_state=torch.zeros(B, H, K, V))
    with pytest.raises(ValueError, match="initial_state.z"):
        bad = NormalizedState(torch.zeros(B, H, K, V), torch.zeros(B, H))
        linear_attn(q, k, v, feature_map="relu", normalize=True, initial_state=bad)
    with pytest.raises(ValueError, match="initial_state"):
        linear_attn(q, k, v, feature_map="taylor2", initial_state=torch.zeros(B, H, K, V))  # F = 1 + K + K^2


def test_backend_choice_is_validated():
    q, k, v, g = _good()
    with pytest.raises(ValueError, match="backend"):
        gated_linear_attn(q, k, v, g, backend="triton")
    with pytest.raises(ValueError, match="backend='fla' provides the chunk form only"):
        gated_linear_attn(q, k, v, g, backend="fla", mode="recurrent")
    with pytest.raises(ValueError, match="normalize"):
        linear_attn(q, k, v, feature_map="relu", normalize=True, backend="fla")
