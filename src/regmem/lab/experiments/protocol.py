"""The fair protocol of `regmem compare` and `regmem suite`: every mixer gets the same budget, its own best
learning rate from a grid, and at least two seeds.

Zoology (Arora et al. 2023, arXiv:2312.04927, Sec. 3 and App. E) and MAD (Poli et al. 2024, arXiv:2403.17844,
Sec. 3) tune the learning rate per model and report the best run: a single learning rate favours the mixers it
happens to suit. Here a *run* is one (task, mixer, setting, lr, seed) (`Run`, experiments/runs.py); runs with the
same (task, mixer, setting) form a *cell*. Each run trains on the task's training split, is evaluated (and stops
early) on its validation split and, once trained, is scored on its test split (tasks/base.py, `split_data`): a
record's "score" is its validation score, "test_score" its test score. A cell's learning rate is the one with the
best mean *validation* score over seeds; what the cell reports is the mean *test* score at that learning rate, with
its spread over the seeds (min and max), the learning rate and the validation mean beside it. No choice reads the
test split, so the reported number is not biased by the choice (`summarize`).

Runs are stored one JSON file each under `<run_dir>/runs/`, keyed by everything that fixes them (task, mixer,
setting, lr, seed and the preset's fields), so a command repeated after an interruption skips what finished. A
process trains a run only while it holds the run's lock (`<key>.lock`, released by the operating system if the
process dies), so two commands on one run directory share its runs: each is trained once, and each command waits for
the runs the other is training. `<run_dir>/sweep.json` records what the directory's sweep compares (command, task,
preset, swept field; `claim_sweep_dir`): a command of other such settings is refused.

A grid *brackets* a cell when the cell's best learning rate is interior to it (`bracket`): a best at an edge says
only that the optimum may lie beyond. `execute_bracketed` extends the grid past such an edge, one point at a time
by the grid's own spacing there (`next_lr`), until the best is interior or `extend` points were added; a report may
call a comparison negative only for cells so bracketed (tests/test_repro_index.py).

A run whose loss became non-finite has *diverged*: the Trainer stopped it (regmem/train/trainer.py), and it scores
the worst value (`diverged_score`: 0 for an accuracy), which enters the means like any other score. The tables
show a cell whose runs all diverged as "diverged@<step>" and say how many runs and cells diverged. A run stored
before the Trainer stopped such runs counts as diverged when its final evaluation loss is non-finite.
"""

from __future__ import annotations

import csv
import dataclasses
import io
import json
import math
import multiprocessing
import os
import statistics
import time
from collections.abc import Callable, Iterable
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from dataclasses import dataclass, field
from pathlib import Path

import torch
from tqdm.auto import tqdm

from regmem.lab.experiments.presets import Preset
from regmem.lab.experiments.runs import Run, RunResult, describe_differences, machine, train_and_evaluate
from regmem.storage import RunLock, read_json, temporary_path, write_atomic
from regmem.tasks import TASKS

# The default grid: the quick preset's 1e-2, a factor ~3 below and two above (with 3e-2 its top, ten of sixteen
# mixers were best at the top on MQAR; benchmarks/README.md).
LR_GRID = (3e-3, 1e-2, 3e-2, 1e-1)
SEEDS = (0, 1)  # the default seeds: two, the fewest that show a spread


LOWER_IS_BETTER = frozenset({"bits_per_byte"})  # the metrics ranked ascending; every other one descending


def higher_is_better(metric: str) -> bool:
    return metric not in LOWER_IS_BETTER


def score_of(task_name: str) -> tuple[str, bool]:
    """(metric name, higher is better) a task is ranked by: its `score_metric` (default "accuracy")."""
    name = getattr(TASKS[task_name], "score_metric", "accuracy")
    return name, higher_is_better(name)


def diverged_score(metric: str) -> float:
    """The score of a diverged run: the worst value, 0 for a higher-is-better metric (accuracy), +inf else."""
    return 0.0 if higher_is_better(metric) else math.inf


def run_diverged(record: dict) -> bool:
    """Whether a stored run diverged: the Trainer stopped it (`diverged_at_step`), or, stored before it stopped
    such runs, its final evaluation loss is non-finite."""
    loss = record.get("metrics", {}).get("loss")
    return record.get("diverged_at_step") is not None or (loss is not None and not math.isfinite(loss))


def run_score(record: dict, metric: str) -> float:
    """A stored run's validation score: its "score", or `diverged_score` where it diverged."""
    return diverged_score(metric) if run_diverged(record) else record["score"]


def run_test_score(record: dict, metric: str) -> float:
    """A stored run's test score: its "test_score", or `diverged_score` where it diverged."""
    return diverged_score(metric) if run_diverged(record) else record["test_score"]


def has_test_score(record: dict) -> bool:
    """Whether a stored run was scored on the test split; one stored before the splits were three holds only its
    validation score, and is trained again (`RunStore.load`)."""
    return "test_score" in record


def run_grid(tasks: Iterable[str], mixers: Iterable[str], settings: Iterable[dict], lrs: Callable | Iterable[float],
             seeds: Iterable[int]) -> list[Run]:
    """Every (task, setting, mixer, lr, seed); `lrs` is a grid, or a function (task, mixer) -> grid."""
    runs = []
    for task in tasks:
        for setting in settings:
            for mixer in mixers:
                grid = lrs(task, mixer) if callable(lrs) else lrs
                runs += [Run(task, mixer, lr, seed, dict(setting)) for lr in grid for seed in seeds]
    return runs


def missing_run_dirs(run_dirs: Iterable[str | Path]) -> list[str]:
    """The directories among `run_dirs` that hold no runs/ of finished runs."""
    return [str(d) for d in run_dirs if not (Path(d) / "runs").is_dir()]


class RunStore:
    """Finished runs as `<run_dir>/runs/<key>.json`: {"spec": ..., "result": ...}.

    `reuse` names other run directories read as well (never written): a run finished there, under the same
    key, counts as finished here, so a table can be assembled from earlier sweeps without training again."""

    def __init__(self, run_dir: str | Path, preset: Preset, reuse: Iterable[str | Path] = ()):
        self.dir = Path(run_dir) / "runs"  # made by the first save or claim: a store only read writes nothing
        self.preset = preset
        reuse = list(reuse)
        self.reuse = [Path(d) / "runs" for d in reuse]
        missing = missing_run_dirs(reuse)
        if missing:
            raise ValueError(f"reuse: no runs/ directory in {', '.join(missing)}")

    def path(self, run: Run) -> Path:
        return self.dir / f"{run.key(self.preset)}.json"

    def load(self, run: Run) -> dict | None:
        """The run's stored result, None when it is not finished; a result without a test score counts as not
        finished (`has_test_score`), so its run trains again and is then stored whole."""
        name = self.path(run).name
        for directory in (self.dir, *self.reuse):
            if (directory / name).exists():
                result = json.loads((directory / name).read_text())["result"]
                if has_test_score(result):
                    return result
        return None

    def save(self, run: Run, result: dict) -> None:
        """Writes the run's file whole (a unique temporary name, then renamed: no half file, no shared name)."""
        self.dir.mkdir(parents=True, exist_ok=True)
        write_atomic(self.path(run), json.dumps({"spec": run.to_dict(), "result": result}, indent=1))

    def claim(self, run: Run, block: bool = False) -> RunLock | None:
        """The run's lock, held by this process, when the run is not finished and no other process holds it (with
        `block`, after waiting for the one that does); None when it is finished, or held elsewhere."""
        self.dir.mkdir(parents=True, exist_ok=True)
        lock = RunLock(self.path(run).with_suffix(".lock"))
        if not lock.acquire(block=block):
            return None
        if self.load(run) is not None:  # finished by the process that held it
            self.release(run, lock)
            return None
        return lock

    def release(self, run: Run, lock: RunLock) -> None:
        """Gives the lock up; a finished run's lock file goes (whoever claims it later finds the run finished)."""
        lock.release(remove=self.load(run) is not None)


SWEEP_FILE = "sweep.json"  # what a run directory's sweep compares (`claim_sweep_dir`)


def check_sweep_dir(run_dir: str | Path, settings: dict) -> None:
    """ValueError naming each of `settings` (what a sweep compares: command, task, preset, swept field) on which the
    sweep stored in `run_dir` differs; a directory without one passes. Nothing is written."""
    path = Path(run_dir) / SWEEP_FILE
    if not path.exists():
        return
    differences = describe_differences(read_json(path), json.loads(json.dumps(settings)))
    if differences:
        raise ValueError(f"{str(run_dir)!r} holds a sweep of other settings: {'; '.join(differences)}; give another "
                         "run directory (runs of other sweeps are read with suite --reuse-runs)")


def claim_sweep_dir(run_dir: str | Path, settings: dict) -> None:
    """Records `settings` in a directory that has no sweep.json, then `check_sweep_dir`. The file is linked into
    place, which fails where it exists (os.link): of two commands starting on one new directory, one records its
    settings and the other is checked against them."""
    path = Path(run_dir) / SWEEP_FILE
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        temporary = temporary_path(path)
        try:
            temporary.write_text(json.dumps(settings, indent=1))
            os.link(temporary, path)
        except FileExistsError:
            pass
        finally:
            temporary.unlink(missing_ok=True)
    check_sweep_dir(run_dir, settings)


def train_run(run: Run, preset: Preset, progress: bool = False,
              evaluate: Callable[[Run, RunResult], dict] | None = None, device: str = "cpu",
              cuda_graphs: bool = False) -> dict:
    """Trains one run on `device` (`cuda_graphs`: TrainConfig's option); returns its numbers: score (validation),
    test_score, every metric of both splits, size, time, the machine it trained on (`machine`), and whatever
    `evaluate` (given the run and its result, the trained model included, moved back to the CPU) adds, e.g. NIAH's
    length x depth grid. A run's key does not name the machine: another kind of CPU or a GPU rounds differently,
    which a long run amplifies like another seed (experiments/runs.py), so a stored run is one sample of its setting,
    repeatable bit for bit only on its own machine kind."""
    trained = train_and_evaluate(run, preset, progress=progress, device=device, cuda_graphs=cuda_graphs)
    trained.model.cpu()
    metric, _ = score_of(run.task)
    extra = {} if evaluate is None else evaluate(run, trained)
    diverged = trained.diverged_at_step is not None
    score = diverged_score(metric) if diverged else trained.metrics[metric]
    test_score = diverged_score(metric) if diverged else trained.test_metrics[metric]
    return {"score": score, "test_score": test_score, **trained.row(), "metrics": trained.metrics,
            "test_metrics": trained.test_metrics, "stopped_early": trained.stopped_early,
            "diverged_at_step": trained.diverged_at_step, "machine": machine(device), **extra}


def execute(runs: list[Run], preset: Preset, store: RunStore, *, progress: bool = True,
            log: Callable[[str], None] = print, train: Callable = train_run, workers: int = 1) -> list[dict]:
    """Trains every run not already in `store`, with one progress bar over all of them (ETA from the runs done in
    this call); returns one record per run, in order: {**run.to_dict(), **result}.

    `workers` > 1 trains that many runs at once, each in its own process with one torch thread (`train` must then
    be picklable: a module-level function or a partial of one); with 1 they train in this process with its own
    thread count. The thread count changes a run's rounding (and so, over a long run, its score, as a seed does):
    each result records it (`machine`), and the committed sweeps ran with workers, one thread each. Two processes
    of `workers=1` on one machine oversubscribe its cores (each takes them all) and slow each other several-fold.
    A run is trained only under its lock (`RunStore.claim`): runs another process holds are left to it, and waited
    for once nothing else is left.
    """
    todo = [r for r in runs if store.load(r) is None]
    if len(todo) < len(runs):
        where = f"{store.dir}" + (f" or {', '.join(map(str, store.reuse))}" if store.reuse else "")
        log(f"[protocol] {len(runs) - len(todo)} of {len(runs)} runs already finished in {where}; skipped")
    bar = tqdm(total=len(todo), desc="runs", unit="run", disable=not progress or not todo, dynamic_ncols=True)
    pending = list(todo)

    def finished(run, result, seconds):
        if not has_test_score(result):  # stored, it would count as unfinished and train again on every call
            raise ValueError(f"train: the result of {run.mixer} lr={run.lr:g} seed={run.seed} has no test_score (the "
                             "test split's score, beside the validation \"score\"); got keys " + ", ".join(result))
        store.save(run, result)
        diverged = f", diverged at step {result.get('diverged_at_step')}" if run_diverged(result) else ""
        log(f"[protocol] {run.task} {run.mixer} {_setting_text(run.setting)}lr={run.lr:g} seed={run.seed}: "
            f"{score_of(run.task)[0]} validation {result['score']:.4f} test {result['test_score']:.4f}{diverged} "
            f"({seconds:.1f}s)")
        bar.update(1)

    def claim_next(block: bool) -> tuple[Run, RunLock] | None:
        """The first pending run this process can claim (with `block`, the first pending one, waited for); pending
        runs found finished by another process are counted and dropped."""
        for run in list(pending):
            lock = store.claim(run, block=block)
            if lock is not None:
                pending.remove(run)
                return run, lock
            if store.load(run) is not None:  # read once: finished by another process
                pending.remove(run)
                log(f"[protocol] {run.task} {run.mixer} {_setting_text(run.setting)}lr={run.lr:g} seed={run.seed}: "
                    "trained by another process")
                bar.update(1)
        return None

    if workers > 1 and len(todo) > 1:
        _execute_parallel(claim_next, lambda: bool(pending), finished, train, preset, store, workers, bar)
    else:
        while pending:
            claimed = claim_next(block=False) or claim_next(block=True)
            if claimed is None:
                continue
            run, lock = claimed
            bar.set_postfix_str(f"{run.task} {run.mixer} lr={run.lr:g} seed={run.seed}", refresh=True)
            try:
                finished(run, *_timed(train, run, preset))
            finally:
                store.release(run, lock)
    bar.close()
    return [{**r.to_dict(), **store.load(r)} for r in runs]


def _execute_parallel(claim_next, any_pending, finished, train, preset, store, workers, bar) -> None:
    """`execute`'s loop with a pool of `workers` processes: each free worker gets the next run this process can
    claim; with none to claim and none running, it waits for a run another process holds."""
    running = {}
    with worker_pool(workers) as pool:
        bar.set_postfix_str(f"{workers} workers", refresh=True)
        while any_pending() or running:
            while len(running) < workers and (claimed := claim_next(block=False)) is not None:
                running[pool.submit(_timed, train, claimed[0], preset)] = claimed
            if not running:
                claimed = claim_next(block=True)
                if claimed is not None:
                    running[pool.submit(_timed, train, claimed[0], preset)] = claimed
                continue
            done, _ = wait(running, return_when=FIRST_COMPLETED)
            for future in done:
                run, lock = running.pop(future)
                try:
                    finished(run, *future.result())
                finally:
                    store.release(run, lock)


def write_results(run_dir: Path, rows: list[dict], results: dict, board: str) -> None:
    """A sweep's tables: results.csv (`rows`, one per cell), results.json and leaderboard.md, each written whole and
    renamed into place, so two commands finishing on one run directory never interleave a file."""
    table = io.StringIO(newline="")
    writer = csv.DictWriter(table, fieldnames=list(rows[0]))
    writer.writeheader()
    writer.writerows(rows)
    write_atomic(run_dir / "results.csv", table.getvalue())
    write_atomic(run_dir / "results.json", json.dumps(results, indent=1))
    write_atomic(run_dir / "leaderboard.md", board)


def worker_pool(workers: int) -> ProcessPoolExecutor:
    """`workers` spawned processes with one torch thread each (spawned: no fork of a process that holds OpenMP
    threads)."""
    return ProcessPoolExecutor(max_workers=workers, mp_context=multiprocessing.get_context("spawn"),
                               initializer=torch.set_num_threads, initargs=(1,))


def _timed(train: Callable, run: Run, preset: Preset) -> tuple[dict, float]:
    start = time.perf_counter()
    result = train(run, preset)
    return result, time.perf_counter() - start


def _setting_text(setting: dict) -> str:
    return "".join(f"{k}={v} " for k, v in setting.items())


@dataclass(frozen=True)
class CellSummary:
    """A (task, mixer, setting) cell: the learning rate with the best mean validation score over seeds, and the test
    score there with its spread."""

    task: str
    mixer: str
    setting: dict
    metric: str
    best_lr: float
    mean: float  # the test score, mean over the seeds at best_lr
    low: float  # min over those seeds (test)
    high: float  # max over those seeds (test)
    seeds: int
    lr_means: dict  # every lr of the grid -> its mean validation score (what chose best_lr)
    parameters: int
    state_floats: int
    train_seconds: float  # mean over the best lr's seeds
    tokens_per_second: float
    diverged: int = 0  # runs among the best lr's seeds that diverged (each counted at `diverged_score`)
    diverged_at: int | None = None  # the earliest step at which one of those diverged (None: none, or not known)
    lr_diverged: dict = field(default_factory=dict)  # every lr of the grid with diverged runs -> how many
    valid_mean: float = math.nan  # the validation score at best_lr, mean over its seeds (lr_means[best_lr])
    grid: list = field(default_factory=list)  # the learning rates trained, ascending
    bracket: str = "single"  # where best_lr lies in grid: "interior", "low edge", "high edge" or "single" (one lr)

    def row(self) -> dict:
        flat = dataclasses.asdict(self)
        flat["setting"] = _setting_text(self.setting).strip()
        flat["lr_means"] = " ".join(f"{lr:g}:{m:.4f}" for lr, m in self.lr_means.items())
        flat["lr_diverged"] = " ".join(f"{lr:g}:{n}" for lr, n in self.lr_diverged.items())
        flat["grid"] = " ".join(f"{lr:g}" for lr in self.grid)
        return flat

    def shown(self, digits: int = 3) -> str:
        """The cell as a table shows it: the mean, "diverged@<step>" when every seed at the best lr diverged, and
        how many did when some did."""
        if self.diverged == self.seeds:
            return "diverged" if self.diverged_at is None else f"diverged@{self.diverged_at}"
        mean = f"{self.mean:.{digits}f}"
        return mean if not self.diverged else f"{mean} ({self.diverged}/{self.seeds} diverged)"

    def lr_text(self) -> str:
        """Every lr of the grid with its mean validation score, and how many of its runs diverged where any did."""
        diverged = {lr: f" ({n} diverged)" for lr, n in self.lr_diverged.items()}
        return ", ".join(f"{lr:g}: {m:.3f}{diverged.get(lr, '')}" for lr, m in self.lr_means.items())


def divergence_note(summaries: list[CellSummary]) -> str:
    """A leaderboard's line on diverged runs ("" when none diverged): how many runs, and how many cells report
    diverged runs at their best learning rate."""
    runs = sum(n for s in summaries for n in s.lr_diverged.values())
    if not runs:
        return ""
    cells = sum(s.diverged > 0 for s in summaries)
    return (f"Diverged (non-finite loss: the run stopped, and counts as 0 accuracy or the worst score): {runs} "
            f"run{'s' * (runs != 1)}; {cells} of {len(summaries)} cells at their best learning rate, shown as "
            f"diverged@<step> where every seed diverged.")


def pick_lr(lr_means: dict[float, float], higher: bool) -> float:
    """The learning rate with the best mean validation score (`higher`: the largest; else the smallest); ties go to
    the smaller lr."""
    if higher:
        return max(lr_means, key=lambda lr: (lr_means[lr], -lr))
    return min(lr_means, key=lambda lr: (lr_means[lr], lr))


def summarize(records: list[dict]) -> list[CellSummary]:
    """Groups runs into cells and picks each cell's best learning rate by its mean validation score (ties: the
    smaller lr); reports the test score at that learning rate. The pick reads no test score."""
    cells: dict[tuple, list[dict]] = {}
    for r in records:
        cells.setdefault((r["task"], r["mixer"], json.dumps(r["setting"], sort_keys=True)), []).append(r)
    summaries = []
    for (task, mixer, _), runs in cells.items():
        metric, higher = score_of(task)
        by_lr: dict[float, list[dict]] = {}
        for r in sorted(runs, key=lambda r: (r["lr"], r["seed"])):
            by_lr.setdefault(r["lr"], []).append(r)
        lr_means = {lr: statistics.fmean(run_score(r, metric) for r in rs) for lr, rs in by_lr.items()}
        lr_diverged = {lr: n for lr, rs in by_lr.items() if (n := sum(map(run_diverged, rs)))}
        best_lr = pick_lr(lr_means, higher)
        best = by_lr[best_lr]
        scores = [run_test_score(r, metric) for r in best]
        steps = [r["diverged_at_step"] for r in best if r.get("diverged_at_step") is not None]
        summaries.append(CellSummary(
            task=task, mixer=mixer, setting=runs[0]["setting"], metric=metric, best_lr=best_lr,
            mean=statistics.fmean(scores), low=min(scores), high=max(scores), seeds=len(scores), lr_means=lr_means,
            parameters=best[0]["parameters"], state_floats=best[0]["state_floats"],
            train_seconds=statistics.fmean(r["train_seconds"] for r in best),
            tokens_per_second=statistics.fmean(r["tokens_per_second"] for r in best),
            diverged=lr_diverged.get(best_lr, 0), diverged_at=min(steps, default=None), lr_diverged=lr_diverged,
            valid_mean=lr_means[best_lr], grid=sorted(lr_means),
            bracket=bracket(sorted(lr_means), best_lr, lr_means),
        ))
    return summaries


def bracket(grid: list[float], best_lr: float, lr_means: dict | None = None) -> str:
    """Where `best_lr` lies in the ascending `grid`: "interior", "low edge", "high edge", or "single" (one point).
    With `lr_means`, a best score that an interior point ties (a plateau, e.g. 100 % at several lrs) is interior:
    the tie rule's pick of the smallest such lr does not make the optimum lie beyond the grid."""
    if len(grid) < 2:
        return "single"
    if lr_means is not None and any(lr_means[lr] == lr_means[best_lr] for lr in grid[1:-1]):
        return "interior"
    if best_lr == grid[0]:
        return "low edge"
    return "high edge" if best_lr == grid[-1] else "interior"


def next_lr(grid: list[float], edge: str) -> float:
    """The point past `edge` ("low edge" or "high edge") of the ascending `grid` (>= 2 points), at the ratio of the
    two points at that edge, rounded to 3 significant digits: 0.01, 0.03 -> 0.09 above and 0.00333 below."""
    ratio = grid[1] / grid[0] if edge == "low edge" else grid[-1] / grid[-2]
    point = grid[0] / ratio if edge == "low edge" else grid[-1] * ratio
    return float(f"{point:.3g}")


def execute_bracketed(runs: list[Run], preset: Preset, store: RunStore, *, extend: int, log: Callable = print,
                      **kwargs) -> list[dict]:
    """`execute`, then up to `extend` rounds: every cell (task, mixer, setting) whose best learning rate is at an
    edge of its grid of >= 2 points trains the next point past that edge (`next_lr`) with the seeds of its best
    lr, so that the grid brackets it; a cell whose next point is no better ends interior. Returns every record."""
    records = execute(runs, preset, store, log=log, **kwargs)
    for _ in range(extend):
        extra = []
        for cell in summarize(records):
            if cell.bracket not in ("low edge", "high edge"):
                continue
            lr = next_lr(cell.grid, cell.bracket)
            chosen = [r for r in runs if (r.task, r.mixer, r.setting, r.lr) ==
                      (cell.task, cell.mixer, cell.setting, cell.best_lr)]  # every record comes from `runs`
            log(f"[protocol] {cell.task} {cell.mixer} {_setting_text(cell.setting)}best lr {cell.best_lr:g} is the "
                f"{cell.bracket} of {', '.join(f'{x:g}' for x in cell.grid)}: extending to {lr:g}")
            extra += [dataclasses.replace(r, lr=lr) for r in chosen]
        if not extra:
            break
        runs = runs + extra
        records += execute(extra, preset, store, log=log, **kwargs)
    return records
