"""The hand-set one-layer DeltaFormer on the DAG task's tokens (experiments/repro/am_dag_handset.py, arXiv:2505.19488
Sec. 3.3): its answer channel is the number of paths from node 0 at every labelled token, it scores 100 % by the
task's metric, the short convolution's previous-token tap is what makes it work, and p > 1 is refused."""

import pytest
import torch

from regmem.lab.experiments.repro.am_dag_handset import handset_token_accuracy, reachability_lm
from regmem.tasks.dag import DAGReachability, DAGReachabilityConfig, encode_graphs, sample_graphs


def answer_channel(model, inputs: torch.Tensor) -> torch.Tensor:
    """[N, n]: the residual stream's answer channel (the last) after the layer, at each node's labelled token."""
    with torch.no_grad():
        hidden, _ = model.blocks[0](model.embed(inputs))  # [N, 2n, n + 3]
    return hidden[:, 1::2, -1]


@pytest.mark.parametrize("num_nodes", [4, 8, 32])
def test_answer_channel_counts_the_paths_from_node_0(num_nodes):
    config = DAGReachabilityConfig(num_nodes=num_nodes)
    graphs = sample_graphs(config, 32, seed=num_nodes)
    inputs, _ = encode_graphs(graphs)
    counts = answer_channel(reachability_lm(config), inputs)  # trees: one path or none
    torch.testing.assert_close(counts, graphs.reachable.float(), atol=1e-4, rtol=0)


@pytest.mark.parametrize("num_nodes", [8, 32])
def test_handset_lm_scores_100_percent_on_the_eval_split(num_nodes):
    config = DAGReachabilityConfig(num_nodes=num_nodes)
    assert handset_token_accuracy(config, 64, seed=10_000) == 1.0


def test_without_the_previous_token_tap_the_same_weights_fail():
    """Keys and queries that see only the current token (the layer without a short convolution) carry the parent's
    id, not the node's: the construction no longer labels the nodes."""
    config = DAGReachabilityConfig(num_nodes=16)
    model = reachability_lm(config)
    with torch.no_grad():
        for conv in model.blocks[0].mixer.convs[:2]:  # q, k
            conv.conv.weight[:, 0, 0] = 0.0
    task = DAGReachability(config)
    inputs, targets = task.generate(64, seed=0)
    with torch.no_grad():
        assert task.metric(model(inputs), targets)["accuracy"] < 0.8


def test_more_than_one_parent_is_refused():
    with pytest.raises(ValueError, match="parents_per_node = 1"):
        reachability_lm(DAGReachabilityConfig(num_nodes=8, parents_per_node=2))
