"""ForgettingAttention (FoX) and the per-head output norms of the attention layers, against their definitions in
Zhong et al., arXiv:2505.19488, Sec. 2.1 (eqs. 18 and 30-31), in float64 on tiny inputs.

- with forget gates of one, FoX is softmax attention (same weights, with and without padding);
- the SDPA path equals a literal transcription of eqs. 30-31 with the exp kernel and FoX's normaliser
  (an explicit masked T x T matrix of prod_j alpha_j exp(q.k / sqrt(D))), outputs and every parameter's gradient;
- decoding in chunks of several tokens after a prefill equals one forward, and the cache holds each key's decay;
- softmax attention + per-head RMSNorm equals un-normalised exp attention + the same norm (up to its eps), and
  LinearAttention without output gate is linear attention + per-head RMSNorm: the two arms of the paper's
  multi-head experiment (Sec. 3.1);
- the bilinear gate (W_G x_i)^T x_t proposed after eq. 31, and `gate="bilinear"` against eq. 30 with that gate.

The mixer contract (prefill + steps, padding, state size, gradients) runs on "fox" in test_mixers.py.
"""

import math

import pytest
import torch
import torch.nn.functional as F

from helpers import one_intra_op_thread  # noqa: F401 -- the fixture, used by pytestmark
from regmem.layers import LinearAttention, SoftmaxAttention
from regmem.layers.fox import ForgettingAttention
from regmem.layers.gates import BilinearGate

D_MODEL, HEADS = 16, 2


pytestmark = pytest.mark.usefixtures("one_intra_op_thread")


def _x(B: int, T: int, seed: int = 1) -> torch.Tensor:
    return torch.randn(B, T, D_MODEL, dtype=torch.float64, generator=torch.Generator().manual_seed(seed))


def _close(actual, expected, what):
    torch.testing.assert_close(actual, expected, rtol=1e-10, atol=1e-12, msg=lambda m: f"{what}: {m}")


def _fox(**kwargs) -> ForgettingAttention:
    torch.manual_seed(0)
    return ForgettingAttention(D_MODEL, HEADS, **kwargs).double()


OPTIONS = {"plain": {}, "rotary-qknorm-gqa-conv-headnorm": {"rotary": True, "qk_norm": True, "n_kv_heads": 1,
                                                             "short_conv": 3, "head_norm": True}}


@pytest.mark.parametrize("options", list(OPTIONS.values()), ids=list(OPTIONS))
def test_forget_gates_of_one_give_softmax_attention(options):
    fox = _fox(gate_bias_init=60.0, **options)  # log sigmoid(60) ~ -1e-26: alpha = 1 in float64
    attn = SoftmaxAttention(D_MODEL, HEADS, **{"rotary": False, **options}).double()
    missing, unexpected = attn.load_state_dict(fox.state_dict(), strict=False)
    assert not missing and set(unexpected) == {"f_proj.weight", "f_bias"}
    x, mask = _x(2, 11), torch.ones(2, 11, dtype=torch.bool)
    mask[1, :4] = False  # left padding in row 1
    with torch.no_grad():
        _close(fox(x)[0], attn(x)[0], "no padding")
        _close(fox(x, attention_mask=mask)[0], attn(x, attention_mask=mask)[0], "padded")
        gated = _fox(**options)  # the default gate (alpha ~ 1/2) forgets: the control that this test can fail
        gated.load_state_dict(fox.state_dict() | {"f_bias": torch.zeros(HEADS, dtype=torch.float64)})
        assert (gated(x)[0] - attn(x)[0]).abs().max() > 1e-2


def _reference(fox: ForgettingAttention, x: torch.Tensor) -> torch.Tensor:
    """Eqs. 30-31 with the exp kernel, normalised (FoX): o_t = sum_i w_ti v_i / sum_i w_ti with
    w_ti = prod_{j=i+1}^{t} alpha_j exp(q_t.k_i / sqrt(D)) for i <= t; written out as a T x T matrix."""
    B, T, _ = x.shape
    D = fox.head_dim
    q = fox.q_proj(x).unflatten(-1, (HEADS, D))  # [B, T, H, D]
    k = fox.k_proj(x).unflatten(-1, (-1, D)).repeat_interleave(HEADS // fox.n_kv_heads, dim=2)  # [B, T, H, D]
    v = fox.v_proj(x).unflatten(-1, (-1, D)).repeat_interleave(HEADS // fox.n_kv_heads, dim=2)  # [B, T, H, D]
    alpha = torch.sigmoid(fox.f_proj(x) + fox.f_bias)  # [B, T, H]
    rows = []
    for t in range(T):
        gates = torch.stack([alpha[:, i + 1:t + 1].prod(dim=1) for i in range(t + 1)], dim=1)  # [B, t+1, H]
        w = gates * torch.exp(torch.einsum("bhd,bihd->bih", q[:, t], k[:, :t + 1]) / math.sqrt(D))  # [B, t+1, H]
        rows.append(torch.einsum("bih,bihd->bhd", w, v[:, :t + 1]) / w.sum(dim=1).unsqueeze(-1))  # [B, H, D]
    return fox.o_proj(torch.stack(rows, dim=1).flatten(-2))  # [B, T, d_model]


@pytest.mark.parametrize("n_kv_heads", [2, 1], ids=["mha", "gqa"])
def test_sdpa_path_matches_the_masked_matrix_reference_with_gradients(n_kv_heads):
    fox = _fox(n_kv_heads=n_kv_heads, gate_bias_init=1.0)
    x = _x(2, 11)
    cotangent = torch.randn(2, 11, D_MODEL, dtype=torch.float64, generator=torch.Generator().manual_seed(2))
    y, _ = fox(x)
    grads = torch.autograd.grad((y * cotangent).sum(), list(fox.parameters()))
    y_ref = _reference(fox, x)
    grads_ref = torch.autograd.grad((y_ref * cotangent).sum(), list(fox.parameters()))
    _close(y, y_ref, "output")
    for (name, _), g, g_ref in zip(fox.named_parameters(), grads, grads_ref, strict=True):
        _close(g, g_ref, f"grad of {name}")


def test_decoding_in_multi_token_chunks_equals_one_forward_and_caches_each_keys_decay():
    fox = _fox(gate_bias_init=1.0, rotary=True)
    x = _x(2, 13)
    with torch.no_grad():
        y_full, _ = fox(x)
        pieces, state = [], None
        for start, end in ((0, 5), (5, 9), (9, 10), (10, 13)):  # prefill, 4 tokens, 1 token, 3 tokens
            y, state = fox(x[:, start:end], state)
            pieces.append(y)
        _close(torch.cat(pieces, dim=1), y_full, "chunked decoding")
        log_alpha = fox.log_forget(x)  # [B, T, H]
        expected = torch.stack([log_alpha[:, i + 1:].sum(dim=1) for i in range(13)], dim=1)  # [B, T, H]
        _close(state.kv.log_decay, expected, "cached log decay")


def _causal(scores: torch.Tensor) -> torch.Tensor:
    """Zeroes entries with key after query: scores [B, H, T, T]."""
    T = scores.shape[-1]
    return scores.masked_fill(~torch.ones(T, T, dtype=torch.bool).tril(), 0.0)


def _heads(proj, x, head_dim):
    return proj(x).unflatten(-1, (-1, head_dim)).transpose(1, 2)  # [B, H, T, D]


def test_softmax_with_head_norm_equals_unnormalised_exp_with_head_norm():
    """Eq. 18's denominator is a positive scalar per (query, head), which RMSNorm divides out (up to its eps)."""
    torch.manual_seed(0)
    # eps 1e-24: the identity holds up to the norm's eps (rms^2 + eps vs rms^2 + eps / Z^2), here far below 1e-10
    attn = SoftmaxAttention(D_MODEL, HEADS, rotary=False, head_norm=True, norm_eps=1e-24).double()
    with torch.no_grad():
        attn.head_norm.weight.normal_()
        x = _x(2, 11)
        q, k, v = (_heads(p, x, attn.head_dim) for p in (attn.q_proj, attn.k_proj, attn.v_proj))
        unnormalised = _causal(torch.exp(q @ k.transpose(-1, -2) / math.sqrt(attn.head_dim))) @ v  # [B, H, T, D]
        expected = attn.o_proj(attn.head_norm(unnormalised.transpose(1, 2)).flatten(-2))
        _close(attn(x)[0], expected, "softmax + head norm")
        attn.head_norm = None  # the control: without the norm the denominator matters
        without = attn.o_proj(unnormalised.transpose(1, 2).flatten(-2))
        assert (attn(x)[0] - without).abs().max() > 1e-1


def test_linear_attention_without_output_gate_is_linear_kernel_with_head_norm():
    """The linear arm of the multi-head experiment: o_t = sum_{i<=t} (q_t.k_i) v_i, then per-head RMSNorm."""
    torch.manual_seed(0)
    linear = LinearAttention(D_MODEL, HEADS, short_conv=0, output_gate=False, norm_eps=1e-24).double()
    with torch.no_grad():
        linear.o_norm.weight.normal_()
        x = _x(2, 11)
        q, k, v = (_heads(p, x, linear.key_dim) for p in (linear.q_proj, linear.k_proj, linear.v_proj))
        o = _causal(q @ k.transpose(-1, -2)) @ v  # [B, H, T, V]
        expected = linear.o_proj(linear.o_norm(o.transpose(1, 2)).flatten(-2))
        _close(linear(x)[0], expected, "linear attention + head norm")


def test_forget_gate_is_logsigmoid_and_padding_keeps_everything():
    fox = _fox(gate_bias_init=0.5)
    x, mask = _x(1, 6), torch.tensor([[False, False, True, True, True, True]])
    with torch.no_grad():
        log_alpha = fox.log_forget(x, mask)
        _close(log_alpha[:, 2:], F.logsigmoid(fox.f_proj(x[:, 2:]) + fox.f_bias), "real tokens")
    assert torch.equal(log_alpha[:, :2], torch.zeros(1, 2, HEADS, dtype=torch.float64))


def test_bilinear_gate_is_the_papers_formula():
    """g_i(x_{i:t}) = (W_G x_i)^T x_t, per head (arXiv:2505.19488, Sec. 2.1, the gate proposed after eq. 31)."""
    torch.manual_seed(3)
    gate = BilinearGate(D_MODEL, HEADS).double()
    xq, xk = _x(2, 5, seed=4), _x(2, 7, seed=5)
    g = gate(xq, xk)
    assert g.shape == (2, HEADS, 5, 7)
    for b, h, t, s in [(0, 0, 0, 0), (1, 1, 4, 6), (0, 1, 2, 5), (1, 0, 3, 1)]:
        _close(g[b, h, t, s], (gate.weight[h] @ xk[b, s]) @ xq[b, t], f"g[{b}, {h}, {t}, {s}]")


def test_bilinear_gated_attention_is_eq30_with_the_bilinear_gate():
    """gate="bilinear": o_t = sum_{i<=t} g_ti exp(q_t.k_i / sqrt(D)) v_i / sum_{i<=t} exp(q_t.k_i / sqrt(D)), by a
    loop over queries, heads and keys; and the forget-gate parameters do not exist in this mode."""
    fox = _fox(gate="bilinear")
    assert not hasattr(fox, "f_proj") and not hasattr(fox, "f_bias")
    x, D = _x(2, 9), D_MODEL // HEADS
    with torch.no_grad():
        y, state = fox(x)
        q, k, v = (proj(x).unflatten(-1, (HEADS, D)) for proj in (fox.q_proj, fox.k_proj, fox.v_proj))
        o = torch.zeros(2, 9, HEADS, D, dtype=torch.float64)
        for b in range(2):
            for t in range(9):
                for h in range(HEADS):
                    kernel = [math.exp(q[b, t, h] @ k[b, i, h] / math.sqrt(D)) for i in range(t + 1)]
                    gates = [(fox.bilinear.weight[h] @ x[b, i]) @ x[b, t] for i in range(t + 1)]
                    o[b, t, h] = sum(g * c * v[b, i, h] for i, (g, c) in enumerate(zip(gates, kernel, strict=True)))
                    o[b, t, h] /= sum(kernel)
        _close(y, fox.o_proj(o.flatten(-2)), "bilinear-gated attention")
    _close(state.kv.x, x, "the cache keeps every token's input")


def test_bilinear_gate_options_are_checked():
    with pytest.raises(ValueError, match="gate must be"):
        ForgettingAttention(D_MODEL, HEADS, gate="sigmoid")
    with pytest.raises(ValueError, match="gate_bias_init"):
        ForgettingAttention(D_MODEL, HEADS, gate="bilinear", gate_bias_init=1.0)
