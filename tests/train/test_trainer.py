"""The Trainer on a toy task: learning, exact resume, pickle-free atomic checkpoints, JSONL, validation, early
stop, the stop at a non-finite loss. The toy: target = (input + 1) mod V at two positions out of three, -100 at the
third."""

import json
import math

import pytest
import torch
from safetensors.torch import load_file
from torch import nn

from regmem.train import (
    IGNORE_INDEX,
    DivergenceWarning,
    TrainConfig,
    Trainer,
    batch_indices,
    checkpoint_step,
    latest_checkpoint,
    token_loss,
)
from regmem.train import checkpoint as checkpoint_module
from regmem.train import trainer as trainer_module

VOCAB, DIM, T = 32, 16, 8


class ToyLM(nn.Module):
    """Embedding -> dropout -> LayerNorm -> Linear: inputs [B, T] -> logits [B, T, VOCAB]."""

    def __init__(self, dropout: float = 0.1, seed: int = 0):
        super().__init__()
        torch.manual_seed(seed)
        self.embed = nn.Embedding(VOCAB, DIM)
        self.drop = nn.Dropout(dropout)
        self.norm = nn.LayerNorm(DIM)
        self.head = nn.Linear(DIM, VOCAB)

    def forward(self, inputs):
        return self.head(self.norm(self.drop(self.embed(inputs))))  # [B, T, VOCAB]


class Interrupted(Exception):
    pass


class CrashingLM(ToyLM):
    """Raises on the training forward number `crash_at` (1-based), as a killed job would stop."""

    def __init__(self, crash_at: int | None, **kwargs):
        super().__init__(**kwargs)
        self.crash_at, self.calls = crash_at, 0

    def forward(self, inputs):
        if self.training:
            self.calls += 1
            if self.calls == self.crash_at:
                raise Interrupted
        return super().forward(inputs)


def toy_data(num: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    inputs = torch.randint(0, VOCAB, (num, T), generator=torch.Generator().manual_seed(seed))
    targets = (inputs + 1) % VOCAB
    targets[:, ::3] = IGNORE_INDEX
    return inputs, targets


def accuracy(logits, targets):
    labelled = targets != IGNORE_INDEX
    return {"accuracy": float((logits.argmax(-1)[labelled] == targets[labelled]).float().mean())}


TRAIN, EVAL = toy_data(64, seed=1), toy_data(32, seed=2)


def config(**overrides) -> TrainConfig:
    values = dict(steps=12, batch_size=16, lr=3e-2, warmup_steps=3, eval_every=4, log_every=1, progress=False)
    return TrainConfig(**(values | overrides))


def read_jsonl(path):
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_loss_decreases_on_learnable_toy():
    result = Trainer(ToyLM(), config(steps=40), TRAIN, EVAL, accuracy).fit()
    losses = [record["loss"] for record in result["history"]["train"]]
    assert losses[-1] < 0.25 * losses[0]
    assert result["metrics"]["accuracy"] > 0.9
    assert result["step"] == 40 and not result["stopped_early"]


def test_loss_is_normalised_by_labelled_tokens_of_the_batch():
    model = ToyLM(dropout=0.0)
    cfg = config(steps=1, warmup_steps=0, grad_clip=None)
    rows = batch_indices(0, len(TRAIN[0]), cfg)
    with torch.no_grad():
        logits = model(TRAIN[0][rows])  # [B, T, V]
    expected = nn.functional.cross_entropy(logits.flatten(0, 1), TRAIN[1][rows].flatten(), ignore_index=-100)
    result = Trainer(model, cfg, TRAIN).fit()
    assert result["history"]["train"][0]["loss"] == pytest.approx(float(expected), rel=1e-6)


def assert_same_optimizer_state(actual: torch.optim.Optimizer, expected: torch.optim.Optimizer) -> None:
    actual_state, expected_state = actual.state_dict(), expected.state_dict()
    # Compared as JSON: the checkpoint stores betas as a JSON list, the fresh optimizer holds a tuple (same numbers).
    assert json.dumps(actual_state["param_groups"]) == json.dumps(expected_state["param_groups"])
    assert actual_state["state"].keys() == expected_state["state"].keys()
    for index, entries in expected_state["state"].items():
        assert actual_state["state"][index].keys() == entries.keys()
        for key, value in entries.items():
            assert torch.equal(actual_state["state"][index][key], value), (index, key)


def test_resume_from_a_mid_run_checkpoint_after_interruption_is_bit_exact(tmp_path):
    every, steps = 4, 12
    straight_cfg = config(steps=steps, out_dir=str(tmp_path / "straight"), checkpoint_every=every)
    straight = Trainer(ToyLM(), straight_cfg, TRAIN, EVAL, accuracy)
    straight_losses = [r["loss"] for r in straight.fit()["history"]["train"]]
    straight_rng = torch.get_rng_state()  # after every dropout draw of the run

    split_cfg = config(steps=steps, out_dir=str(tmp_path / "split"), checkpoint_every=every)
    metrics = tmp_path / "split" / "metrics.jsonl"
    with pytest.raises(Interrupted):  # killed during step 7: after the checkpoint of step 4, before that of step 8
        Trainer(CrashingLM(crash_at=every + 3), split_cfg, TRAIN, EVAL, accuracy).fit()
    assert read_jsonl(metrics)[-1]["step"] == every + 2  # steps 5 and 6 were logged, and are lost
    resumed = Trainer(CrashingLM(crash_at=None, seed=123), split_cfg, TRAIN, EVAL, accuracy)
    result = resumed.fit(resume=True)

    assert result["start_step"] == every and result["step"] == steps
    assert [r["loss"] for r in result["history"]["train"]] == straight_losses[every:]
    without_clock = [{k: v for k, v in r.items() if k != "tokens_per_s"} for r in read_jsonl(metrics)]
    assert without_clock == [
        {k: v for k, v in r.items() if k != "tokens_per_s"} for r in read_jsonl(tmp_path / "straight" / "metrics.jsonl")
    ]
    for (name, expected), actual in zip(
        straight.module.state_dict().items(), resumed.module.state_dict().values(), strict=True
    ):
        assert torch.equal(actual, expected), name
    assert_same_optimizer_state(resumed.optimizer, straight.optimizer)
    assert torch.equal(torch.get_rng_state(), straight_rng)


def test_checkpoint_is_safetensors_and_json_without_pickle(tmp_path, monkeypatch):
    cfg = config(out_dir=str(tmp_path), checkpoint_every=5)
    trainer = Trainer(ToyLM(), cfg, TRAIN, EVAL, accuracy)
    trainer.fit()
    path = latest_checkpoint(tmp_path)
    assert sorted(p.name for p in path.iterdir()) == ["manifest.json", "model.safetensors", "optimizer.safetensors",
                                                      "trainer.json"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["checkpoint", "metrics.jsonl"]
    model = load_file(path / "model.safetensors")
    for name, tensor in trainer.module.state_dict().items():
        assert torch.equal(model[name], tensor), name
    optimizer = load_file(path / "optimizer.safetensors")
    assert torch.equal(optimizer["state.0.exp_avg"], trainer.optimizer.state_dict()["state"][0]["exp_avg"])
    meta = json.loads((path / "trainer.json").read_text())
    assert meta["step"] == cfg.steps and TrainConfig.from_dict(meta["config"]) == cfg
    assert len(meta["rng"]) == 1 and meta["optimizer"]["param_groups"][0]["params"] == [0, 1]

    def no_torch_load(*args, **kwargs):
        raise AssertionError("torch.load (pickle) was called")

    monkeypatch.setattr(torch, "load", no_torch_load)
    assert Trainer(ToyLM(seed=7), cfg, TRAIN, EVAL, accuracy).fit(resume=True)["step"] == cfg.steps


def test_interrupted_write_keeps_the_last_good_checkpoint(tmp_path, monkeypatch):
    cfg = config(steps=4, out_dir=str(tmp_path), checkpoint_every=2)
    trainer = Trainer(ToyLM(), cfg, TRAIN)
    trainer.fit()
    good = {p.name: p.read_bytes() for p in latest_checkpoint(tmp_path).iterdir()}

    def fail(*args, **kwargs):
        raise OSError("disk full")

    monkeypatch.setattr(checkpoint_module, "save_file", fail)  # dies after model.safetensors is written
    with pytest.raises(OSError, match="disk full"):
        trainer.save(99)
    assert (tmp_path / "checkpoint.tmp" / "model.safetensors").exists()
    assert {p.name: p.read_bytes() for p in latest_checkpoint(tmp_path).iterdir()} == good
    monkeypatch.undo()

    (tmp_path / "checkpoint").rename(tmp_path / "checkpoint.old")  # killed between the two renames
    assert latest_checkpoint(tmp_path) == tmp_path / "checkpoint.old"
    resumed = Trainer(ToyLM(seed=5), cfg, TRAIN)
    assert resumed.fit(resume=True)["step"] == cfg.steps
    resumed.save(cfg.steps)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["checkpoint", "metrics.jsonl"]


def test_metrics_jsonl_has_one_object_per_event(tmp_path):
    cfg = config(steps=8, log_every=2, eval_every=4, out_dir=str(tmp_path))
    Trainer(ToyLM(), cfg, TRAIN, EVAL, accuracy).fit()
    records = read_jsonl(tmp_path / "metrics.jsonl")
    assert [(r["event"], r["step"]) for r in records] == [
        ("train", 2), ("train", 4), ("eval", 4), ("train", 6), ("train", 8), ("eval", 8)
    ]  # fmt: skip
    assert all({"loss", "lr", "grad_norm", "tokens_per_s"} <= r.keys() for r in records if r["event"] == "train")
    assert all({"loss", "accuracy"} <= r.keys() for r in records if r["event"] == "eval")


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("steps", 0),
        ("batch_size", -1),
        ("lr", 0.0),
        ("weight_decay", -0.1),
        ("betas", (0.9, 1.0)),
        ("warmup_steps", 13),
        ("min_lr_ratio", 1.5),
        ("grad_clip", 0.0),
        ("eval_every", 0),
        ("eval_batch_size", 0),
        ("log_every", 0),
        ("checkpoint_every", 0),
        ("seed", -1),
        ("bf16", 1),
        ("target_value", 0.99),
    ],
    ids=lambda v: str(v),
)
def test_config_validation_names_the_field(field, value):
    with pytest.raises(ValueError, match=f"TrainConfig.{field} "):
        config(**{field: value})


def test_config_rejects_checkpoints_without_out_dir_and_unknown_keys():
    with pytest.raises(ValueError, match="out_dir"):
        config(checkpoint_every=5)
    with pytest.raises(ValueError, match="learning_rate"):
        TrainConfig.from_dict(config().to_dict() | {"learning_rate": 1.0})


def test_resume_rejects_a_changed_trajectory(tmp_path):
    Trainer(ToyLM(), config(steps=4, out_dir=str(tmp_path), checkpoint_every=2), TRAIN).fit()
    with pytest.raises(ValueError, match="'lr'"):
        Trainer(ToyLM(), config(steps=4, lr=1e-3, out_dir=str(tmp_path), checkpoint_every=2), TRAIN).fit(resume=True)


def test_early_stop_at_target_metric(tmp_path):
    cfg = config(steps=200, eval_every=2, target_metric="accuracy", target_value=0.5, out_dir=str(tmp_path))
    result = Trainer(ToyLM(), cfg, TRAIN, EVAL, accuracy).fit()
    assert result["stopped_early"] and result["step"] < 200
    assert result["metrics"]["accuracy"] >= 0.5
    assert result["history"]["eval"][-1]["step"] == result["step"]


def test_default_optimizer_decays_matrices_only():
    trainer = Trainer(ToyLM(), config(), TRAIN)
    decayed, plain = trainer.optimizer.param_groups
    assert decayed["weight_decay"] == 0.1 and all(p.dim() == 2 for p in decayed["params"])
    assert plain["weight_decay"] == 0.0 and all(p.dim() == 1 for p in plain["params"])


def test_any_torch_optimizer_gets_the_schedule():
    model = ToyLM()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.5)
    result = Trainer(model, config(steps=4, warmup_steps=2), TRAIN, optimizer=optimizer).fit()
    assert [r["lr"] for r in result["history"]["train"][:2]] == [0.25, 0.5]


@pytest.mark.parametrize("bf16", [False, True])
def test_bf16_flag_runs_the_forward_in_bfloat16_and_trains(bf16):
    model, dtypes = ToyLM(), set()
    model.head.register_forward_hook(lambda module, inputs, output: dtypes.add(output.dtype))
    result = Trainer(model, config(bf16=bf16), TRAIN, EVAL, accuracy).fit()
    assert dtypes == {torch.bfloat16 if bf16 else torch.float32}  # training and evaluation forwards alike
    assert model.head.weight.dtype == torch.float32  # autocast: the parameters and the optimizer stay in float32
    losses = [r["loss"] for r in result["history"]["train"]]
    assert all(torch.isfinite(torch.tensor(losses))) and losses[-1] < 0.5 * losses[0]


def test_token_loss_ignores_unlabelled_tokens():
    logits = torch.randn(2, 3, VOCAB, dtype=torch.float64)
    targets = torch.tensor([[1, -100, 2], [-100, -100, 3]])
    loss_sum, count = token_loss(logits, targets)
    labelled = targets != -100
    expected = nn.functional.cross_entropy(logits[labelled], targets[labelled], reduction="sum")
    assert count == 3 and torch.allclose(loss_sum, expected, rtol=1e-12)


def parameters_of(model: nn.Module) -> dict[str, torch.Tensor]:
    return {name: p.detach().clone() for name, p in model.named_parameters()}


class PoisonedSteps(ToyLM):
    """ToyLM whose training forwards number `poisoned` (1-based, i.e. those steps) return NaN logits, or keep a
    finite loss and make the gradient infinite (`gradient=True`); `before[step]` holds the parameters that step
    started from."""

    def __init__(self, poisoned: set[int], gradient: bool = False, **kwargs):
        super().__init__(**kwargs)
        self.poisoned, self.gradient, self.calls, self.before = poisoned, gradient, 0, {}

    def forward(self, inputs):
        logits = super().forward(inputs)  # [B, T, VOCAB]
        if not self.training:
            return logits
        self.calls += 1
        self.before[self.calls] = parameters_of(self)
        if self.calls not in self.poisoned:
            return logits
        if self.gradient:
            logits.register_hook(lambda grad: grad * math.inf)
            return logits
        return logits * math.nan


@pytest.mark.parametrize("gradient", [False, True], ids=["nan-loss", "inf-gradient"])
def test_a_non_finite_step_is_skipped_counted_and_leaves_the_weights_as_they_were(tmp_path, gradient):
    model = PoisonedSteps({3, 5}, gradient=gradient)
    cfg = config(steps=8, log_every=4, out_dir=str(tmp_path), checkpoint_every=4)
    result = Trainer(model, cfg, TRAIN, EVAL, accuracy).fit()
    assert result["diverged_at_step"] is None and result["skipped_steps"] == 2 and result["step"] == 8
    for step in (3, 5):  # the weights after a skipped step are bitwise those before it
        after = model.before[step + 1]
        assert all(torch.equal(after[name], tensor) for name, tensor in model.before[step].items())
    changed = model.before[2]  # a finite step moves them
    assert not all(torch.equal(model.before[3][name], tensor) for name, tensor in changed.items())
    assert all(torch.isfinite(p).all() for p in model.parameters())
    records = [r for r in read_jsonl(tmp_path / "metrics.jsonl") if r["event"] == "train"]
    assert [(r["step"], r["skipped"]) for r in records] == [(4, 1), (8, 2)]


def test_a_skipped_step_is_undone_under_every_optimizer():
    """Each optimiser of `regmem train --optimizer` keeps finite weights through a NaN step and trains on after it."""
    from regmem.train.optimizers import OPTIMIZERS

    for name in OPTIMIZERS:
        model = PoisonedSteps({2})
        result = Trainer(model, config(steps=4, lr=1e-2, optimizer=name), TRAIN).fit()
        assert result["skipped_steps"] == 1 and result["diverged_at_step"] is None, name
        assert all(torch.equal(model.before[3][n], t) for n, t in model.before[2].items()), name
        assert all(torch.isfinite(p).all() for p in model.parameters()), name
        assert not all(torch.equal(model.before[4][n], t) for n, t in model.before[3].items()), name


def test_consecutive_non_finite_steps_stop_the_run_with_the_last_finite_weights(tmp_path):
    clean = Trainer(ToyLM(), config(steps=4, log_every=4, out_dir=str(tmp_path / "clean"), checkpoint_every=4), TRAIN)
    clean.fit()
    model = PoisonedSteps(set(range(6, 30)))
    cfg = config(steps=30, log_every=4, out_dir=str(tmp_path / "run"), checkpoint_every=4, max_consecutive_skips=3)
    message = (r"the loss or gradient was non-finite for 3 steps in a row from step 6 \(each skipped\); stopped at "
               r"step 8; last good checkpoint: step 4 at .*run/checkpoint")
    with pytest.warns(DivergenceWarning, match=message) as caught:
        result = Trainer(model, cfg, TRAIN, EVAL, accuracy).fit()
    assert result["diverged_at_step"] == 6 and result["step"] == 8 and result["metrics"] == {}
    assert result["divergence"] == str(caught[0].message)
    assert [r["step"] for r in result["history"]["train"]] == [4]  # step 8's read found the limit reached
    final = parameters_of(model)
    assert all(torch.equal(final[name], tensor) for name, tensor in model.before[6].items())  # as after step 5
    path = latest_checkpoint(tmp_path / "run")
    assert checkpoint_step(path) == 4
    kept = load_file(path / "model.safetensors")
    clean_model = load_file(tmp_path / "clean" / "checkpoint" / "model.safetensors")
    assert all(torch.equal(kept[name], tensor) for name, tensor in clean_model.items())  # the state after step 4
    last = read_jsonl(tmp_path / "run" / "metrics.jsonl")[-1]
    assert last == {"event": "diverged", "step": 6, "what": "loss", "stopped_at": 8, "checkpoint_step": 4,
                    "skipped": 3}


def test_a_resumed_run_counts_the_skips_in_a_row_from_its_checkpoint(tmp_path):
    """Steps 3 and 4 skipped before the checkpoint of step 4, step 5 after the resume: three in a row, the limit, as
    in one uninterrupted run."""
    cfg = config(steps=8, log_every=1, out_dir=str(tmp_path), checkpoint_every=4, max_consecutive_skips=3)

    class Stop(Exception):
        pass

    class StopsAfterStep4(PoisonedSteps):
        def forward(self, inputs):
            if self.training and self.calls == 4:
                raise Stop
            return super().forward(inputs)

    with pytest.raises(Stop):
        Trainer(StopsAfterStep4({3, 4}), cfg, TRAIN).fit()
    with pytest.warns(DivergenceWarning, match="for 3 steps in a row from step 3"):
        result = Trainer(PoisonedSteps({1}), cfg, TRAIN).fit(resume=True)  # its first forward is step 5
    assert result["diverged_at_step"] == 3 and result["skipped_steps"] == 3


def test_the_skip_limit_is_read_at_logging_steps_only_and_a_run_without_checkpoints_says_so():
    cfg = config(steps=40, log_every=10, eval_every=100, max_consecutive_skips=2)  # no checkpoints
    with pytest.warns(DivergenceWarning, match=r"for 2 steps in a row from step 2 \(each skipped\); stopped at step "
                      "10; last good checkpoint: none"):
        result = Trainer(PoisonedSteps({2, 3, 4}), cfg, TRAIN, EVAL, accuracy).fit()
    assert result["diverged_at_step"] == 2 and result["step"] == 10 and result["history"]["train"] == []


class Overflowing(torch.optim.SGD):
    """SGD that writes an infinity into the first parameter at its step number `at`, from finite gradients."""

    def __init__(self, params, at: int):
        super().__init__(params, lr=0.1)
        self.at, self.steps = at, 0

    @torch.no_grad()
    def step(self, closure=None):
        self.steps += 1
        super().step(closure)
        if self.steps == self.at:
            self.param_groups[0]["params"][0].fill_(math.inf)


def test_non_finite_parameters_are_never_checkpointed(tmp_path):
    cfg = config(steps=8, log_every=8, eval_every=8, out_dir=str(tmp_path), checkpoint_every=2)
    model = ToyLM()
    with pytest.warns(DivergenceWarning, match="the parameters became non-finite by step 4; stopped at step 4; last "
                      "good checkpoint: step 2"):
        result = Trainer(model, cfg, TRAIN, optimizer=Overflowing(model.parameters(), at=3)).fit()
    assert result["diverged_at_step"] == 4
    path = latest_checkpoint(tmp_path)
    assert checkpoint_step(path) == 2
    assert all(torch.isfinite(t).all() for t in load_file(path / "model.safetensors").values())


def test_non_finite_parameters_at_the_end_count_as_diverged():
    model = ToyLM()
    with pytest.warns(DivergenceWarning, match="the parameters became non-finite by step 4"):
        result = Trainer(model, config(steps=4, log_every=4), TRAIN,
                         optimizer=Overflowing(model.parameters(), at=3)).fit()
    assert result["diverged_at_step"] == 4


class NaNOnEvaluation(ToyLM):
    def forward(self, inputs):
        logits = super().forward(inputs)
        return logits if self.training else logits * math.nan


def test_a_non_finite_final_evaluation_counts_as_diverged():
    """Finite weights whose outputs overflow (fewer skipped steps left than the limit) are no finished model."""
    with pytest.warns(DivergenceWarning, match="the evaluation loss was non-finite at step 4; stopped at step 4"):
        result = Trainer(NaNOnEvaluation(), config(steps=4, eval_every=4), TRAIN, EVAL, accuracy).fit()
    assert result["diverged_at_step"] == 4 and result["metrics"] == {}


def test_a_finite_run_reports_no_divergence():
    result = Trainer(ToyLM(), config(steps=4), TRAIN, EVAL, accuracy).fit()
    assert result["diverged_at_step"] is None and result["divergence"] is None and result["step"] == 4


class Reads(torch.Tensor):
    """A tensor that counts the host reads (item, bool, int, float, tolist) of itself and of what is computed
    from it: on a GPU each is a sync."""

    count = 0
    READS = (torch.Tensor.item, torch.Tensor.__bool__, torch.Tensor.__int__, torch.Tensor.__float__,
             torch.Tensor.tolist)

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        if func in cls.READS:
            Reads.count += 1
        return super().__torch_function__(func, types, args, kwargs or {})


def test_the_loss_and_the_skip_counts_are_read_per_logging_step_not_per_step(monkeypatch):
    train_step, skips_read = Trainer._train_step, trainer_module._Skips.read

    def watched(self, step, done):
        loss, grad_norm = train_step(self, step, done)
        return loss.as_subclass(Reads), grad_norm.as_subclass(Reads)

    def read(self):
        Reads.count += 1
        return skips_read(self)

    monkeypatch.setattr(Trainer, "_train_step", watched)
    monkeypatch.setattr(trainer_module._Skips, "read", read)
    counts = []
    for steps in (10, 40):  # one logging step each
        Reads.count = 0
        Trainer(ToyLM(), config(steps=steps, warmup_steps=0, log_every=steps), TRAIN).fit()
        counts.append(Reads.count)
    assert counts[0] == counts[1] == 4  # the loss, the gradient norm and the skip counts at the one logging step, the
    # skip count for the result
