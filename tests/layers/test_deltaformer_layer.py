"""The DeltaFormer layer (arXiv:2505.19488, Sec. 2.2, Listing 2) beyond the mixer contract of test_mixers.py:
with beta = 0 it is grouped-query softmax attention; Listing 2's zero-filled softmax (quirk a) is reproduced
exactly and differs from the normalised kernel of eq. 94 by length-dependent denominators; bad options raise."""

import pytest
import torch

from regmem.layers import DeltaFormer, SoftmaxAttention


def _x(B=2, T=11, d=12, seed=0):
    return torch.randn(B, T, d, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)


def test_zero_beta_is_grouped_query_softmax_attention():
    torch.manual_seed(0)
    layer = DeltaFormer(12, 4, n_kv_heads=2, rotary=False).double()
    attn = SoftmaxAttention(12, 4, n_kv_heads=2, rotary=False).double()
    for name in ("q_proj", "k_proj", "v_proj", "o_proj"):
        getattr(attn, name).load_state_dict(getattr(layer, name).state_dict())
    with torch.no_grad():
        layer.beta.zero_()
    torch.testing.assert_close(layer(_x())[0], attn(_x())[0], rtol=1e-12, atol=1e-12)


def _rms(x, gain, eps):
    return gain * x / (x.pow(2).mean(-1, keepdim=True) + eps).sqrt()


def test_rms_normalizer_is_app_d2s_formula():
    """normalizer="rms" (App. D.2): u_t = alpha v_t - beta RMSNorm_1(sum_j a_j sum_{i<t} exp(w_t^j.k_i/sqrt(D)) u_i)
    and o_t = RMSNorm_2(sum_{i<=t} exp(q_t.k_i/sqrt(D)) u_i), transcribed token by token with unnormalised exp (the
    layer's row scalings vanish at eps = 1e-30). Two erase vectors per head (eq. 111), random gains and gates."""
    torch.manual_seed(2)
    layer = DeltaFormer(12, 4, n_kv_heads=2, rotary=False, normalizer="rms", norm_eps=1e-30).double()
    with torch.no_grad():
        for p in (layer.erase_norm.weight, layer.read_norm.weight, layer.alpha, layer.beta, layer.erase_weights):
            p.normal_()
    x = _x(T=9)
    y, _ = layer(x)
    expected = _literal_rms_layer(layer, x, lambda scores: 1e-30, lambda scores: 1e-30)
    torch.testing.assert_close(y, expected, rtol=1e-9, atol=1e-11)
    layer.erase_norm, layer.read_norm = None, None  # the control: the Z of eqs. 94-95 give another function
    assert (layer(x)[0] - y).abs().max() > 1e-3


def _literal_rms_layer(layer, x, erase_eps, read_eps):
    """App. D.2's formula token by token (as above) with eps a function of the row: erase_eps(scores of the row's
    erase sum, [G, t]) and read_eps(scores of the row's read, [t + 1])."""
    q, k, v, w, _ = layer._project(x, None, None)
    B, T, D = x.shape[0], x.shape[1], 3
    w = w.reshape(B, T, 2, 2, D)
    u = torch.zeros(B, T, 2, D, dtype=torch.float64)
    o = torch.zeros(B, T, 4, D, dtype=torch.float64)
    with torch.no_grad():
        for b in range(B):
            for t in range(T):
                for h in range(2):
                    e = torch.zeros(D, dtype=torch.float64)
                    if t:
                        scores = torch.stack([torch.stack([w[b, t, h, j] @ k[b, i, h] / D ** 0.5 for i in range(t)])
                                              for j in range(2)])  # [G, t]
                        e = sum(layer.erase_weights[h, j] * torch.exp(scores[j, i]) * u[b, i, h]
                                for j in range(2) for i in range(t))
                    eps = erase_eps(scores) if t else layer.erase_norm.eps
                    u[b, t, h] = layer.alpha[h] * v[b, t, h] - layer.beta[h] * _rms(e, layer.erase_norm.weight, eps)
                for hq in range(4):
                    scores = torch.stack([q[b, t, hq] @ k[b, i, hq // 2] / D ** 0.5 for i in range(t + 1)])
                    r = sum(torch.exp(scores[i]) * u[b, i, hq // 2] for i in range(t + 1))
                    o[b, t, hq] = _rms(r, layer.read_norm.weight, read_eps(scores))
        return layer.o_proj(o.flatten(-2))


def test_rms_normalizer_eps_is_scaled_by_each_rows_normaliser():
    """The layer normalises each sum by a positive number of its row before the RMSNorm (the erase sum by its largest
    exp, the read by its softmax denominator Z), so its eps acts on the scaled sum: at eps 1e-5 it is App. D.2's
    literal formula with eps x (largest exp)^2 in the erase pass and eps x Z^2 in the read, to round-off, and not the
    formula with eps itself (the documented meaning of norm_eps; identical as eps -> 0, as above)."""
    torch.manual_seed(2)
    eps = 1e-5
    layer = DeltaFormer(12, 4, n_kv_heads=2, rotary=False, normalizer="rms", norm_eps=eps).double()
    with torch.no_grad():
        for p in (layer.erase_norm.weight, layer.read_norm.weight, layer.alpha, layer.beta, layer.erase_weights):
            p.normal_()
    x = _x(T=9)
    y, _ = layer(x)
    scaled = _literal_rms_layer(layer, x, lambda s: eps * torch.exp(2 * s.max()),
                                lambda s: eps * torch.exp(s).sum() ** 2)
    torch.testing.assert_close(y, scaled, rtol=1e-10, atol=1e-12)
    literal = _literal_rms_layer(layer, x, lambda s: eps, lambda s: eps)
    assert (y - literal).abs().max() > 1e-5


def test_listing2_softmax_uses_zero_filled_denominators():
    """Row t of the listing's kappa_1 divides by sum_{i<t} exp(s_ti) + (T - t): the masked scores count as exp(0)."""
    torch.manual_seed(1)
    layer = DeltaFormer(12, 4, n_kv_heads=1, rotary=False, listing2_softmax=True).double()
    x = _x(T=7)
    y, state = layer(x)
    assert state is None
    q, k, v, w, _ = layer._project(x, None, None)
    w = w.reshape(2, 7, 1, 4, 3)
    scores = torch.einsum("bthgd,bihd->bhgti", w, k) / 3 ** 0.5
    strict = torch.ones(7, 7, dtype=torch.bool).tril(-1)
    spurious = 7 - torch.arange(7, dtype=torch.float64)  # positions t..T-1 of row t
    numerator = scores.exp() * strict
    A = (numerator / (numerator.sum(-1, keepdim=True) + spurious[:, None])).mean(2)  # a_j = 1/G
    u = torch.linalg.solve_triangular(A, v.transpose(1, 2), upper=False, unitriangular=True)
    o = torch.softmax((torch.einsum("bthd,bihd->bhti", q, k.repeat_interleave(4, 2)) / 3 ** 0.5)
                      .masked_fill(~torch.ones(7, 7, dtype=torch.bool).tril(), float("-inf")), -1)
    expected = layer.o_proj((o @ u.repeat_interleave(4, 1)).transpose(1, 2).flatten(-2))
    torch.testing.assert_close(y, expected, rtol=1e-12, atol=1e-12)
    # the spurious terms depend on the call's length: a prefix's output changes with T (so it cannot decode) ...
    assert (layer(x[:, :4])[0] - y[:, :4]).abs().max() > 1e-6
    # ... while the normalised kernel (eq. 94) is causal in the usual sense
    layer.listing2_softmax = False
    torch.testing.assert_close(layer(x[:, :4])[0], layer(x)[0][:, :4], rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize(("options", "argument"), [
    ({"erase_kernel": "cosine"}, "erase_kernel"),
    ({"read_kernel": "tanh"}, "read_kernel"),
    ({"beta": "vector"}, "beta"),
    ({"n_kv_heads": 3}, "n_kv_heads"),
    ({"erase_kernel": "exp", "listing2_softmax": True}, "listing2_softmax"),
    ({"normalizer": "layer"}, "normalizer"),
    ({"normalizer": "rms", "erase_kernel": "exp"}, "erase_kernel and read_kernel"),
    ({"normalizer": "rms", "listing2_softmax": True}, "listing2_softmax"),
])
def test_bad_options_raise_value_error_naming_them(options, argument):
    with pytest.raises(ValueError, match=argument):
        DeltaFormer(12, 4, **options)


def test_listing2_path_refuses_a_state_or_padding():
    layer = DeltaFormer(12, 4, rotary=False, listing2_softmax=True)
    with pytest.raises(ValueError, match="listing2_softmax"):
        layer(_x().float(), attention_mask=torch.ones(2, 11))
