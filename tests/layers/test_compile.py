"""Layers compile without graph breaks and never stall the device.

`torch.compile(fullgraph=True)` raises on any graph break, and a host read of a tensor value (`.item()`,
`.tolist()`, `bool(tensor)`) is one: so one compiled training step of GatedDeltaNet, GLA, Mesa, Titans' MLP memory
(the test-time-training engine) and DeltaFormer (chunk form, small
T) proves the training path holds no such read, value checks included (they are skipped while compiling,
`regmem/ops/common/validate.py`). The compiled step must also compute what eager mode computes. On a GPU,
`torch.cuda.set_sync_debug_mode("error")` turns every device-to-host synchronisation into an error.
"""

import pytest
import torch

from regmem.layers import build_mixer
from regmem.ops import value_checks

D_MODEL, HEADS, T, CHUNK = 32, 4, 32, 16  # two chunks, so the inter-chunk pass is traced too


def _mixer_and_input(name: str, device: str = "cpu"):
    torch.manual_seed(0)
    mixer = build_mixer(name, D_MODEL, HEADS, chunk_size=CHUNK).to(device)
    x = torch.randn(2, T, D_MODEL, device=device)
    return mixer, x


def _loss(mixer, x):
    y, _ = mixer(x)
    return y.pow(2).mean()


@pytest.mark.parametrize("name", ["gated_deltanet", "gla", "mesa", "titans_mlp", "deltaformer"])
def test_training_step_compiles_without_graph_breaks_and_matches_eager(name):
    mixer, x = _mixer_and_input(name)
    torch._dynamo.reset()
    compiled = torch.compile(lambda x: _loss(mixer, x), fullgraph=True)  # raises on a graph break
    loss = compiled(x)
    loss.backward()
    grads = {n: p.grad.clone() for n, p in mixer.named_parameters()}
    mixer.zero_grad()
    eager = _loss(mixer, x)
    eager.backward()
    torch.testing.assert_close(loss, eager, rtol=1e-5, atol=1e-6)
    for n, p in mixer.named_parameters():
        torch.testing.assert_close(grads[n], p.grad, rtol=1e-4, atol=1e-6, msg=lambda m, n=n: f"grad of {n}: {m}")


@pytest.mark.skipif(not torch.cuda.is_available(), reason="set_sync_debug_mode needs a CUDA device")
@pytest.mark.parametrize("name", ["gated_deltanet", "gla", "mesa", "deltaformer"])
def test_forward_backward_never_syncs_the_gpu(name):
    mixer, x = _mixer_and_input(name, "cuda")
    _loss(mixer, x).backward()  # warm-up: lazy initialisation may sync once
    torch.cuda.synchronize()
    with value_checks(None):  # the default: value checks run on CPU tensors only
        torch.cuda.set_sync_debug_mode("error")
        try:
            _loss(mixer, x).backward()
        finally:
            torch.cuda.set_sync_debug_mode("default")


@pytest.mark.parametrize("name", ["hla", "ahla", "titans_mlp"])
def test_a_padded_training_step_compiles_without_graph_breaks(name):
    """Padding takes no host read either (regmem/ops/common/padding.py): HLA's neutral padded tokens and the deep
    memories' real-tokens-first order compile into one graph, with left- and right-padded rows."""
    mixer, x = _mixer_and_input(name)
    mask = torch.ones(2, T, dtype=torch.bool)
    mask[0, :5], mask[1, -7:] = False, False
    torch._dynamo.reset()
    compiled = torch.compile(lambda x: mixer(x, attention_mask=mask)[0].pow(2).mean(), fullgraph=True)
    torch.testing.assert_close(compiled(x), mixer(x, attention_mask=mask)[0].pow(2).mean(), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("name,options", [("titans_mlp", {"dgd": True}), ("ttt_mlp", {})],
                         ids=["titans_mlp-dgd", "ttt_mlp"])
def test_compiled_blocks_equal_the_eager_layer_with_gradients(name, options):
    """`compile_blocks` runs each block of the test-time-training engine's chunk form through torch.compile: outputs,
    the final memory state and every parameter's gradient equal eager mode's to float round-off (five blocks of 8
    tokens, the first one apart). The backend is aot_eager, as for `compile_pieces` (tests/nested)."""
    x = torch.randn(2, 40, D_MODEL, generator=torch.Generator().manual_seed(1))
    results = []
    for compile_blocks in (False, "aot_eager"):
        torch.manual_seed(0)
        mixer = build_mixer(name, D_MODEL, HEADS, mini_batch=8, compile_blocks=compile_blocks, **options)
        y, state = mixer(x)
        y.pow(2).mean().backward()
        results.append((y.detach(), state, {n: p.grad for n, p in mixer.named_parameters()}))
    (y_eager, s_eager, g_eager), (y_compiled, s_compiled, g_compiled) = results
    torch.testing.assert_close(y_compiled, y_eager, rtol=1e-5, atol=1e-6)
    for field, (a, b) in zip(s_eager.memory._fields, zip(s_compiled.memory, s_eager.memory, strict=True),
                             strict=True):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6, msg=lambda m, f=field: f"state {f}: {m}")
    for n, grad in g_eager.items():
        torch.testing.assert_close(g_compiled[n], grad, rtol=1e-4, atol=1e-6, msg=lambda m, n=n: f"grad of {n}: {m}")


@pytest.mark.parametrize("bad", ["no_such_backend", 1])
def test_an_unknown_block_compile_backend_raises_naming_the_option(bad):
    from regmem.ops import InnerModel, ttt

    with pytest.raises(ValueError, match="compile_blocks must be"):
        build_mixer("titans_mlp", D_MODEL, HEADS, compile_blocks=bad)
    q = k = v = torch.randn(1, 8, 1, 4)
    with pytest.raises(ValueError, match="compile_blocks must be"):
        ttt(q, k, v, torch.ones(1, 8, 1), model=InnerModel(), compile_blocks=bad)
