"""One training loop for every task (docs/architecture.md, "Layers"), after nanoGPT's train.py.

Step s reads top to bottom: lr multiplier schedule(s) -> batch s of a seeded per-epoch permutation -> loss (sum
of token losses / labelled tokens of the global batch) -> backward -> clip -> optimizer step -> log -> eval ->
checkpoint -> early stop. Everything step s does is a function of (s, config, checkpointed state), which makes
resuming bit-exact. Under torchrun the model is wrapped in DistributedDataParallel and each rank trains on its
share of the global batch; the loss is normalised by the all-reduced token count, so N ranks follow the same
trajectory as one process on the same global batch (up to summation order).

A step whose loss or gradient norm is non-finite is skipped (`_Skips`), decided on the device with no host sync: its
gradient counts as zero and the parameters are put back as they were before the optimizer's step, so a NaN never
enters the weights. Skips are counted in metrics.jsonl; `config.max_consecutive_skips` skips in a row end the run
as diverged (read at the steps that log, evaluate or checkpoint, where the loop syncs anyway; every step from the
limit on is skipped too, so the weights stay the last finite ones). Before a checkpoint is written, and at the end,
the parameters are checked as well: a checkpoint is never written of non-finite weights, and a run whose weights
turned non-finite (a finite step that overflowed them) ends as diverged, its model left as it is for inspection.

With `config.cuda_graphs` the first training step captures the model's forward and backward as CUDA graphs
(`torch.cuda.make_graphed_callables`; the ops skip their value checks while a graph is captured) and every step
replays them; the loss, clipping and the optimizer step stay eager. Evaluation, in eval mode, calls the model's
own forward.
"""

from __future__ import annotations

import contextlib
import json
import math
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal, NamedTuple

import torch
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel
from tqdm.auto import tqdm

from regmem.train import distributed
from regmem.train.checkpoint import (
    checkpoint_step,
    latest_checkpoint,
    load_checkpoint,
    rng_state,
    save_checkpoint,
    set_rng_state,
)
from regmem.train.config import TrainConfig, trajectory_changes
from regmem.train.optimizers import build_optimizer
from regmem.train.schedule import TORCH_STREAM, batch_indices, derive_seed, schedule

IGNORE_INDEX = -100  # targets with this value carry no loss (the tasks' convention, as in F.cross_entropy)
METRICS_FILE = "metrics.jsonl"
CHECKPOINT_FORMAT = 1  # version of trainer.json's layout

Data = tuple[torch.Tensor, torch.Tensor]  # (inputs, targets), both int64 [N, T]
Metric = Callable[[torch.Tensor, torch.Tensor], dict[str, float]]  # (logits [N, T, V], targets [N, T]) -> metrics


def token_loss(logits: torch.Tensor, targets: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(sum of cross-entropy over labelled tokens, number of labelled tokens) for logits [B, T, V], targets
    [B, T]; the caller divides, so that the normaliser can be the count of the whole (global) batch."""
    logits = logits if logits.dtype == torch.float64 else logits.float()  # bf16 logits: softmax in float32
    loss_sum = F.cross_entropy(logits.flatten(0, 1), targets.flatten(), ignore_index=IGNORE_INDEX, reduction="sum")
    return loss_sum, (targets != IGNORE_INDEX).sum()


def default_optimizer(model: torch.nn.Module, config: TrainConfig):
    """The optimiser `config.optimizer` names (regmem/train/optimizers.py); "adamw" (the default) decays >= 2-D
    parameters (matrices, embeddings) only, as nanoGPT's configure_optimizers."""
    return build_optimizer(model, config)


def _check_data(name: str, data: Data, min_rows: int) -> None:
    if len(data) != 2:
        raise ValueError(f"{name} must be (inputs, targets), got {len(data)} items")
    inputs, targets = data
    if inputs.dtype != torch.int64 or targets.dtype != torch.int64 or inputs.dim() != 2:
        raise ValueError(f"{name} must be two int64 tensors [N, T], got {inputs.dtype} {list(inputs.shape)}")
    if inputs.shape != targets.shape:
        raise ValueError(f"{name}: inputs {list(inputs.shape)} and targets {list(targets.shape)} must match")
    if len(inputs) < min_rows:
        raise ValueError(f"{name} has {len(inputs)} rows, fewer than the batch size {min_rows}")


def _total_norm(grads: list[torch.Tensor], like: torch.Tensor | None) -> torch.Tensor:
    """The L2 norm of all gradients together (what clip_grad_norm_ returns; torch's get_total_norm needs 2.6)."""
    if not grads:
        return torch.zeros((), device=like.device if like is not None else None)
    norms = torch._foreach_norm(grads)
    return torch.linalg.vector_norm(torch.stack([norm.to(norms[0].dtype) for norm in norms]))


class _Throughput:
    """Input tokens per second (all ranks together) since the previous call."""

    def __init__(self, tokens_per_step: int, step: int):
        self.tokens_per_step, self.step, self.time = tokens_per_step, step, time.perf_counter()

    def rate(self, step: int) -> float:
        now = time.perf_counter()
        rate = (step - self.step) * self.tokens_per_step / max(now - self.time, 1e-9)
        self.step, self.time = step, now
        return rate


class DivergenceWarning(RuntimeWarning):
    """Issued (rank 0) when a run stops because its loss or its parameters became non-finite."""


class Diverged(NamedTuple):
    """Where a run diverged: "loss", the first step (counted as completed steps, as the logs do) of the first run of
    `max_consecutive_skips` steps whose global loss or gradient norm was non-finite; "parameters", the step at
    which the parameters were found non-finite (checked before each checkpoint and at the end); or "evaluation", the
    last step, whose evaluation loss was non-finite though the weights are finite (a model whose outputs overflow,
    with fewer skipped steps left than the limit)."""

    step: int
    what: Literal["loss", "parameters", "evaluation"]


class _Skips:
    """The non-finite steps, counted on the device with no host sync (int64 scalars): `total` skipped steps,
    `in_row` the current run of consecutive ones, `first_of_row` the step that run began at, and `limit_at` the
    first step of the first run that reached `limit` (-1: none yet). `read` syncs once; `fit` calls it only at the
    steps that log, evaluate or checkpoint. The loss is the all-reduced global one and DDP averages the gradients,
    so every rank skips the same steps."""

    def __init__(self, device: torch.device, limit: int):
        self.limit = limit
        zero = torch.zeros((), dtype=torch.int64, device=device)
        self.total, self.in_row, self.first_of_row, self.limit_at = zero, zero, zero, zero - 1

    def note(self, step: int, skip: torch.Tensor) -> None:
        """Folds step `step` (skipped or not) into the counts."""
        self.total = self.total + skip
        self.in_row = (self.in_row + 1) * skip
        self.first_of_row = torch.where(self.in_row == 1, step, self.first_of_row)
        self.limit_at = torch.where((self.limit_at < 0) & (self.in_row >= self.limit), self.first_of_row,
                                    self.limit_at)

    def stopping(self) -> torch.Tensor:
        """Whether the limit was reached (a bool scalar on the device): every later step is skipped as well."""
        return self.limit_at >= 0

    def state(self) -> list[int]:
        """[total, in_row, first_of_row, limit_at], for a checkpoint (one sync: saving syncs anyway)."""
        return torch.stack([self.total, self.in_row, self.first_of_row, self.limit_at]).tolist()

    def load(self, state: list[int]) -> None:
        self.total, self.in_row, self.first_of_row, self.limit_at = (
            torch.tensor(value, dtype=torch.int64, device=self.total.device) for value in state)

    def read(self) -> tuple[int, Diverged | None]:
        """(skipped steps so far, Diverged at the first step of the run that reached the limit, or None)."""
        total, limit_at = torch.stack([self.total, self.limit_at]).tolist()
        return total, None if limit_at < 0 else Diverged(limit_at, "loss")


class Trainer:
    """Trains `model` (inputs [B, T] -> logits [B, T, V]) on fixed tensors; see the module docstring.

    optimizer: any torch.optim optimizer over the model's parameters; None builds `default_optimizer`. The
    schedule scales each param group's `initial_lr` (its lr when the Trainer is built).
    metric: (logits [N, T, V], targets [N, T]) -> {name: float}, computed on eval_data; `evaluate` adds "loss".
    """

    def __init__(
        self,
        model: torch.nn.Module,
        config: TrainConfig,
        train_data: Data,
        eval_data: Data | None = None,
        metric: Metric | None = None,
        optimizer: torch.optim.Optimizer | None = None,
    ):
        _check_data("train_data", train_data, config.batch_size)
        if eval_data is not None:
            _check_data("eval_data", eval_data, 1)
        if eval_data is None and (metric is not None or config.target_metric is not None):
            raise ValueError("metric and config.target_metric need eval_data")
        self.config, self.train_data, self.eval_data, self.metric = config, train_data, eval_data, metric
        first = next(model.parameters(), None)
        self.device = distributed.setup(first.device if first is not None else torch.device("cpu"))
        if config.batch_size % distributed.world_size() != 0:
            raise ValueError(f"batch_size ({config.batch_size}) must divide over {distributed.world_size()} ranks")
        self.module = model.to(self.device)  # the bare model: saved, loaded and evaluated
        self.model = self.module  # what the training step calls: the DDP wrapper when there are several ranks
        if config.cuda_graphs and (self.device.type != "cuda" or distributed.world_size() > 1):
            raise ValueError(f"config.cuda_graphs needs one process on a CUDA device, got {self.device} with "
                             f"{distributed.world_size()} process(es)")
        self._graphed = False  # with config.cuda_graphs: whether the model's step is captured yet
        self._before_step: list[torch.Tensor] | None = None  # the parameters before a step (`_step_unless`)
        self._skips: _Skips | None = None  # the current fit's counts of skipped steps, checkpointed with it
        if distributed.world_size() > 1:
            device_ids = [self.device.index] if self.device.type == "cuda" else None
            self.model = DistributedDataParallel(self.module, device_ids=device_ids)
        self.optimizer = optimizer if optimizer is not None else default_optimizer(self.module, config)
        for group in self.optimizer.param_groups:
            group.setdefault("initial_lr", group["lr"])  # the key torch.optim.lr_scheduler uses for the same
        self.out_dir = Path(config.out_dir) if config.out_dir is not None else None

    def fit(self, resume: bool = False) -> dict[str, Any]:
        """Trains to config.steps (or the target metric); resume=True continues from out_dir's checkpoint.

        Returns {"step": steps done, "start_step": the step this call started from (the checkpoint's on resume,
        else 0), "metrics": the last evaluation ({} without eval_data, or when the run diverged), "stopped_early":
        bool, "diverged_at_step": None, or the step of the divergence (`Diverged`: the first of the skipped steps
        that reached the limit, the step the parameters were found non-finite, or the last step, whose evaluation
        was),
        "divergence": None, or the message saying so (also a `DivergenceWarning` and a "diverged" record in
        metrics.jsonl), "skipped_steps": the run's steps skipped for a non-finite loss or gradient (a resumed run's
        count goes on from its checkpoint's), "history": {"train": [{"step", "loss", "lr", "grad_norm",
        "tokens_per_s", "skipped"}, ...] every log_every steps ("skipped": the run's skipped steps so far), "eval":
        [{"step", "loss", <metrics>}, ...]}}, the history covering the steps of this call.

        A run that diverged stops at the first step from the limit on that logs, evaluates or checkpoints; its
        weights are those of the last step before the skips that reached the limit (every step since was skipped),
        and out_dir keeps its last checkpoint, which is finite.
        """
        config = self.config
        self._skips = _Skips(self.device, config.max_consecutive_skips)
        start = self._restore() if resume else self._start()
        history: dict[str, list[dict[str, float]]] = {"train": [], "eval": []}
        metrics: dict[str, float] = {}
        done, stopped_early, diverged = start, False, None
        bar = tqdm(total=config.steps, initial=start, disable=not (config.progress and distributed.is_main()))
        throughput = _Throughput(config.batch_size * self.train_data[0].shape[1], start)
        skips, skipped = self._skips, 0
        self.model.train()
        for step in range(start, config.steps):
            done = step + 1  # steps completed; what logs and checkpoints count
            loss, grad_norm = self._train_step(step, done)
            bar.update()
            logs, evaluates, saves = self._due(done)
            if logs or evaluates or saves:
                skipped, diverged = skips.read()
                if diverged is not None:
                    break
            if logs:
                record = {"step": done, "loss": loss.item(), "lr": self.optimizer.param_groups[0]["lr"]}
                record["grad_norm"] = grad_norm.item()  # before clipping
                record["tokens_per_s"] = throughput.rate(done)
                record["skipped"] = skipped
                self._record("train", record, history, bar)
            if evaluates:
                metrics = self.evaluate()
                self._record("eval", {"step": done, **metrics}, history, bar)
                stopped_early = self._reached_target(metrics)
            if saves or (stopped_early and config.checkpoint_every is not None):
                if not self._finite_parameters():
                    diverged = Diverged(done, "parameters")
                    break
                self.save(done)
            if stopped_early:
                break
        bar.close()
        if diverged is None and not self._finite_parameters():  # a finite step that overflowed the weights
            diverged = Diverged(done, "parameters")
        if diverged is None and "loss" in metrics and not math.isfinite(metrics["loss"]):
            diverged = Diverged(done, "evaluation")
        skipped, _ = skips.read()
        message = None
        if diverged is not None:
            metrics, message = {}, self._report_divergence(diverged, done, skipped)
        elif not metrics and self.eval_data is not None:
            metrics = self.evaluate()  # a resumed run that had nothing left to train
        return {"step": done, "start_step": start, "metrics": metrics, "stopped_early": stopped_early,
                "diverged_at_step": None if diverged is None else diverged.step, "divergence": message,
                "skipped_steps": skipped, "history": history}

    def _due(self, done: int) -> tuple[bool, bool, bool]:
        """Whether step `done` logs, evaluates and checkpoints (the last step does all three that are on)."""
        config, last = self.config, done == self.config.steps
        logs = done % config.log_every == 0 or last
        evaluates = self.eval_data is not None and (done % config.eval_every == 0 or last)
        saves = config.checkpoint_every is not None and (done % config.checkpoint_every == 0 or last)
        return logs, evaluates, saves

    def _finite_parameters(self) -> bool:
        """Whether every parameter is finite (one sync; called before a checkpoint, which syncs anyway)."""
        finite = [torch.isfinite(p.detach()).all() for p in self.module.parameters()]
        return bool(torch.stack(finite).all()) if finite else True

    def _report_divergence(self, diverged: Diverged, done: int, skipped: int) -> str:
        """The message naming the step and the checkpoint kept; rank 0 warns and records it in metrics.jsonl."""
        path = latest_checkpoint(self.out_dir) if self.out_dir is not None else None
        kept = "none" if path is None else f"step {checkpoint_step(path)} at {path}"
        if diverged.what == "loss":
            what = (f"the loss or gradient was non-finite for {self.config.max_consecutive_skips} steps in a row from "
                    f"step {diverged.step} (each skipped)")
        elif diverged.what == "parameters":
            what = f"the parameters became non-finite by step {diverged.step}"
        else:
            what = f"the evaluation loss was non-finite at step {diverged.step}"
        message = f"{what}; stopped at step {done}; last good checkpoint: {kept}"
        if distributed.is_main():
            warnings.warn(message, DivergenceWarning, stacklevel=3)
            if self.out_dir is not None:
                record = {"event": "diverged", "step": diverged.step, "what": diverged.what, "stopped_at": done,
                          "checkpoint_step": None if path is None else checkpoint_step(path)}
                record["skipped"] = skipped
                with open(self.out_dir / METRICS_FILE, "a") as file:
                    file.write(json.dumps(record) + "\n")
        return message

    def _train_step(self, step: int, done: int) -> tuple[torch.Tensor, torch.Tensor]:
        """One optimizer step on global batch `step`, skipped when the loss or the gradient is non-finite (or the
        skip limit was reached); returns (the global mean token loss, the gradient norm before clipping), as
        tensors: reading them syncs with the GPU, which only logging steps do."""
        lr_scale = schedule(step, self.config)
        for group in self.optimizer.param_groups:
            group["lr"] = group["initial_lr"] * lr_scale
        rows = batch_indices(
            step, len(self.train_data[0]), self.config, rank=distributed.rank(), world_size=distributed.world_size()
        )
        inputs = self.train_data[0][rows].to(self.device)  # [B / world_size, T]
        targets = self.train_data[1][rows].to(self.device)  # [B / world_size, T]
        with self._autocast():
            if self.config.cuda_graphs and not self._graphed:  # captured once, at this shape, then replayed
                torch.cuda.make_graphed_callables(self.module, (inputs,), allow_unused_input=True)
                self._graphed = True
            logits = self.model(inputs)  # [B / world_size, T, V]
        loss_sum, count = token_loss(logits, targets)
        totals = distributed.all_reduce_sum(torch.stack([loss_sum.detach().double(), count.double()]))  # [2]
        global_count = totals[1].clamp(min=1)
        # DDP averages gradients over ranks, so each rank's sum is scaled by world_size / global count: the
        # averaged gradient is then that of (sum of all token losses) / (all labelled tokens).
        loss = loss_sum * (distributed.world_size() / global_count).to(loss_sum.dtype)
        loss.backward()
        params = [p for p in self.module.parameters() if p.requires_grad]
        grads = [p.grad for p in params if p.grad is not None]
        if self.config.grad_clip is not None:
            grad_norm = torch.nn.utils.clip_grad_norm_(params, self.config.grad_clip)
        else:
            grad_norm = _total_norm(grads, params[0] if params else None)
        global_loss = totals[0] / global_count
        skip = ~(torch.isfinite(global_loss) & torch.isfinite(grad_norm)) | self._skips.stopping()  # bool scalar
        self._skips.note(done, skip)
        self._step_unless(skip, params, grads)
        self.optimizer.zero_grad(set_to_none=True)
        return global_loss, grad_norm

    def _step_unless(self, skip: torch.Tensor, params: list[torch.Tensor], grads: list[torch.Tensor]) -> None:
        """The optimizer's step, undone where `skip` (a bool scalar on the device) is true, with no host sync: the
        gradients are zeroed first (so the optimizer's state stays finite: moments decay one step and step counts
        advance, as after a zero gradient), the parameters copied, and put back after the step. Where `skip` is
        false the parameters are bitwise those of the plain step."""
        for grad in grads:
            grad.masked_fill_(skip, 0.0)
        if self._before_step is None:
            self._before_step = [torch.empty_like(p) for p in params]
        torch._foreach_copy_(self._before_step, [p.detach() for p in params])
        self.optimizer.step()
        for p, before in zip(params, self._before_step, strict=True):
            torch.where(skip, before, p.detach(), out=p.detach())

    @torch.no_grad()
    def evaluate(self, data: Data | None = None) -> dict[str, float]:
        """{"loss": mean token loss, **metric(logits, targets)} on all of `data` (default eval_data, the set that
        stops early; a test set is passed here once training ends), in eval mode, without grad.

        Every rank evaluates the full set with the bare model, so all ranks agree on early stopping without a
        collective. The logits of the whole set, [N, T, V], are held at once for the metric.
        """
        if data is None and self.eval_data is None:
            raise ValueError("evaluate needs eval_data or data")
        if data is not None:
            _check_data("data", data, 1)
        inputs, targets = self.eval_data if data is None else data
        was_training = self.module.training
        self.module.eval()
        loss_sum, count, all_logits = 0.0, 0, []
        for start in range(0, len(inputs), self.config.eval_batch_size):
            batch = slice(start, start + self.config.eval_batch_size)
            with self._autocast():
                logits = self.module(inputs[batch].to(self.device))  # [b, T, V]
            batch_sum, batch_count = token_loss(logits, targets[batch].to(self.device))
            loss_sum, count = loss_sum + float(batch_sum), count + int(batch_count)
            if self.metric is not None:
                all_logits.append(logits.float())
        self.module.train(was_training)
        metrics = {"loss": loss_sum / max(count, 1)}
        if self.metric is not None:
            scores = self.metric(torch.cat(all_logits), targets.to(self.device))  # logits [N, T, V]
            metrics |= {name: float(value) for name, value in scores.items()}
        return metrics

    def save(self, step: int) -> None:
        """Writes the checkpoint of `step` completed steps to out_dir (rank 0; every rank sends its RNG state)."""
        if self.out_dir is None:
            raise ValueError("save needs config.out_dir")
        rng = distributed.gather_objects(rng_state())  # a collective: every rank calls save
        if distributed.is_main():
            meta = {"format": CHECKPOINT_FORMAT, "step": step, "config": self.config.to_dict(), "rng": rng,
                    "skips": self._skips.state() if self._skips is not None else None}
            save_checkpoint(self.out_dir, model=self.module, optimizer=self.optimizer, meta=meta)

    def _start(self) -> int:
        """Fresh run: seeds the torch RNG per rank (dropout) and starts a new metrics.jsonl; returns step 0."""
        torch.manual_seed(derive_seed(self.config.seed, TORCH_STREAM, distributed.rank()))
        if self.out_dir is not None and distributed.is_main():
            self.out_dir.mkdir(parents=True, exist_ok=True)
            (self.out_dir / METRICS_FILE).write_text("")
        return 0

    def _restore(self) -> int:
        """Loads out_dir's latest checkpoint (model, optimizer, RNG); returns the step to continue from."""
        path = latest_checkpoint(self.out_dir) if self.out_dir is not None else None
        if path is None:
            raise FileNotFoundError(f"resume=True but no checkpoint in out_dir={self.config.out_dir!r}")
        meta = load_checkpoint(path, model=self.module, optimizer=self.optimizer)
        changed = trajectory_changes(TrainConfig.from_dict(meta["config"]), self.config)
        if changed:
            raise ValueError(f"config differs from the checkpoint's in {changed}; resume needs them equal")
        step = meta["step"]
        if meta.get("skips") is not None:  # the counts go on where they were, so the skip limit resumes exactly
            self._skips.load(meta["skips"])
        if len(meta["rng"]) == distributed.world_size():
            set_rng_state(meta["rng"][distributed.rank()])
        else:
            warnings.warn(
                f"checkpoint has {len(meta['rng'])} ranks, run has {distributed.world_size()}: RNG reseeded,"
                " the resumed run is not bit-exact",
                stacklevel=2,
            )
            torch.manual_seed(derive_seed(self.config.seed, TORCH_STREAM, distributed.rank(), step))
        if distributed.is_main():
            self._truncate_metrics(step)
        return step

    def _truncate_metrics(self, step: int) -> None:
        """Drops the metrics.jsonl records written after the checkpoint, which the resumed run writes again."""
        path = self.out_dir / METRICS_FILE
        lines = path.read_text().splitlines() if path.exists() else []
        kept = [line for line in lines if line and json.loads(line)["step"] <= step]
        path.write_text("".join(line + "\n" for line in kept))

    def _record(self, event: str, record: dict[str, Any], history: dict, bar: tqdm) -> None:
        """Appends to the history, metrics.jsonl (rank 0) and the progress bar."""
        history[event].append(record)
        if self.out_dir is not None and distributed.is_main():
            with open(self.out_dir / METRICS_FILE, "a") as file:
                file.write(json.dumps({"event": event, **record}) + "\n")
        shown = {}
        if history["train"]:
            shown |= {"loss": history["train"][-1]["loss"], "tok/s": history["train"][-1]["tokens_per_s"]}
        if history["eval"]:
            last_eval = history["eval"][-1]
            name = self.config.target_metric or next((k for k in last_eval if k not in ("step", "loss")), "loss")
            shown[f"eval_{name}"] = last_eval[name]
        bar.set_postfix(shown, refresh=False)

    def _reached_target(self, metrics: dict[str, float]) -> bool:
        name = self.config.target_metric
        if name is None:
            return False
        if name not in metrics:
            raise ValueError(f"config.target_metric {name!r} is not among the eval metrics {sorted(metrics)}")
        return metrics[name] >= self.config.target_value

    def _autocast(self) -> contextlib.AbstractContextManager:
        if not self.config.bf16:
            return contextlib.nullcontext()
        # a CUDA graph cannot keep autocast's cache of cast weights (make_graphed_callables' documentation)
        return torch.autocast(device_type=self.device.type, dtype=torch.bfloat16,
                              cache_enabled=not self.config.cuda_graphs)
