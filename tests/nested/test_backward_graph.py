"""The CMS and self-modifying Titans cut a block into pieces (a level's chunks, the mini-batches) with one `split`,
whose backward is one `cat`: no backward node slices the whole block along time. A slice per piece (the previous
form) zero-fills a full-length gradient once per piece, O(T^2 / C) memory traffic, which was most of a CMS layer's
backward at T 4096 under the profiler."""

import pytest
import torch

from regmem.layers import build_mixer
from regmem.nested import CMS, CMSConfig


def _full_length_slices(y: torch.Tensor, T: int) -> int:
    """Backward nodes that slice a tensor whose time dim (1) has the block's length T."""
    seen, stack, found = set(), [y.grad_fn], 0
    while stack:
        node = stack.pop()
        if node is None or node in seen:
            continue
        seen.add(node)
        if type(node).__name__ == "SliceBackward0":
            sizes = node._saved_self_sym_sizes
            found += len(sizes) > 1 and sizes[1] == T and node._saved_dim == 1
        stack += [parent for parent, _ in node.next_functions]
    return found


@pytest.mark.parametrize("masked", [False, True])
def test_cms_pieces_come_from_one_split(masked):
    T = 70
    cms = CMS(8, CMSConfig(chunk_sizes=(4, 16), hidden=6))
    x = torch.randn(2, T, 8, requires_grad=True)
    mask = torch.ones(2, T, dtype=torch.bool) if masked else None
    y, _ = cms(x, attention_mask=mask)
    assert _full_length_slices(y, T) == 0


def test_self_modifying_titans_pieces_come_from_one_split():
    T = 70
    mixer = build_mixer("self_modifying_titans", 16, 2, mini_batch=8)
    x = torch.randn(2, T, 16, requires_grad=True)
    y, _ = mixer(x)
    assert _full_length_slices(y, T) == 0


def test_compiled_pieces_equal_the_eager_layer_with_gradients():
    """`compile_pieces` runs each whole mini-batch's fused piece through torch.compile: outputs and every parameter's
    gradient equal eager mode's to float round-off (three mini-batches of 4 tokens, one graph). The backend here is
    aot_eager (dynamo's graph and AOT autograd's backward, without inductor's code generation, which takes minutes
    on CPU); the default, True, is inductor on the same graph."""
    torch.manual_seed(0)
    eager = build_mixer("self_modifying_titans", 16, 2, mini_batch=4)
    torch.manual_seed(0)
    compiled = build_mixer("self_modifying_titans", 16, 2, mini_batch=4, compile_pieces="aot_eager")
    x = torch.randn(2, 12, 16)
    results = []
    for mixer in (eager, compiled):
        y, _ = mixer(x)
        y.pow(2).mean().backward()
        results.append((y.detach(), {n: p.grad for n, p in mixer.named_parameters()}))
    (y_eager, g_eager), (y_compiled, g_compiled) = results
    torch.testing.assert_close(y_compiled, y_eager, rtol=1e-5, atol=1e-6)
    for name, grad in g_eager.items():
        torch.testing.assert_close(g_compiled[name], grad, rtol=1e-4, atol=1e-6, msg=lambda m, n=name: f"{n}: {m}")


@pytest.mark.parametrize("bad", ["no_such_backend", 1])
def test_an_unknown_compile_backend_raises_naming_the_option(bad):
    with pytest.raises(ValueError, match="compile_pieces must be"):
        build_mixer("self_modifying_titans", 16, 2, compile_pieces=bad)


@pytest.mark.parametrize("step_rule", ["normalized", "explicit"])
def test_compiled_cms_chunks_equal_the_eager_cms_with_gradients(step_rule):
    """`compile_chunks` runs each whole chunk of a level (outputs, inner gradient, eq. 71's step) through
    torch.compile: outputs, the state after the block and the outer gradients equal eager mode's (aot_eager, as
    above). T = 22 over chunks (4, 8): whole chunks of both levels and a partial last one, which runs eagerly."""
    x = torch.randn(2, 22, 8)
    results = []
    for option in (False, "aot_eager"):
        torch.manual_seed(0)
        config = CMSConfig(chunk_sizes=(4, 8), hidden=6, lr=0.05, step_rule=step_rule, compile_chunks=option)
        cms = CMS(8, config)
        y, state = cms(x)
        y.pow(2).mean().backward()
        grads = {n: p.grad for n, p in cms.named_parameters()}
        results.append((y.detach(), state.levels[1].theta.down.detach(), grads))
    (y_eager, theta_eager, g_eager), (y_compiled, theta_compiled, g_compiled) = results
    torch.testing.assert_close(y_compiled, y_eager, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(theta_compiled, theta_eager, rtol=1e-5, atol=1e-6)
    for name, grad in g_eager.items():
        torch.testing.assert_close(g_compiled[name], grad, rtol=1e-4, atol=1e-6, msg=lambda m, n=name: f"{n}: {m}")


def test_hope_compile_pieces_compiles_the_cms_chunks_too():
    assert build_mixer("hope", 16, 2, compile_pieces="aot_eager").cms.config.compile_chunks == "aot_eager"
    assert build_mixer("hope", 16, 2).cms.config.compile_chunks is False
    assert build_mixer("hope", 16, 2, cms_compile_chunks="eager").cms.config.compile_chunks == "eager"


@pytest.mark.parametrize("bad", ["no_such_backend", 1])
def test_an_unknown_cms_compile_backend_raises_naming_the_option(bad):
    with pytest.raises(ValueError, match="compile_chunks must be"):
        CMSConfig(compile_chunks=bad)
