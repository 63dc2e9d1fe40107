"""titans-pytorch's NeuralMemory -> regmem (regmem/interop/titans_pytorch.py, regmem/layers/neural_memory.py): a state
dict built by titans-pytorch 0.5.5's key names and shapes (`NeuralMemory` at its defaults), converted, computes what
the upstream module computes, written out here token by token from its equations in float64: inner gradients by
autograd at the initial weights, one momentum and decay step per chunk with gates from the chunk's mean input, the
lagged read, the per-head sigmoid gate and `combine_heads`."""

import pytest
import torch
import torch.nn.functional as F

from regmem.interop import convert, from_titans_pytorch_neural_memory
from regmem.layers.neural_memory import NeuralMemory


def neural_memory_state_dict(dim=16, heads=2, dim_head=8, depth=2, expansion=4, seed=0, hidden=None) -> dict:
    """Random weights under titans-pytorch's names and shapes (the gain offset and the norms off their zero / one
    initialisation, so that each matters)."""
    g = torch.Generator().manual_seed(seed)
    r = lambda *shape, s=1.0: torch.randn(*shape, generator=g, dtype=torch.float64) * s  # noqa: E731
    inner, hidden = heads * dim_head, hidden or dim_head * expansion
    dims = (dim_head, *(hidden,) * (depth - 1), dim_head)
    sd = {"store_norm.weight": 1 + r(dim, s=0.2), "retrieve_norm.weight": 1 + r(dim, s=0.2),
          "memory_model.norm.gamma": torch.zeros(dim_head, dtype=torch.float64),
          "memory_model_parameters.0": r(heads, dim_head, s=0.3)}
    for i, (a, b) in enumerate(zip(dims[:-1], dims[1:], strict=True)):
        sd[f"memory_model.model.weights.{i}"] = r(a, b, s=a ** -0.5)
        sd[f"memory_model_parameters.{i + 1}"] = r(heads, a, b, s=a ** -0.5)
    sd |= {f"to_{p}.weight": r(inner, dim, s=dim ** -0.5) for p in ("queries", "keys", "values")}
    for p in ("adaptive_step", "momentum", "decay_factor"):
        sd |= {f"to_{p}.0.weight": r(heads, dim, s=0.5), f"to_{p}.0.bias": r(heads, s=0.5)}
    if heads > 1:
        sd |= {"retrieve_gate.0.weight": r(heads, dim, s=0.5), "combine_heads.weight": r(dim, inner, s=inner ** -0.5)}
    return sd


def memory(weights, z):
    """The memory model: z + LayerNorm(MLP(z)) * (1 + gain), exact GELU between the MLP's bias-free layers."""
    h = z
    for i, w in enumerate(weights[1:]):
        h = (F.gelu(h) if i else h) @ w
    return z + F.layer_norm(h, h.shape[-1:], eps=1e-5) * (1 + weights[0])


def upstream_neural_memory(sd: dict, x: torch.Tensor, chunk_size: int, max_lr: float = 1.0, *,
                           anchor: str = "initial", lag: bool = True) -> torch.Tensor:
    """NeuralMemory's forward at its defaults on x [B, T, dim], token by token (module docstring). The variants
    upstream does not compute: `anchor="current"` takes each chunk's gradients at the weights before it (TTT's
    mini-batch rule), `lag=False` lets every token of a chunk read its chunk's step."""
    heads = sd["to_adaptive_step.0.weight"].shape[0]
    n_weights = sum(k.startswith("memory_model_parameters.") for k in sd)
    Bsz, T, dim = x.shape
    C, dh = chunk_size, sd["memory_model_parameters.0"].shape[1]

    def rms(t, w):
        return t * torch.rsqrt(t.pow(2).mean(-1, keepdim=True) + torch.finfo(t.dtype).eps) * w

    xs, xr = rms(x, sd["store_norm.weight"]), rms(x, sd["retrieve_norm.weight"])
    out = torch.zeros(Bsz, T, heads * dh, dtype=x.dtype)
    for b in range(Bsz):
        for h in range(heads):
            cols = slice(h * dh, (h + 1) * dh)
            k, v = (xs[b] @ sd["to_keys.weight"].T)[:, cols], (xs[b] @ sd["to_values.weight"].T)[:, cols]
            q = (xr[b] @ sd["to_queries.weight"].T)[:, cols]
            def logit(name, u, h=h):
                return u @ sd[f"to_{name}.0.weight"][h] + sd[f"to_{name}.0.bias"][h]

            start = [sd[f"memory_model_parameters.{i}"][h] for i in range(n_weights)]
            weights, momentum, after = start, [torch.zeros_like(w) for w in start], [start]
            for n in range(T // C):  # the tail after the last full chunk is never stored
                surprise = [torch.zeros_like(w) for w in start]
                for t in range(n * C, (n + 1) * C):  # every gradient at the initial weights
                    p = [w.clone().requires_grad_() for w in (start if anchor == "initial" else weights)]
                    beta = max_lr * torch.sigmoid(logit("adaptive_step", xs[b, t]))
                    loss = beta * (memory(p, k[t]) - v[t]).pow(2).mean()
                    grads = torch.autograd.grad(loss, p, create_graph=True)  # differentiable: outer gradients
                    surprise = [s - g for s, g in zip(surprise, grads, strict=True)]
                pooled = xs[b, n * C:(n + 1) * C].mean(0)
                eta, alpha = torch.sigmoid(logit("momentum", pooled)), torch.sigmoid(logit("decay_factor", pooled))
                momentum = [eta * m + s for m, s in zip(momentum, surprise, strict=True)]
                weights = [(1 - alpha) * w + m for w, m in zip(weights, momentum, strict=True)]
                after.append(weights)
            for t in range(T):
                o = memory(after[min((t + 1 if lag else t + C) // C, len(after) - 1)], q[t])
                if heads > 1:
                    o = o * torch.sigmoid(xr[b, t] @ sd["retrieve_gate.0.weight"][h])
                out[b, t, cols] = o
    return out @ sd["combine_heads.weight"].T if heads > 1 else out


CASES = [  # dim, heads, dim_head, depth, chunk_size, T, hidden width (None: 4 dim_head)
    (16, 2, 8, 2, 4, 11, None),  # two full chunks and a tail of 3
    (16, 2, 8, 2, 4, 12, None),
    (16, 1, 16, 2, 1, 7, None),  # one head: no gate, no combine_heads; upstream's default chunk size 1
    (12, 3, 4, 3, 3, 10, None),  # a deeper memory MLP
    (12, 2, 3, 2, 2, 7, 10),  # a hidden width that is no multiple of dim_head
]


@pytest.mark.parametrize(("dim", "heads", "dim_head", "depth", "chunk_size", "T", "hidden"), CASES)
def test_converted_neural_memory_equals_titans_pytorch(dim, heads, dim_head, depth, chunk_size, T, hidden):
    sd = neural_memory_state_dict(dim, heads, dim_head, depth, hidden=hidden)
    layer = convert("titans_pytorch.NeuralMemory", sd, chunk_size=chunk_size)
    x = torch.randn(2, T, dim, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    torch.testing.assert_close(layer(x)[0], upstream_neural_memory(sd, x, chunk_size), rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("prefill", [1, 3, 4, 6])
def test_prefill_then_steps_equals_the_full_forward(prefill):
    """Prefills that end inside a chunk (1, 3, 6 with C = 4) and at its end (4); then one token at a time, and one
    call of several tokens that crosses a chunk boundary."""
    sd = neural_memory_state_dict()
    layer = from_titans_pytorch_neural_memory(sd, chunk_size=4)
    x = torch.randn(2, 13, 16, dtype=torch.float64, generator=torch.Generator().manual_seed(2))
    full = layer(x)[0]
    outs, state = layer(x[:, :prefill])
    outs = [outs]
    for t in range(prefill, 9):
        o, state = layer(x[:, t:t + 1], state)
        outs.append(o)
    o, state = layer(x[:, 9:], state)
    torch.testing.assert_close(torch.cat([*outs, o], 1), full, rtol=1e-10, atol=1e-10)
    assert state.seen == 13


def test_outer_gradients_equal_the_token_loop():
    """The gradients of a loss on the output with respect to every converted weight and the input equal autograd
    through the token-by-token writing (second-order terms through the inner gradients included)."""
    sd = neural_memory_state_dict(12, 3, 4, 2)
    layer = from_titans_pytorch_neural_memory(sd, chunk_size=3)
    x = torch.randn(1, 8, 12, dtype=torch.float64, generator=torch.Generator().manual_seed(3), requires_grad=True)
    y = layer(x)[0]
    ours = {"memory_gain": "memory_model_parameters.0", "memory_weights.0": "memory_model_parameters.1",
            "memory_weights.1": "memory_model_parameters.2", "k_proj.weight": "to_keys.weight",
            "v_proj.weight": "to_values.weight", "q_proj.weight": "to_queries.weight",
            "store_norm.weight": "store_norm.weight", "retrieve_norm.weight": "retrieve_norm.weight",
            "step_proj.weight": "to_adaptive_step.0.weight", "step_proj.bias": "to_adaptive_step.0.bias",
            "momentum_proj.weight": "to_momentum.0.weight", "momentum_proj.bias": "to_momentum.0.bias",
            "decay_proj.weight": "to_decay_factor.0.weight", "decay_proj.bias": "to_decay_factor.0.bias",
            "gate_proj.weight": "retrieve_gate.0.weight", "o_proj.weight": "combine_heads.weight"}
    params = dict(layer.named_parameters())
    assert set(params) == set(ours)
    got = torch.autograd.grad(y.pow(2).sum(), [x, *(params[name] for name in ours)])
    leaves = {k: t.clone().requires_grad_() for k, t in sd.items()}
    x2 = x.detach().clone().requires_grad_()
    y2 = upstream_neural_memory(leaves, x2, 3)
    torch.testing.assert_close(y, y2, rtol=1e-10, atol=1e-10)
    expected = torch.autograd.grad(y2.pow(2).sum(), [x2, *(leaves[name] for name in ours.values())])
    for name, a, b in zip(["x", *ours], got, expected, strict=True):
        assert a.abs().max() > 0, name
        torch.testing.assert_close(a, b, rtol=1e-9, atol=1e-10, msg=name)


def test_each_mechanism_changes_the_function():
    """Gradients at the weights before each chunk instead of the initial ones, or a read without the lag, give
    another function: the converted layer matches neither, so the equality above pins both."""
    sd = neural_memory_state_dict()
    x = torch.randn(1, 12, 16, dtype=torch.float64, generator=torch.Generator().manual_seed(4))
    y = from_titans_pytorch_neural_memory(sd, chunk_size=4)(x)[0]
    for variant in ({"anchor": "current"}, {"lag": False}):
        assert (y - upstream_neural_memory(sd, x, 4, **variant)).abs().max() > 1e-3, variant


def test_weights_stay_bounded_under_large_keys_and_values():
    """Momentum and decay gates are sigmoids, strictly inside (0, 1): 2048 tokens whose keys and values are 30x
    their initial scale (the input's RMSNorm would undo a scaled input, so the projections are scaled), at the
    largest step, leave the memory finite and of bounded size."""
    torch.manual_seed(0)
    layer = NeuralMemory(16, 2, chunk_size=8, max_lr=1.0)
    with torch.no_grad():
        layer.step_proj.bias.fill_(20.0)  # β at its maximum
        layer.k_proj.weight.mul_(30.0)
        layer.v_proj.weight.mul_(30.0)
        y, state = layer(torch.randn(1, 2048, 16))
    assert torch.isfinite(y).all()
    assert max(w.abs().max() for w in state.weights) < 1e4


def test_bad_input_and_keys_are_refused():
    sd = neural_memory_state_dict()
    with pytest.raises(ValueError, match="does not know"):
        from_titans_pytorch_neural_memory({**sd, "multihead_rmsnorm.gamma": torch.zeros(2, 1, 8)}, chunk_size=4)
    with pytest.raises(ValueError, match="lacks"):
        from_titans_pytorch_neural_memory({k: v for k, v in sd.items() if k != "combine_heads.weight"}, chunk_size=4)
    with pytest.raises(ValueError, match="memory_model_parameters.2 must have shape"):
        from_titans_pytorch_neural_memory({**sd, "memory_model_parameters.2": torch.zeros(2, 31, 8)}, chunk_size=4)
    with pytest.raises(ValueError, match="chunk_size"):
        from_titans_pytorch_neural_memory(sd, chunk_size=0)
    with pytest.raises(ValueError, match="per_head_learned_parameters"):
        from_titans_pytorch_neural_memory({**sd, "memory_model_parameters.0": torch.zeros(8)}, chunk_size=4)
    with pytest.raises(ValueError, match="memory_model.norm.gamma must have shape"):
        from_titans_pytorch_neural_memory({**sd, "memory_model.norm.gamma": torch.zeros(99)}, chunk_size=4)
    with pytest.raises(ValueError, match="does not know"):
        from_titans_pytorch_neural_memory({**sd, "memory_model.model.weights.7": torch.zeros(3)}, chunk_size=4)
    layer = from_titans_pytorch_neural_memory(sd, chunk_size=4)
    x = torch.randn(1, 5, 16, dtype=torch.float64)
    with pytest.raises(ValueError, match="attention_mask"):
        layer(x, attention_mask=torch.ones(1, 5))
    with pytest.raises(ValueError, match="x must have shape"):
        layer(x[..., :8])
    with pytest.raises(ValueError, match="head_dim must equal d_model"):
        NeuralMemory(16, 1, 8)


def test_against_the_real_module_where_installed():
    """Optional (the `bench` extra installs titans-pytorch): the real module at its defaults, weights randomised off
    their initialisation, against the converted layer in float64. docs/interop.md quotes this comparison, run in a
    separate environment: 1.4e-14 at worst. `make test` does not install the extra, so CI skips it."""
    titans_pytorch = pytest.importorskip("titans_pytorch")
    for heads, dim_head, chunk_size in ((2, 8, 4), (1, 16, 1), (4, 4, 3)):
        torch.manual_seed(0)
        module = titans_pytorch.NeuralMemory(dim=16, heads=heads, dim_head=dim_head, chunk_size=chunk_size).double()
        with torch.no_grad():
            for p in module.parameters():
                p.add_(0.3 * torch.randn_like(p))
        layer = from_titans_pytorch_neural_memory(module.state_dict(), chunk_size=chunk_size)
        x = torch.randn(2, 15, 16, dtype=torch.float64)
        expected = module(x)[0]
        torch.testing.assert_close(layer(x)[0], expected, rtol=1e-10, atol=1e-10)
        outs, state = layer(x[:, :5])  # regmem's decoding against upstream's full forward
        outs = [outs]
        for t in range(5, 15):
            o, state = layer(x[:, t:t + 1], state)
            outs.append(o)
        torch.testing.assert_close(torch.cat(outs, 1), expected, rtol=1e-10, atol=1e-10)
