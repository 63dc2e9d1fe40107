"""Sparse attention over blocks of keys: MoE attention (eq. 25) and MoBA's top-k block gate (eqs. 26-27) of Zhong,
Xu, Ao, Shi, *Understanding Transformer from the Perspective of Associative Memory* (arXiv:2505.19488, Sec. 2.1,
"Sparsity").

The key-value pairs are split into disjoint blocks ("experts") E_e of `block_size` consecutive tokens, and a gate that
looks at the query and at the block's keys routes each query to some of them:

    o_t = sum_e g_e(q_t, {k_i}_{i in E_e}) sum_{i in E_e, i <= t} v_i kappa(q_t, k_i)                   (eq. 25)
    s_e(q_t) = < q_t, mean-pool({k_i}_{i in E_e, i <= t}) > * scale                                    (eq. 27)

with kappa(q, k) = exp(scale q.k) and scale = 1 / sqrt(D) (or QK-norm's learnable temperature, as `attn`). The paper
omits every normaliser; the two mixers restore them as follows (our choice, each stated in its class):

- `MoEAttention` (`moe_attn`): each expert is softmax attention over its block (the eq. 18 normaliser inside the
  expert) and the gate is a softmax router over the selected blocks, g_e = softmax_e(s_e(q_t)), so o_t is a convex
  mixture of the experts' reads, as the MoE FFN of eq. 24 mixes its experts' outputs. `top_k=None` selects every
  block the query can see (a dense router); `top_k=k` selects k blocks as MoBA does and renormalises over them.
- `MoBA` (`moba`): g_e in {0, 1} is 1 for the k selected blocks (eq. 26) and the read is softmax attention over the
  union of the selected blocks (MoBA's own normalisation, arXiv:2502.13189).

Causality (as MoBA): a query sees the blocks up to its own; its own block is always selected and counts towards k,
and its score and mean use only the keys up to the query, so the gate never looks ahead; the other k - 1 are the
earlier blocks with the largest s_e. Blocks count each row's real tokens (like rotary positions), so padding moves
no block boundary.

Two forms compute the same function (tests/layers/test_block_attention.py checks outputs and gradients):

- With a cache or padding (`routing_bias`), both gates become an additive bias on attention's scores (per key:
  log g_e, minus the expert's log normaliser for `moe_attn`, -inf for an unselected block), so like FoX (fox.py)
  the forward ends in torch's SDPA with a float mask: no op computes softmax attention with a block-routing gate.
  The bias is a materialised [B, H, T, S] tensor, O(T^2) memory like any masked SDPA call.
- Without either (training's forward, `aligned_attend`), block e is keys e * block_size ... (e + 1) * block_size - 1
  and the gate is a few reshapes. MoBA's read is SDPA with a boolean mask broadcast from the per-block choice;
  MoE attention's is the mixture of eq. 25 itself: SDPA of every query against each whole block and causal SDPA
  within the query's own block, the (head, block) pairs as SDPA's head dimension so its fused kernels run, summed
  with the router's weights. A training step (forward and backward, one CPU thread, blocks of 128, d_model 64)
  takes 0.68x attention's for MoE attention and 0.93x for MoBA at B 1, T 1024; 0.46x and 1.15x at T 4096; 0.55x
  and 1.26x at B 8, T 1024 (benchmarks/results/block-attention). Through the bias, as before 2026-11-30, it took
  4.1x and 1.7x at B 8.

A block-sparse kernel (MoBA's point: skipping unselected blocks) is out of scope. The decoding state is attention's
KV cache; the block of each cached key follows from the cache's mask.

Not points of the design space: the weights are query similarity times a key-dependent routing gate, no single
weighting of `regmem.recipe`, so `recipe` is None (as for FoX).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from regmem.layers.attention import SoftmaxAttention
from regmem.layers.base import repeat_heads
from regmem.ops.nonparametric.similarity import allowed_pairs


class BlockAttention(SoftmaxAttention):
    """Shared forward of `MoEAttention` and `MoBA` (module docstring); subclasses define `gate_bias`."""

    recipe_name = ""  # outside the design space (module docstring)

    def __init__(
        self,
        d_model: int,
        n_heads: int,
        head_dim: int | None = None,  # None means d_model // n_heads
        n_kv_heads: int | None = None,  # grouped-query attention; None means n_heads
        rotary: bool = True,
        rope_base: float = 10000.0,
        qk_norm: bool = False,  # unit-norm q, k with a learnable temperature (initialised at sqrt(head_dim))
        short_conv: int = 0,  # kernel of a causal depthwise conv on q, k, v; 0 = off
        head_norm: bool = False,  # per-head RMSNorm on the attention output
        norm_eps: float = 1e-5,  # eps of that norm
        block_size: int = 64,  # tokens per block (expert) of keys
        top_k: int | None = None,  # blocks per query, its own included; None = every visible block
    ):
        super().__init__(d_model, n_heads, head_dim, n_kv_heads, rotary, rope_base, qk_norm, short_conv,
                         head_norm, norm_eps)
        if isinstance(block_size, bool) or not isinstance(block_size, int) or block_size < 1:
            raise ValueError(f"block_size must be a positive int, got {block_size!r}")
        if top_k is not None and (isinstance(top_k, bool) or not isinstance(top_k, int) or top_k < 1):
            raise ValueError(f"top_k must be a positive int or None, got {top_k!r}")
        self.block_size, self.top_k = block_size, top_k

    def levels(self) -> list[dict]:
        return [{"tensors": "KV cache (every key and value), split into blocks", "period": 1,
                 "objective": "none: softmax attention over the blocks a key-dependent gate selects (eqs. 25-27)"}]

    def _attend(self, q, k, v, key_mask, offset, plain, log_decay=None):
        """SoftmaxAttention's read (its forward, cache and padding unchanged) with the routing gate as the bias;
        without cache or padding (training's forward), `aligned_attend`."""
        if plain:
            return self.aligned_attend(q, k, v)
        bias = self.routing_bias(q, k, key_mask, offset)  # [B, H, T, S]
        return super()._attend(q, k, v, key_mask, offset, plain=False, log_decay=bias)

    def routing_bias(self, q: torch.Tensor, k: torch.Tensor, mask: torch.Tensor, offset: int) -> torch.Tensor:
        """The gate as a bias on the scores: q [B, T, H, D] (the new queries), k [B, S, H_kv, D] (cache, then new
        keys), mask [B, S] (False at padding) -> [B, H, T, S] in at least float32. 0 on the rows of padded queries
        (they read only themselves and the real past, like attention's). Any cache and padding; the blocks count
        each row's real keys, so they are found by index (one-hot, scatter, gather)."""
        with torch.autocast(q.device.type, enabled=False):  # the gate in float32 even under autocast
            q, k, scale = self._gate_inputs(q, k)
            S, E = k.shape[1], math.ceil(k.shape[1] / self.block_size)
            block = ((mask.cumsum(1) - 1).clamp(min=0) // self.block_size)  # [B, S]: each key's block
            query_block = block[:, offset:]  # [B, T]: each query's own block
            members = F.one_hot(block, E).to(q.dtype) * mask.unsqueeze(-1)  # [B, S, E]: real keys of each block
            allowed = allowed_pairs(q.shape[1], S, offset, mask, device=q.device)  # [B, 1, T, S]
            scores = self._block_scores(q, k, scale, members, block, allowed[:, 0] & mask[:, None, :])
            blocks = torch.arange(E, device=q.device)  # [E]
            visible = (blocks <= query_block.unsqueeze(-1)).unsqueeze(1)  # [B, 1, T, E]
            own = (blocks == query_block.unsqueeze(-1)).unsqueeze(1)  # [B, 1, T, E]

            def log_normalisers():
                logits = scale * torch.einsum("bthd,bshd->bhts", q, k)  # [B, H, T, S]
                return self._log_normalisers(logits.masked_fill(~allowed, float("-inf")), block, E)

            per_block = self.gate_bias(scores, self._select(scores, visible, own), log_normalisers)  # [B, H, T, E]
            index = block[:, None, None, :].expand(-1, self.n_heads, q.shape[1], -1)  # [B, H, T, S]
            bias = per_block.gather(-1, index)
            return bias.masked_fill(~mask[:, None, offset:, None], 0.0)

    def aligned_gate(self, q: torch.Tensor, k: torch.Tensor):
        """The gate without cache or padding: q [B, T, H, D], k [B, T, H_kv, D] -> scores and selected [B, H, T, E]
        (as `routing_bias` computes them) and each query's own block [T]. Block e is keys e * block_size to
        (e + 1) * block_size - 1, so the block means and the own-block prefix means are reshapes and a cumsum."""
        with torch.autocast(q.device.type, enabled=False):  # the gate in float32 even under autocast
            q, k, scale = self._gate_inputs(q, k)
            (B, T, H), size = q.shape[:3], self.block_size
            blocked = self._in_blocks(k, 1)  # [B, E, size, H, D], zero keys past T
            counts = torch.arange(1, size + 1, device=q.device, dtype=q.dtype)  # [size]
            prefix_means = (blocked.cumsum(2) / counts[:, None, None]).flatten(1, 2)[:, :T]  # [B, T, H, D]
            blocks = torch.arange(blocked.shape[1], device=q.device)  # [E]
            means = blocked.sum(2) / (T - size * blocks).clamp(max=size).to(q.dtype)[:, None, None]  # [B, E, H, D]
            scores = scale * torch.einsum("bthd,behd->bhte", q, means)  # [B, H, T, E]
            own_score = scale * (q * prefix_means).sum(-1).transpose(1, 2)  # [B, H, T]: own block, keys up to t
            query_block = torch.arange(T, device=q.device) // size  # [T]
            scores = scores.scatter(-1, query_block[:, None].expand(B, H, T, 1), own_score.unsqueeze(-1))
            selected = self._select(scores, blocks <= query_block[:, None], blocks == query_block[:, None])
            return scores, selected, query_block

    def aligned_attend(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        """The read without cache or padding: q [B, T, H, D], k, v [B, T, H_kv, D] -> [B, T, H, D]."""
        raise NotImplementedError

    def _in_blocks(self, t: torch.Tensor, dim: int) -> torch.Tensor:
        """t with its time axis `dim` zero-padded to whole blocks and split into (E, block_size)."""
        E = math.ceil(t.shape[dim] / self.block_size)
        pad = [0, 0] * (t.dim() - 1 - dim) + [0, E * self.block_size - t.shape[dim]]
        return F.pad(t, pad).unflatten(dim, (E, self.block_size))

    def _gate_inputs(self, q, k):
        """q [B, T, H, D] and k [B, S, H, D] as the gate reads them (QK-norm applied, heads repeated, at least
        float32) and the logit scale."""
        dtype = torch.promote_types(q.dtype, torch.float32)
        q, k, scale = self._scaled(q, k)
        scale = q.shape[-1] ** -0.5 if scale is None else scale
        return q.to(dtype), repeat_heads(k, self.n_heads).to(dtype), scale

    @staticmethod
    def _block_scores(q, k, scale, members, block, visible_keys):
        """s_e(q_t) of eq. 27: q [B, T, H, D], k [B, S, H, D], members [B, S, E] (real keys of each block), block
        [B, S], visible_keys [B, T, S] (real keys at or before t) -> [B, H, T, E]. Earlier blocks are complete; the
        query's own block is pooled over its keys up to t."""
        sums = torch.einsum("bse,bshd->behd", members, k)  # [B, E, H, D]
        means = sums / members.sum(1).clamp(min=1)[:, :, None, None]  # [B, E, H, D]
        scores = scale * torch.einsum("bthd,behd->bhte", q, means)  # [B, H, T, E]
        query_block = block[:, block.shape[1] - q.shape[1]:]  # [B, T]
        in_own = visible_keys & (block[:, None, :] == query_block.unsqueeze(-1))  # [B, T, S]
        own_mean = torch.einsum("bts,bshd->bthd", in_own.to(k.dtype), k)  # [B, T, H, D]
        own_mean = own_mean / in_own.sum(-1).clamp(min=1)[:, :, None, None]
        own_score = scale * (q * own_mean).sum(-1).transpose(1, 2)  # [B, H, T]
        index = query_block[:, None, :, None].expand(-1, q.shape[2], -1, 1)  # [B, H, T, 1]
        return scores.scatter(-1, index, own_score.unsqueeze(-1))

    @staticmethod
    def _log_normalisers(logits, block, E):
        """log Z_e = log sum_{i in E_e, allowed} exp(logit_i) per query and block, each block's max (detached)
        taken out first: logits [B, H, T, S] (-inf where not allowed), block [B, S] -> [B, H, T, E]."""
        index = block[:, None, None, :].expand_as(logits)  # [B, H, T, S]
        empty = logits.new_full((*logits.shape[:-1], E), float("-inf"))  # [B, H, T, E]
        peak = empty.scatter_reduce(-1, index, logits, reduce="amax").detach()
        peak = torch.where(torch.isfinite(peak), peak, torch.zeros_like(peak))
        total = torch.zeros_like(peak).scatter_add(-1, index, torch.exp(logits - peak.gather(-1, index)))
        return torch.log(total.clamp(min=torch.finfo(total.dtype).tiny)) + peak

    def _select(self, scores, visible, own):
        """[B, H, T, E] bool: the query's own block and the top_k - 1 earlier blocks by score (all visible blocks
        when top_k is None); visible and own broadcast against scores."""
        if self.top_k is None:
            return visible.expand_as(scores)
        candidates = scores.masked_fill(~visible | own, float("-inf"))  # earlier blocks only
        n = min(self.top_k - 1, scores.shape[-1])
        chosen = torch.zeros_like(scores, dtype=torch.bool)
        if n > 0:
            chosen = chosen.scatter(-1, candidates.topk(n, dim=-1).indices, True)
        return own | (chosen & visible & ~own)

    def gate_bias(self, scores, selected, log_normalisers) -> torch.Tensor:
        """The bias on a key of block e, per query: scores, selected [B, H, T, E]; log_normalisers() -> [B, H, T, E],
        log sum_{i in E_e, i allowed} exp(logit_i), called only by a gate that needs it -> [B, H, T, E]."""
        raise NotImplementedError


class MoEAttention(BlockAttention):
    """MoE attention (eq. 25): a softmax router over the selected blocks mixes the blocks' softmax attentions,
    o_t = sum_e g_e(q_t) o_{t,e} with g = softmax over the selected e of s_e(q_t) (eq. 27) and o_{t,e} softmax
    attention over the keys of block e up to t. `top_k=None` (default) is the dense router."""

    def gate_bias(self, scores, selected, log_normalisers):
        log_gate = torch.log_softmax(scores.masked_fill(~selected, float("-inf")), dim=-1)  # [B, H, T, E]
        return (log_gate - log_normalisers()).masked_fill(~selected, float("-inf"))

    def aligned_attend(self, q, k, v):
        """Eq. 25 as a mixture of reads: every query attends to each whole block and to its own block up to itself
        (causal SDPA within blocks); the router's weights mix them. The same function as `routing_bias`'s bias,
        without building that [B, H, T, T] tensor."""
        scores, selected, query_block = self.aligned_gate(q, k)
        gate = torch.softmax(scores.masked_fill(~selected, float("-inf")), dim=-1)  # [B, H, T, E]
        q, k, v, scale = self._heads_first(q, k, v)  # [B, H, T, D]
        (B, H, T), E = q.shape[:3], gate.shape[-1]
        # (head, block) pairs as SDPA's head dimension: its fused kernels take 4-D inputs only
        k, v = (self._in_blocks(t, 2).flatten(1, 2) for t in (k, v))  # [B, H E, size, D]
        whole = F.scaled_dot_product_attention(q.repeat_interleave(E, dim=1), k, v, scale=scale)  # [B, H E, T, D]
        own_q = self._in_blocks(q, 2).flatten(1, 2)  # [B, H E, size, D]
        own = F.scaled_dot_product_attention(own_q, k, v, is_causal=True, scale=scale)  # [B, H E, size, D]
        whole, own = whole.unflatten(1, (H, E)), own.unflatten(1, (H, E)).flatten(2, 3)[:, :, :T]
        earlier = torch.arange(E, device=q.device) < query_block[:, None]  # [T, E]: whole blocks before t's
        own_gate = gate.gather(-1, query_block[:, None].expand(B, H, T, 1))  # [B, H, T, 1]
        o = torch.einsum("bhte,bhetd->bhtd", (gate * earlier).to(q.dtype), whole) + own_gate.to(q.dtype) * own
        return o.transpose(1, 2)  # [B, T, H, D]


class MoBA(BlockAttention):
    """MoBA's gate (eqs. 26-27): g_e = 1 for the top_k selected blocks (default 3, the query's own included), 0
    otherwise, and softmax attention over the union of the selected blocks."""

    def __init__(
        self,
        d_model: int,
        n_heads: int,
        head_dim: int | None = None,  # None means d_model // n_heads
        n_kv_heads: int | None = None,  # grouped-query attention; None means n_heads
        rotary: bool = True,
        rope_base: float = 10000.0,
        qk_norm: bool = False,  # unit-norm q, k with a learnable temperature (initialised at sqrt(head_dim))
        short_conv: int = 0,  # kernel of a causal depthwise conv on q, k, v; 0 = off
        head_norm: bool = False,  # per-head RMSNorm on the attention output
        norm_eps: float = 1e-5,  # eps of that norm
        block_size: int = 64,  # tokens per block of keys
        top_k: int = 3,  # blocks per query, its own included (MoBA's default)
    ):
        if top_k is None:
            raise ValueError("top_k must be a positive int for MoBA (a dense gate is plain attention)")
        super().__init__(d_model, n_heads, head_dim, n_kv_heads, rotary, rope_base, qk_norm, short_conv,
                         head_norm, norm_eps, block_size, top_k)

    def gate_bias(self, scores, selected, log_normalisers):
        return torch.zeros_like(scores).masked_fill(~selected, float("-inf"))

    def aligned_attend(self, q, k, v):
        """Softmax attention with -inf on the keys of unselected blocks and of the future: one [B, H, T, T] mask,
        built from the per-block choice by broadcasting over each block's keys."""
        _, selected, _ = self.aligned_gate(q, k)
        q, k, v, scale = self._heads_first(q, k, v)
        T, size = q.shape[2], self.block_size
        keys = selected.unsqueeze(-1).expand(-1, -1, -1, -1, size).flatten(-2)[..., :T]  # [B, H, T, T]
        mask = keys & allowed_pairs(T, T, 0, device=q.device)
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=scale).transpose(1, 2)
