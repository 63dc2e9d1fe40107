"""What step s does is a pure function of (s, config): its learning-rate multiplier and its batch.

No hidden RNG state is involved, so a run resumed at step s sees exactly the schedule and the batches that an
uninterrupted run would have seen.
"""

from __future__ import annotations

import math
from functools import lru_cache

import numpy as np
import torch

from regmem.train.config import TrainConfig

# Spawn keys that keep the seed streams apart (numpy SeedSequence, NEP 19): one for the data order, one for the
# torch RNG of each rank.
DATA_STREAM = 0
TORCH_STREAM = 1


def derive_seed(seed: int, *key: int) -> int:
    """A 64-bit seed for the stream `key` of the run seeded `seed`, independent across keys (SeedSequence)."""
    sequence = np.random.SeedSequence(seed, spawn_key=key)
    return int(sequence.generate_state(1, dtype=np.uint64)[0])


def schedule(step: int, config: TrainConfig) -> float:
    """Learning-rate multiplier at 0-based `step`: linear warm-up to 1, then a cosine down to config.min_lr_ratio.

    Warm-up: (step + 1) / warmup_steps for step < warmup_steps, so the first step already moves the weights and
    the last warm-up step reaches 1. Cosine (SGDR, Loshchilov & Hutter, arXiv:1608.03983, eq. 5, one cycle):
    min_lr_ratio + (1 - min_lr_ratio) * (1 + cos(pi * p)) / 2 with p = (step - warmup_steps) / (steps -
    warmup_steps), which is 1 at step = warmup_steps and min_lr_ratio at step = steps.
    """
    if step < 0:
        raise ValueError(f"step must be >= 0, got {step}")
    if step < config.warmup_steps:
        return (step + 1) / config.warmup_steps
    progress = min(1.0, (step - config.warmup_steps) / max(1, config.steps - config.warmup_steps))
    cosine = 0.5 * (1.0 + math.cos(math.pi * progress))
    return config.min_lr_ratio + (1.0 - config.min_lr_ratio) * cosine


@lru_cache(maxsize=2)
def _epoch_permutation(num_examples: int, seed: int, epoch: int) -> torch.Tensor:
    generator = torch.Generator().manual_seed(derive_seed(seed, DATA_STREAM, epoch))
    return torch.randperm(num_examples, generator=generator)  # [N]


def batch_indices(
    step: int, num_examples: int, config: TrainConfig, *, rank: int = 0, world_size: int = 1
) -> torch.Tensor:
    """Rows of the training data that `rank` trains on at 0-based `step`: LongTensor [batch_size / world_size].

    Each epoch is a permutation of the N examples seeded by (config.seed, epoch) alone; step s takes global batch
    s mod (N // batch_size) of epoch s // (N // batch_size) (the remainder of an epoch is dropped, as in
    DataLoader(drop_last=True)), and rank r takes the r-th contiguous share of that global batch.
    """
    if num_examples < config.batch_size:
        raise ValueError(f"num_examples ({num_examples}) must be >= batch_size ({config.batch_size})")
    if config.batch_size % world_size != 0:
        raise ValueError(f"batch_size ({config.batch_size}) must be divisible by world_size ({world_size})")
    batches_per_epoch = num_examples // config.batch_size
    epoch, batch = divmod(step, batches_per_epoch)
    order = _epoch_permutation(num_examples, config.seed, epoch)  # [N]
    share = config.batch_size // world_size
    start = batch * config.batch_size + rank * share
    return order[start : start + share]  # [batch_size / world_size]
