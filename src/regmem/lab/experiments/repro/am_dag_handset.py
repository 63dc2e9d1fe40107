"""The hand-set one-layer DeltaFormer of arXiv:2505.19488 Sec. 3.3 ("The Power of Matrix Inverse"), run on the DAG
task's own token sequences (tasks/dag.py): an `LM` whose weights are set by hand, scored by the task's metric.

Why a short convolution. The task presents node t as two tokens, its id and then its parent's id (NONE at a root),
labelled on the second. The construction wants, at that token, the key k = e_{id(t)} and the erase vector
w = e_{id(parent)} (regmem.analysis.reachability_construction). Without positions or a convolution a layer's
key there is a function of the parent's id alone, so one layer cannot write "node t" into its memory. A causal
depthwise convolution of width 2 on q, k, v, w (DeltaFormer's `short_conv=2`, the smallest that reaches the previous
token) gives the key the id before it; a new tokenisation (one token per (id, parent) pair) would need n(n + 1)
token ids and teach training nothing about the id shared between them, so the layout stays and the convolution is
added (am-dag trains every arm with it).

The layer, channel by channel (d_model = n + 3: n id channels, NONE, a constant 1, the answer; head_dim n, one
head; M, C large constants; silu is the convolution's activation, silu(M/2) = a, silu(-M/2) ~ 0):

- every embedding has norm sqrt(2) (its id or NONE channel and the constant), so the pre-norm is the identity;
- k = q: channel j is silu(2 p_j(s - 1) + p_j(s)) with p_j = M 1[token = j] - M/2: a when the previous token is
  j, and at position 0 (where the convolution reads zeros before the row) when the token itself is j, else ~0;
- w: channel j is silu(p_j(s)), a when the token is j: at the labelled token, the parent's id (0 at a root);
- v: channel 0 is silu(C c(s) - C c(s - 1)) with c the constant: silu(C) at position 0 only (the source), else 0;
- linear kernels, alpha = 1, beta = -sqrt(n) / a^2, so u_t = v_t + sum_{i<t, k_i = w_t} u_i: with node 0's key at
  position 0 holding the source, u at node t's labelled token is silu(C) times the number of paths 0 -> t. The
  first token of each later node has key e_{previous parent id} and erase vector e_{own id}, which no earlier key
  matches, so its u is ~0 and it adds nothing where its key matches;
- the read q = e_{id(t)} finds the node's own u (and position 0's source at node 0); o_proj writes paths(t) into
  the answer channel, and the untied head gives token 1 the logit paths(t), token 0 the logit 1/2 (the constant),
  every other token 0 (the final norm scales them all alike).

Only one parent per node (the paper's two trees): with p parents the labelled token is p tokens after the node's
id, and the first tokens of a group would erase from real entries; `reachability_lm` raises for p > 1.
"""

from __future__ import annotations

import math

import torch

from regmem.models import LM, LMConfig
from regmem.tasks.dag import DAGReachability, DAGReachabilityConfig

SHORT_CONV = 2  # the width that lets the labelled token's key read the node's id (module docstring)


def _silu(x: float) -> float:
    return x / (1 + math.exp(-x))


def reachability_lm(config: DAGReachabilityConfig, *, scale: float = 40.0, source: float = 10.0) -> LM:
    """The module docstring's one-layer DeltaFormer LM for `config`, every weight set by hand (float32, eval mode).
    scale: M, the gap that the silu of the short convolution turns into a one-hot (silu(-M/2) ~ -M e^{-M/2} / 2);
    source: C, the pre-activation of the source value at position 0."""
    if config.parents_per_node != 1:
        raise ValueError(f"the hand-set layer on tokens needs parents_per_node = 1, got {config.parents_per_node}")
    n = config.num_nodes
    none, const, answer = n, n + 1, n + 2  # channels after the n id channels
    d_model = n + 3
    kwargs = {"head_dim": n, "erase_kernel": "linear", "read_kernel": "linear", "rotary": False,
              "short_conv": SHORT_CONV}
    model = LM(LMConfig(vocab_size=config.vocab_size, d_model=d_model, n_layers=1, n_heads=1, mixer="deltaformer",
                        mixer_kwargs={"deltaformer": kwargs}, ffn="none", tie_embeddings=False))
    block, mixer = model.blocks[0], model.blocks[0].mixer
    a = _silu(scale / 2)  # a matching key or erase channel
    ids = torch.arange(n)
    with torch.no_grad():
        for p in model.parameters():
            p.zero_()
        model.embed.weight[ids, ids] = 1.0  # [V, d_model]: e_id + e_const, NONE -> e_none + e_const
        model.embed.weight[none, none] = 1.0
        model.embed.weight[:, const] = 1.0
        block.mixer_norm.weight.fill_(math.sqrt(2 / d_model + block.mixer_norm.eps))  # norm(embedding) = embedding
        for proj in (mixer.q_proj, mixer.k_proj, mixer.w_proj):  # [n, d_model]: p_j = M 1[token = j] - M/2
            proj.weight[ids, ids] = scale
            proj.weight[:, const] = -scale / 2
        q_conv, k_conv, v_conv, w_conv = (c.conv.weight for c in mixer.convs)  # [D, 1, 2]: (previous, current)
        for conv in (q_conv, k_conv):
            conv[:, 0] = torch.tensor([2.0, 1.0])
        w_conv[:, 0, 1] = 1.0
        mixer.v_proj.weight[0, const] = source
        v_conv[0, 0] = torch.tensor([-1.0, 1.0])
        mixer.alpha.fill_(1.0)
        mixer.beta.fill_(-math.sqrt(n) / a**2)
        mixer.erase_weights.fill_(1.0)
        mixer.o_proj.weight[answer, 0] = math.sqrt(n) / (a**2 * _silu(source))
        model.norm.weight.fill_(1.0)
        model.head.weight[1, answer] = 1.0  # token 1: the number of paths from node 0
        model.head.weight[0, const] = 0.5  # token 0: the threshold
    return model.eval()


def handset_token_accuracy(config: DAGReachabilityConfig, num_eval: int, seed: int) -> float:
    """The hand-set LM's accuracy (the task's metric) on `num_eval` task sequences drawn with `seed`."""
    task = DAGReachability(config)
    inputs, targets = task.generate(num_eval, seed=seed)  # [N, 2n] each
    with torch.no_grad():
        return task.metric(reachability_lm(config)(inputs), targets)["accuracy"]
