"""MoE attention (eq. 25) and MoBA's gate (eqs. 26-27) of arXiv:2505.19488 (Sec. 2.1, "Sparsity"), checked against
a token-by-token transcription of the equations on small random instances, and their limits: one block, or every
block selected, is softmax attention. The mixer contract is tests/layers/test_mixers.py's."""

import pytest
import torch

from regmem.layers import MoBA, MoEAttention, SoftmaxAttention, build_mixer

D_MODEL, HEADS, HEAD_DIM, BLOCK, T = 8, 2, 4, 3, 11


def _projections(mixer, x):
    """q, k, v [T, H, D] of one row, as the mixer projects them (no rotary, no conv, no QK-norm)."""
    return (proj(x).unflatten(-1, (HEADS, HEAD_DIM)) for proj in (mixer.q_proj, mixer.k_proj, mixer.v_proj))


def _block_scores(q_t, k, t):
    """<q_t, mean-pool(k_i, i in E_e, i <= t)> for every block e up to t's (eq. 27, before the 1 / sqrt(D))."""
    return torch.stack([q_t @ k[e * BLOCK:min((e + 1) * BLOCK, t + 1)].mean(0) for e in range(t // BLOCK + 1)])


def _selected(scores, own, top_k):
    """Eq. 26 with MoBA's causal rule: the own block plus the top_k - 1 best earlier blocks."""
    if top_k is None:
        return list(range(own + 1))
    earlier = scores[:own].argsort(descending=True)[:top_k - 1].tolist()
    return sorted(earlier + [own])


def _direct(mixer, x, kind, top_k):
    """The equations, one query and head at a time: x [T, d_model] -> [T, d_model]."""
    q, k, v = _projections(mixer, x)
    scale, out = HEAD_DIM ** -0.5, torch.zeros(T, HEADS, HEAD_DIM, dtype=x.dtype)
    for t in range(T):
        for h in range(HEADS):
            own = t // BLOCK
            scores = _block_scores(q[t, h], k[:, h], t) * scale
            chosen = _selected(scores, own, top_k)
            logits = (k[:t + 1, h] @ q[t, h]) * scale  # [t + 1]
            if kind == "moba":  # softmax over the union of the selected blocks
                keys = [i for i in range(t + 1) if i // BLOCK in chosen]
                out[t, h] = torch.softmax(logits[keys], 0) @ v[keys, h]
            else:  # a softmax router mixing each block's softmax attention
                gates = torch.softmax(scores[chosen], 0)
                for g, e in zip(gates, chosen, strict=True):
                    keys = list(range(e * BLOCK, min((e + 1) * BLOCK, t + 1)))
                    out[t, h] += g * (torch.softmax(logits[keys], 0) @ v[keys, h])
    return mixer.o_proj(out.flatten(-2))


def _mixer(cls, **options):
    torch.manual_seed(0)
    return cls(D_MODEL, HEADS, head_dim=HEAD_DIM, rotary=False, block_size=BLOCK, **options).double()


@pytest.mark.parametrize("cls,kind,top_k", [(MoBA, "moba", 1), (MoBA, "moba", 2), (MoBA, "moba", 3),
                                            (MoEAttention, "moe", None), (MoEAttention, "moe", 2)],
                         ids=["moba-top1", "moba-top2", "moba-top3", "moe-dense", "moe-top2"])
@pytest.mark.parametrize("seed", range(3))
def test_mixer_is_the_equations(cls, kind, top_k, seed):
    mixer = _mixer(cls, top_k=top_k)
    x = torch.randn(2, T, D_MODEL, dtype=torch.float64, generator=torch.Generator().manual_seed(seed))
    with torch.no_grad():
        y, _ = mixer(x)
        for b in range(2):
            torch.testing.assert_close(y[b], _direct(mixer, x[b], kind, top_k), rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("build", [lambda: _mixer(MoBA, top_k=4), lambda: _mixer(MoEAttention),
                                   lambda: MoEAttention(D_MODEL, HEADS, head_dim=HEAD_DIM, block_size=T).double()],
                         ids=["moba-every-block", "moe-dense", "moe-one-block"])
def test_limits_are_softmax_attention(build):
    """MoBA selecting every block, and MoE attention with a single block, are softmax attention. The dense MoE
    router over several blocks is not (its experts normalise separately): checked to differ."""
    mixer = build()
    attention = SoftmaxAttention(D_MODEL, HEADS, head_dim=HEAD_DIM, rotary=mixer.rotary is not None).double()
    attention.load_state_dict(mixer.state_dict())
    x = torch.randn(2, T, D_MODEL, dtype=torch.float64)
    with torch.no_grad():
        difference = (mixer(x)[0] - attention(x)[0]).abs().max()
    several_experts = isinstance(mixer, MoEAttention) and mixer.block_size < T
    assert (difference > 1e-3) if several_experts else (difference < 1e-12), difference


@pytest.mark.parametrize("options,match", [({"block_size": 0}, "block_size"), ({"top_k": 0}, "top_k"),
                                           ({"block_size": 2.5}, "block_size")])
def test_bad_options_raise_value_error_naming_them(options, match):
    for name in ("moe_attn", "moba"):
        with pytest.raises(ValueError, match=match):
            build_mixer(name, D_MODEL, HEADS, **options)
    with pytest.raises(ValueError, match="top_k"):
        MoBA(D_MODEL, HEADS, top_k=None)


@pytest.mark.parametrize("name", ["moe_attn", "moba"])
def test_at_the_quick_preset_a_block_attention_is_not_attention(name):
    """The presets give blocks of T / 4 and attention's short conv: at quick (T 64) the layer differs from itself
    with one block (which is softmax attention, `test_limits_are_softmax_attention`)."""
    from regmem.lab.experiments.presets import PRESETS  # the preset is what is checked; layers do not import it

    quick = PRESETS["quick"]
    options = quick.mixer_kwargs[name]
    assert options["short_conv"] == quick.mixer_kwargs["attn"]["short_conv"]
    torch.manual_seed(0)
    layer = build_mixer(name, quick.d_model, quick.n_heads, **options).double()
    x = torch.randn(2, quick.task["seq_len"], quick.d_model, dtype=torch.float64)
    blocked, _ = layer(x)
    layer.block_size = quick.task["seq_len"]  # one block: attention
    whole, _ = layer(x)
    assert options["block_size"] * 4 == quick.task["seq_len"]
    assert (blocked - whole).abs().max() > 1e-3


@pytest.mark.parametrize("cls,options", [(MoBA, {"top_k": 1}), (MoBA, {"top_k": 2}), (MoBA, {"top_k": 7}),
                                         (MoBA, {"top_k": 3, "n_kv_heads": 1, "qk_norm": True}),
                                         (MoEAttention, {}), (MoEAttention, {"top_k": 2, "qk_norm": True}),
                                         (MoEAttention, {"n_kv_heads": 1, "head_norm": True})],
                         ids=["moba-top1", "moba-top2", "moba-top-past-blocks", "moba-gqa-qknorm", "moe-dense",
                              "moe-top2-qknorm", "moe-gqa-headnorm"])
@pytest.mark.parametrize("length", [2, T, 4 * BLOCK])
def test_training_forward_is_the_general_one(cls, options, length):
    """Without cache or padding the layer reads blocks by reshaping (`aligned_attend`; MoE attention as a mixture
    of per-block SDPA reads); an all-ones mask sends the same input through `routing_bias`, the form that handles
    any padding and cache. Outputs and gradients agree: one block shorter than block_size (T 2), a last block cut
    short (T 11) and none (T 12); top_k of 1 and past the number of blocks."""
    torch.manual_seed(0)
    layer = cls(D_MODEL, HEADS, head_dim=HEAD_DIM, block_size=BLOCK, short_conv=2, **options).double()
    x = torch.randn(2, length, D_MODEL, dtype=torch.float64, requires_grad=True)
    grads = []
    for mask in (None, torch.ones(2, length, dtype=torch.bool)):
        y, _ = layer(x, attention_mask=mask)
        grads.append(torch.autograd.grad((y * torch.linspace(-1, 1, y.numel()).view_as(y)).sum(),
                                         [x, *layer.parameters()]))
        grads[-1] = (y, *grads[-1])
    for aligned, general in zip(*grads, strict=True):
        torch.testing.assert_close(aligned, general, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("cls", [MoBA, MoEAttention], ids=["moba", "moe"])
def test_both_forms_train_under_bfloat16_autocast(cls):
    """The trainer's `bf16` runs the model under torch.autocast: the gate stays in float32 (its scores, top-k and
    normalisers), attention's reads run in bfloat16, and both forms agree with the float32 layer to bfloat16's
    precision, their gradients finite."""
    torch.manual_seed(0)
    layer = cls(D_MODEL, HEADS, head_dim=HEAD_DIM, block_size=BLOCK, short_conv=2)
    x = torch.randn(2, 4 * BLOCK, D_MODEL, requires_grad=True)
    exact, _ = layer(x)
    for mask in (None, torch.ones(2, 4 * BLOCK, dtype=torch.bool)):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            y, _ = layer(x, attention_mask=mask)
        torch.testing.assert_close(y.float(), exact, atol=3e-2, rtol=3e-2)
        (grad,) = torch.autograd.grad(y.float().square().sum(), [x])
        assert torch.isfinite(grad).all()
