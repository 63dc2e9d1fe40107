"""Three disjoint splits per task (tasks/base.py, `split_data`): training, validation (which chooses the learning
rate and stops early) and test (what is reported), and a run reads the test split only once it has trained."""

import dataclasses

import pytest
import torch

import regmem.lab.experiments.runs as runs_module
from regmem.lab.experiments.presets import PRESETS
from regmem.lab.experiments.runs import Run, build_task, train_and_evaluate
from regmem.tasks import TASKS
from regmem.tasks.base import SPLITS, TEST_SEED_OFFSET, split_data, split_seed
from regmem.train import Trainer

# The formal languages of nl-formal-languages (Deletang et al.) hold fewer distinct strings up to the training
# length than a split draws (lang_aa: 32), so in-distribution examples necessarily repeat across splits; their
# held-out score is at lengths beyond training (experiments/repro/nl_formal.py).
SMALL_LANGUAGES = {name for name in TASKS if name.startswith("lang_")}
EXAMPLES = 256


def test_split_seeds_never_meet_across_runs():
    seeds = range(100)
    train = {split_seed(s, "train") for s in seeds}
    valid = {split_seed(s, "valid") for s in seeds}
    test = {split_seed(s, "test") for s in seeds}
    assert test.isdisjoint(train | valid) and min(test) == TEST_SEED_OFFSET
    assert all(len({split_seed(s, split) for split in SPLITS}) == 3 for s in seeds)


@pytest.mark.parametrize("name", sorted(set(TASKS) - SMALL_LANGUAGES))
def test_no_example_is_in_two_splits(name):
    task = build_task(name, PRESETS["quick"], {})
    rows = {}
    for split in SPLITS:
        inputs, targets = split_data(task, split, EXAMPLES, seed=0)
        rows[split] = {tuple(row) for row in torch.cat([inputs, targets], dim=1).tolist()}
    assert not rows["train"] & rows["valid"] and not rows["train"] & rows["test"] and not rows["valid"] & rows["test"]


@pytest.mark.parametrize("name", sorted(SMALL_LANGUAGES))
def test_a_small_language_repeats_strings_only_because_it_has_few(name):
    task = build_task(name, PRESETS["quick"], {})
    data = {split: split_data(task, split, EXAMPLES, seed=0)[0] for split in SPLITS}
    assert len({tuple(row) for row in data["test"].tolist()}) < EXAMPLES  # the language is smaller than a split
    assert not torch.equal(data["valid"], data["test"]) and not torch.equal(data["train"], data["test"])


def test_bad_split_raises_naming_it():
    with pytest.raises(ValueError, match="split must be one of train, valid, test"):
        split_data(build_task("mqar", PRESETS["tiny"], {}), "validation", 4, seed=0)


def test_a_run_reads_the_test_split_only_after_training(monkeypatch):
    events = []
    read = runs_module.split_data

    def recording_split_data(task, split, num_examples, *, seed):
        events.append(split)
        return read(task, split, num_examples, seed=seed)

    fit = Trainer.fit

    def recording_fit(self, *args, **kwargs):
        events.append("fit")
        return fit(self, *args, **kwargs)

    monkeypatch.setattr(runs_module, "split_data", recording_split_data)
    monkeypatch.setattr(Trainer, "fit", recording_fit)
    preset = dataclasses.replace(PRESETS["tiny"], steps=4, num_train=64, num_eval=32, eval_every=2)
    result = train_and_evaluate(Run("mqar", "linear", 1e-2, 3), preset, progress=False)
    assert events == ["train", "valid", "fit", "test"]
    assert set(result.test_metrics) == set(result.metrics) and result.test_metrics != result.metrics
