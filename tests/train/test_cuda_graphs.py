"""CUDA graphs: the Trainer's `cuda_graphs` option and `regmem bench gpu`'s graphed step replay what the eager step
computes. The replays need a GPU (they skip without one, saying so); the options' validation runs everywhere."""

import pytest
import torch

from regmem.layers import build_mixer
from regmem.models import LM, LMConfig
from regmem.train import TrainConfig, Trainer

GPU = pytest.mark.skipif(not torch.cuda.is_available(), reason="CUDA graphs need a CUDA device")


def _data(n: int = 16, T: int = 32, vocab: int = 16, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    inputs = torch.randint(0, vocab, (n, T), generator=g)
    return inputs, torch.roll(inputs, -1, dims=1)


def _hope_lm(device) -> LM:
    torch.manual_seed(0)
    return LM(LMConfig(vocab_size=16, d_model=32, n_layers=1, n_heads=2, mixer="hope")).to(device)


def test_cuda_graphs_must_be_a_bool():
    with pytest.raises(ValueError, match="cuda_graphs"):
        TrainConfig(steps=1, batch_size=2, cuda_graphs=1)


def test_cuda_graphs_refuse_a_model_on_the_cpu():
    config = TrainConfig(steps=1, batch_size=2, cuda_graphs=True, progress=False)
    with pytest.raises(ValueError, match="cuda_graphs needs one process on a CUDA device"):
        Trainer(_hope_lm("cpu"), config, train_data=_data())


def test_the_graphed_bench_step_refuses_a_cpu_tensor():
    from regmem.lab.bench.gpu import graphed_train_step

    with pytest.raises(ValueError, match="x: CUDA graphs need a CUDA tensor"):
        graphed_train_step(build_mixer("gated_deltanet", 32, 2), torch.randn(1, 8, 32))


@GPU
def test_a_graphed_training_run_follows_the_eager_one():
    """Hope LM, 6 AdamW steps: the run replaying CUDA graphs has the eager run's losses and weights (fp32, the same
    kernels; round-off only), and its evaluation (eager, eval mode) agrees."""
    results = []
    for graphs in (False, True):
        model = _hope_lm("cuda")
        config = TrainConfig(steps=6, batch_size=4, lr=3e-3, log_every=1, eval_every=6, progress=False,
                             cuda_graphs=graphs)
        summary = Trainer(model, config, train_data=_data(), eval_data=_data(8, seed=1)).fit()
        results.append((summary, [p.detach().clone() for p in model.parameters()]))
    (eager, eager_params), (graphed, graphed_params) = results
    assert [r["loss"] for r in graphed["history"]["train"]] == pytest.approx(
        [r["loss"] for r in eager["history"]["train"]], rel=1e-4)
    assert graphed["metrics"]["loss"] == pytest.approx(eager["metrics"]["loss"], rel=1e-4)
    for a, b in zip(graphed_params, eager_params, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)
    assert eager["history"]["train"][-1]["loss"] < eager["history"]["train"][0]["loss"]  # it trained at all


@GPU
@pytest.mark.parametrize("name", ["gated_deltanet", "hope"])
def test_the_graphed_bench_step_has_the_eager_gradients(name):
    from regmem.lab.bench.gpu import _train_step, graphed_train_step

    torch.manual_seed(0)
    mixer = build_mixer(name, 64, 2).cuda()
    x = torch.randn(2, 64, 64, device="cuda")
    _train_step(mixer, x)()
    eager = {n: p.grad.clone() for n, p in mixer.named_parameters() if p.grad is not None}
    step = graphed_train_step(mixer, x)
    for _ in range(2):  # the capture, then a replay
        step()
    graphed = {n: p.grad for n, p in mixer.named_parameters() if p.grad is not None}
    assert graphed.keys() == eager.keys()
    for n in eager:
        torch.testing.assert_close(graphed[n], eager[n], rtol=1e-4, atol=1e-6, msg=n)
