"""The schedule and the data order are pure functions of (step, config)."""

import pytest
import torch

from regmem.train import TrainConfig, batch_indices, schedule

CONFIG = TrainConfig(steps=100, batch_size=8, warmup_steps=10, min_lr_ratio=0.1, progress=False)


def test_warmup_is_linear_from_one_step_to_peak():
    values = [schedule(step, CONFIG) for step in range(CONFIG.warmup_steps)]
    assert values[0] == pytest.approx(1 / CONFIG.warmup_steps)
    assert values[-1] == pytest.approx(1.0)
    steps = [b - a for a, b in zip(values, values[1:], strict=False)]
    assert steps == pytest.approx([1 / CONFIG.warmup_steps] * len(steps))


def test_cosine_endpoints_are_peak_and_min_ratio():
    assert schedule(CONFIG.warmup_steps, CONFIG) == pytest.approx(1.0)
    assert schedule(CONFIG.steps, CONFIG) == pytest.approx(CONFIG.min_lr_ratio)
    middle = (CONFIG.warmup_steps + CONFIG.steps) // 2
    assert schedule(middle, CONFIG) == pytest.approx(CONFIG.min_lr_ratio + (1 - CONFIG.min_lr_ratio) / 2)
    assert schedule(10 * CONFIG.steps, CONFIG) == pytest.approx(CONFIG.min_lr_ratio)


def test_monotone_non_increasing_after_warmup():
    values = [schedule(step, CONFIG) for step in range(CONFIG.warmup_steps, CONFIG.steps + 1)]
    assert all(b <= a for a, b in zip(values, values[1:], strict=False))
    assert all(CONFIG.min_lr_ratio <= v <= 1.0 for v in values)


def test_no_warmup_starts_at_peak():
    config = TrainConfig(steps=10, batch_size=1, warmup_steps=0, min_lr_ratio=0.0, progress=False)
    assert schedule(0, config) == 1.0
    assert schedule(10, config) == pytest.approx(0.0, abs=1e-12)
    assert schedule(5, config) == pytest.approx(0.5)  # halfway down the cosine from 1 to 0


def test_negative_step_is_rejected():
    with pytest.raises(ValueError, match="step"):
        schedule(-1, CONFIG)


def test_batches_are_seeded_by_step_alone():
    first = batch_indices(7, 50, CONFIG)
    batch_indices(3, 50, TrainConfig(steps=1, batch_size=8, seed=5, progress=False))  # unrelated call in between
    assert torch.equal(batch_indices(7, 50, CONFIG), first)
    other_seed = TrainConfig(steps=100, batch_size=8, seed=1, progress=False)
    assert not torch.equal(batch_indices(7, 50, other_seed), first)


def test_an_epoch_visits_each_example_at_most_once():
    num_examples = 50  # 6 batches of 8 per epoch, 2 examples dropped
    epoch = torch.cat([batch_indices(step, num_examples, CONFIG) for step in range(6)])
    assert len(epoch.unique()) == 48
    next_epoch = torch.cat([batch_indices(step, num_examples, CONFIG) for step in range(6, 12)])
    assert not torch.equal(next_epoch, epoch)


def test_rank_shares_concatenate_to_the_global_batch():
    global_batch = batch_indices(4, 50, CONFIG)
    shares = [batch_indices(4, 50, CONFIG, rank=r, world_size=4) for r in range(4)]
    assert torch.equal(torch.cat(shares), global_batch)


def test_indivisible_batch_is_rejected():
    with pytest.raises(ValueError, match="batch_size"):
        batch_indices(0, 50, CONFIG, rank=0, world_size=3)
