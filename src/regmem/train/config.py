"""`TrainConfig`: everything that fixes a training run, validated on construction.

Defaults follow nanoGPT's train.py (AdamW, betas (0.9, 0.95), weight decay 0.1, grad clip 1.0, cosine to lr/10)
and zoology's synthetic-task runs (early stop once the validation accuracy reaches 0.99).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields
from typing import Any, Literal, get_args

# The optimisers the Trainer builds by name (regmem/train/optimizers.py): "adamw", or one of Nested Learning's
# optimisers-as-memories (Muon-family ones on 2-D hidden weights, AdamW for the rest).
OptimizerName = Literal["adamw", "muon", "m3", "delta_momentum", "dmgd", "dgd"]

# Fields that change the parameter trajectory: a resumed run must agree with its checkpoint on all of them.
TRAJECTORY_FIELDS = (
    "steps",
    "batch_size",
    "lr",
    "weight_decay",
    "betas",
    "warmup_steps",
    "min_lr_ratio",
    "grad_clip",
    "seed",
    "bf16",
    "optimizer",
    "mlp_lr_scale",
    "max_consecutive_skips",
)


def _require(ok: bool, field: str, expected: str, value: Any) -> None:
    if not ok:
        raise ValueError(f"TrainConfig.{field} must be {expected}, got {value!r}")


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


@dataclass(frozen=True)
class TrainConfig:
    """One training run. `lr`, `weight_decay` and `betas` configure the default AdamW; a custom optimizer keeps
    its own hyperparameters and only has its learning rates scaled by `schedule`."""

    steps: int  # optimizer steps in the whole run
    batch_size: int  # global batch in sequences, split evenly over DDP ranks
    lr: float = 1e-3  # peak learning rate, reached at the end of warm-up
    weight_decay: float = 0.1  # AdamW decoupled decay on >= 2-D parameters only (nanoGPT)
    betas: tuple[float, float] = (0.9, 0.95)  # AdamW moment decay rates (nanoGPT, GPT-3)
    warmup_steps: int = 0  # steps of linear warm-up; 0 starts at the peak lr
    min_lr_ratio: float = 0.1  # the cosine ends at lr * min_lr_ratio (nanoGPT: min_lr = lr / 10)
    grad_clip: float | None = 1.0  # max global L2 norm of the gradient; None turns clipping off
    eval_every: int = 100  # steps between evaluations on eval_data (the last step always evaluates)
    eval_batch_size: int = 256  # sequences per evaluation forward pass
    checkpoint_every: int | None = None  # steps between checkpoints in out_dir; None writes none
    out_dir: str | None = None  # directory for metrics.jsonl and the checkpoint; None writes no files
    seed: int = 0  # seeds the data order and the torch RNG (dropout); the model init is the caller's
    bf16: bool = False  # bfloat16 autocast for the forward pass (CPU or CUDA); the loss is taken in float32
    log_every: int = 10  # steps between train-loss records (history, metrics.jsonl, progress bar)
    progress: bool = True  # tqdm progress bar on rank 0
    target_metric: str | None = None  # eval metric that stops the run early, e.g. "accuracy"
    target_value: float | None = None  # stop once target_metric >= target_value (zoology: accuracy 0.99)
    optimizer: OptimizerName = "adamw"  # the optimiser built when the Trainer is given none
    # AdamW's lr for the model's MLPs (every block's FFN, every CMS, inside a mixer too) is lr * mlp_lr_scale: at the
    # large lrs of small synthetic runs an MLP's output, cubic in its weights, outgrows the normalised mixers' and
    # drowns them under the final norm (regmem/train/optimizers.py); 1 is one lr for all
    mlp_lr_scale: float = 1.0
    # CUDA only, one process: the model's forward and backward captured once as CUDA graphs at the first step
    # (torch.cuda.make_graphed_callables) and replayed by every later one, so a model of many small kernels (Hope,
    # self-modifying Titans, the deep memories' mini-batch loops) no longer pays a launch from Python per kernel; the
    # same results to float round-off. The batch shape is fixed (it is: batch_size), evaluation runs eagerly
    cuda_graphs: bool = False
    # a step whose loss or gradient norm is non-finite is skipped (the weights stay as they were; Trainer docstring);
    # this many skipped in a row end the run as diverged, with the last finite weights
    max_consecutive_skips: int = 8

    def __post_init__(self):
        _require(_is_int(self.steps) and self.steps >= 1, "steps", "an int >= 1", self.steps)
        _require(_is_int(self.batch_size) and self.batch_size >= 1, "batch_size", "an int >= 1", self.batch_size)
        _require(_is_number(self.lr) and self.lr > 0, "lr", "a number > 0", self.lr)
        _require(_is_number(self.weight_decay) and self.weight_decay >= 0, "weight_decay", ">= 0", self.weight_decay)
        betas_ok = (
            isinstance(self.betas, tuple | list)
            and len(self.betas) == 2
            and all(_is_number(b) and 0 <= b < 1 for b in self.betas)
        )
        _require(betas_ok, "betas", "two numbers in [0, 1)", self.betas)
        warmup_ok = _is_int(self.warmup_steps) and 0 <= self.warmup_steps <= self.steps
        _require(warmup_ok, "warmup_steps", f"an int in [0, steps={self.steps}]", self.warmup_steps)
        ratio_ok = _is_number(self.min_lr_ratio) and 0 <= self.min_lr_ratio <= 1
        _require(ratio_ok, "min_lr_ratio", "a number in [0, 1]", self.min_lr_ratio)
        _require(self.optimizer in get_args(OptimizerName), "optimizer", f"one of {get_args(OptimizerName)}",
                 self.optimizer)
        scale_ok = _is_number(self.mlp_lr_scale) and self.mlp_lr_scale > 0
        _require(scale_ok, "mlp_lr_scale", "a number > 0", self.mlp_lr_scale)
        _require(self.mlp_lr_scale == 1 or self.optimizer == "adamw", "mlp_lr_scale",
                 f"1 with optimizer={self.optimizer!r} (it scales AdamW's lr)", self.mlp_lr_scale)
        clip_ok = self.grad_clip is None or (_is_number(self.grad_clip) and self.grad_clip > 0)
        _require(clip_ok, "grad_clip", "None or a number > 0", self.grad_clip)
        for name in ("eval_every", "eval_batch_size", "log_every", "max_consecutive_skips"):
            value = getattr(self, name)
            _require(_is_int(value) and value >= 1, name, "an int >= 1", value)
        every_ok = self.checkpoint_every is None or (_is_int(self.checkpoint_every) and self.checkpoint_every >= 1)
        _require(every_ok, "checkpoint_every", "None or an int >= 1", self.checkpoint_every)
        _require(
            self.checkpoint_every is None or self.out_dir is not None, "out_dir", "set when checkpoint_every is", None
        )
        _require(_is_int(self.seed) and self.seed >= 0, "seed", "an int >= 0", self.seed)
        _require(isinstance(self.bf16, bool), "bf16", "a bool", self.bf16)
        _require(isinstance(self.progress, bool), "progress", "a bool", self.progress)
        _require(isinstance(self.cuda_graphs, bool), "cuda_graphs", "a bool", self.cuda_graphs)
        pair_ok = (self.target_metric is None) == (self.target_value is None)
        _require(
            pair_ok, "target_value", f"set exactly when target_metric (={self.target_metric!r}) is", self.target_value
        )
        object.__setattr__(self, "betas", tuple(self.betas))  # a JSON round trip gives a list

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-ready values; `from_dict` inverts it."""
        return asdict(self)

    @classmethod
    def from_dict(cls, values: dict[str, Any]) -> TrainConfig:
        unknown = sorted(set(values) - {f.name for f in fields(cls)})
        if unknown:
            raise ValueError(f"TrainConfig has no fields {unknown}")
        return cls(**values)


def trajectory_changes(saved: TrainConfig, new: TrainConfig) -> list[str]:
    """Names of the fields, among TRAJECTORY_FIELDS, on which two configs disagree."""
    return [name for name in TRAJECTORY_FIELDS if getattr(saved, name) != getattr(new, name)]
