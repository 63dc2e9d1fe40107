"""The length-generalisation split of `regmem compare --eval-lengths`: a run trained at its task's length is also
scored on fresh sequences of other lengths, and the leaderboard tables those scores at each cell's best lr.

A task takes part when it has a `seq_len` to change (`with_seq_len`, tasks/base.py's LengthTask) and changing it
moves the lengths it draws. The formal languages do not: their strings keep [min_len, max_len] at any seq_len, and
their length split is `bin(k)` (`regmem repro nl-formal-languages`), so they are refused here.
"""

from __future__ import annotations

import statistics

import torch

from regmem.lab.experiments.presets import Preset
from regmem.lab.experiments.protocol import CellSummary, RunStore, diverged_score, score_of
from regmem.lab.experiments.runs import Run, RunResult, build_task
from regmem.tasks.base import split_data


def check_eval_lengths(task_name: str, preset: Preset, settings: list[dict], eval_lengths) -> tuple[int, ...]:
    """`eval_lengths` sorted without repeats, after checking every length builds the task at every swept setting
    (before any run trains); ValueError naming eval_lengths otherwise."""
    lengths = tuple(eval_lengths)
    if any(isinstance(n, bool) or not isinstance(n, int) or n < 1 for n in lengths):
        raise ValueError(f"eval_lengths must be positive ints, got {list(lengths)}")
    for setting in settings if lengths else ():
        task = build_task(task_name, preset, setting)
        if not hasattr(task, "with_seq_len"):
            raise ValueError(f"eval_lengths: task {task_name!r} has no length split (no seq_len to change)")
        if hasattr(task, "bin"):
            raise ValueError(f"eval_lengths: task {task_name!r} keeps its string lengths at any seq_len; its length "
                             "split is bin(k) (regmem repro nl-formal-languages)")
        for n in lengths:
            try:
                task.with_seq_len(n)
            except ValueError as err:
                raise ValueError(f"eval_lengths: {n} does not build {task_name} at {setting or 'its preset'}: "
                                 f"{err}") from err
    return tuple(sorted(set(lengths)))


def refuse_stored_elsewhere(runs: list[Run], store: RunStore, lengths: tuple[int, ...]) -> None:
    """ValueError naming eval_lengths when a run already stored in `store` lacks a score at one of `lengths` (it was
    trained without them or with others), so nothing trains before the call fails."""
    for run in runs:
        stored = store.load(run)
        if stored is not None and not set(map(str, lengths)) <= set(stored.get("at_length", {})):
            raise ValueError(f"eval_lengths: {run.mixer} lr={run.lr:g} seed={run.seed} is stored in {store.dir} "
                             f"with scores at {stored.get('eval_lengths')}, not at every one of {list(lengths)}; "
                             "use another run_dir")


def scores_at_lengths(run: Run, trained: RunResult, *, preset: Preset, lengths: tuple[int, ...]) -> dict:
    """The trained model's score on `preset.num_eval` fresh sequences of the test split at each of `lengths` (the run's
    own test seed, tasks/base.py), in batches of about the training batch's tokens; a run that diverged in training, or
    whose outputs at a length are not finite, scores the metric's diverged value there."""
    metric, _ = score_of(run.task)
    task = build_task(run.task, preset, run.setting)
    if trained.model is None or trained.diverged_at_step is not None:
        return {"eval_lengths": list(lengths), "at_length": {str(n): diverged_score(metric) for n in lengths}}
    trained.model.eval()
    scores = {}
    for n in lengths:
        longer = task.with_seq_len(n)
        inputs, targets = split_data(longer, "test", preset.num_eval, seed=run.seed)
        batch = max(1, preset.batch_size * task.seq_len // n)
        with torch.no_grad():
            logits = torch.cat([trained.model(part) for part in inputs.split(batch)])
        finite = bool(torch.isfinite(logits).all())  # once per length, after training: not a hot path
        scores[str(n)] = longer.metric(logits, targets)[metric] if finite else diverged_score(metric)
    return {"eval_lengths": list(lengths), "at_length": scores}


def length_table(records: list[dict], summaries: list[CellSummary], lengths: tuple[int, ...],
                 preset: Preset) -> list[str]:
    """Markdown lines: each cell's training length and its score at each of `lengths`, mean (min-max) over the
    seeds of its best lr."""
    lines = [f"| mixer | setting | trained at T | {' | '.join(f'T = {n}' for n in lengths)} |",
             "|---|---|---:|" + "---:|" * len(lengths)]
    for s in summaries:
        best = [r for r in records if r["mixer"] == s.mixer and r["setting"] == s.setting and r["lr"] == s.best_lr]
        cells = []
        for n in lengths:
            values = [r["at_length"][str(n)] for r in best]
            cells.append(f"{statistics.fmean(values):.3f} ({min(values):.3f}-{max(values):.3f})")
        setting = ", ".join(f"{k}={v}" for k, v in s.setting.items()) or "-"
        train_len = build_task(s.task, preset, s.setting).seq_len
        lines.append(f"| {s.mixer} | {setting} | {train_len} | {' | '.join(cells)} |")
    return lines
