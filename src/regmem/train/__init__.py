"""The one Trainer for every task: config, schedule, loop, checkpoints, DDP under torchrun."""

from regmem.train import distributed
from regmem.train.checkpoint import checkpoint_step, latest_checkpoint, load_checkpoint, save_checkpoint
from regmem.train.config import TrainConfig
from regmem.train.schedule import batch_indices, schedule
from regmem.train.trainer import IGNORE_INDEX, Diverged, DivergenceWarning, Trainer, default_optimizer, token_loss

__all__ = [
    "IGNORE_INDEX",
    "Diverged",
    "DivergenceWarning",
    "TrainConfig",
    "Trainer",
    "batch_indices",
    "checkpoint_step",
    "default_optimizer",
    "distributed",
    "latest_checkpoint",
    "load_checkpoint",
    "save_checkpoint",
    "schedule",
    "token_loss",
]
