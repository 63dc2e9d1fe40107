"""Levels made visible (Nested Learning, arXiv:2512.24695, Definition 2) and Linear Attention++ (Sec. 3.2, Fig. 3):
what `describe_levels` reports for known models, and the AdaTransformer block reducing to its MLP."""

import pytest
import torch

from regmem.models import LM, LMConfig
from regmem.nested import CMSConfig, LinearAttentionPP, describe_levels, format_levels


def _lm(**kwargs):
    torch.manual_seed(0)
    return LM(LMConfig(vocab_size=16, d_model=16, n_layers=1, n_heads=2, **kwargs))


def test_adams_two_moments_are_one_level_and_independent():
    model = _lm(mixer="linear")
    rows = describe_levels(model, torch.optim.Adam(model.parameters()))
    moments = [r for r in rows if r.component == "Adam"]
    assert [r.tensors.split()[0] for r in moments] == ["exp_avg", "exp_avg_sq"]
    assert moments[0].level == moments[1].level == rows[-1].level  # the same frequency as the weights they move
    assert moments[1].order.startswith("=^f")  # independent of the first moment
    assert rows[-1].component == "model" and rows[-1].order.startswith("≻")  # the step needs both moments


def test_levels_are_sorted_by_frequency_with_the_cms_chunk_sizes():
    model = _lm(mixer="hope", mixer_kwargs={"hope": {"mini_batch": 4, "cms_chunk_sizes": (4, 8)}},
                ffn=CMSConfig(chunk_sizes=(2, 32)))
    rows = describe_levels(model)
    frequencies = [r.frequency for r in rows]
    assert frequencies[0] == "every 2 tokens" and frequencies[-1] == "every outer step"
    assert [r.level for r in rows] == sorted(r.level for r in rows)
    by_frequency = {}
    for r in rows:
        by_frequency.setdefault(r.frequency, set()).add(r.level)
    assert all(len(levels) == 1 for levels in by_frequency.values()), "one level per frequency"
    assert {"every 4 tokens", "every 8 tokens", "every 32 tokens"} <= set(frequencies)
    table = format_levels(rows)
    assert table.splitlines()[0].startswith("| level |") and len(table.splitlines()) == len(rows) + 2


def test_a_transformer_has_the_kv_cache_as_its_only_in_context_level():
    rows = describe_levels(_lm(mixer="attn"))
    assert [r.frequency for r in rows] == ["every token", "every outer step"]
    assert "KV cache" in rows[0].tensors


def test_linear_attention_pp_without_updates_is_its_mlp():
    torch.manual_seed(0)
    block = LinearAttentionPP(6, 5, update=False).double()
    u = torch.randn(2, 7, 6, dtype=torch.float64)
    y, _ = block(u)
    torch.testing.assert_close(y, u @ block.weight, rtol=1e-12, atol=1e-12)


def test_linear_attention_pp_writes_the_memory_and_meta_learns_its_initial_value():
    torch.manual_seed(0)
    block = LinearAttentionPP(6, 5).double()
    u = torch.randn(2, 9, 6, dtype=torch.float64)
    y, state = block(u)
    k, v = block.k_proj(u), block.v_proj(u)
    W = block.weight.expand(2, 6, 5)
    for t in range(9):  # the definition, token by token
        W = W + k[:, t, :, None] * v[:, t, None, :]
        torch.testing.assert_close(y[:, t], torch.einsum("bi,bio->bo", u[:, t], W), rtol=1e-10, atol=1e-10)
    torch.testing.assert_close(state[:, 0], W, rtol=1e-10, atol=1e-10)
    y_ref, _ = block(u, mode="reference")
    torch.testing.assert_close(y, y_ref, rtol=1e-10, atol=1e-10)
    first, mid = block(u[:, :4])
    rest, _ = block(u[:, 4:], mid, mode="recurrent")
    torch.testing.assert_close(torch.cat([first, rest], 1), y, rtol=1e-10, atol=1e-10)
    y.square().sum().backward()
    assert all(p.grad.abs().sum() > 0 for p in block.parameters())
    with pytest.raises(ValueError, match="u must have shape"):
        block(u[..., :4])
