"""`regmem repro am-dag`: reachability on a directed acyclic graph (arXiv:2505.19488, Sec. 3.3, Fig. 7).

Each node of a graph listed in topological order names itself and its parent(s) (tasks/dag.py); the label says
whether a path leads from the first node to it. The n = 32 nodes form two trees of 16, so the label is balanced.
DeltaFormer's u = (I + A)^{-1} v is this computation in one layer: with the erase vector of a node pointing at its
parent, (I - P)^{-1} counts the paths (exact, P is nilpotent). The paper's claim (Fig. 7, curves only): multi-layer
Transformers struggle to reach 100 %, a one-layer DeltaFormer does very well (kappa_2 = softmax; the training
setup is not stated, so Listing 2's is used: experiments/repro/am_toys.py).

Every mixer gets a causal short convolution of width 2 on its q, k, v (and w) (`short_conv`, 0 = the earlier runs
without): a node is two tokens (id, parent id) labelled on the second, and without it one layer's key there sees
only the parent's id, so the construction cannot be expressed (experiments/repro/am_dag_handset.py says why width 2
suffices and why the tokenisation stays).

Rows: the hand-set one-layer construction, and the Transformer with 1 and 2 layers (4 with `--full`) and a one-layer
DeltaFormer with kappa_1 in {linear, exp, softmax, round2, round} (round2: rounding to two decimals, Fig. 4's caption;
round: Listing 2's integer rounding), each trained arm at its best lr of the grid by mean validation accuracy over the
seeds, and its test accuracy with the spread; `--full` uses more steps, lrs and seeds. The hand-set row is an LM whose
weights are set by hand (am_dag_handset.reachability_lm: linear kernels, the short convolution) scored by the task's
metric on the test sequences the trained arms are scored on; with more than one parent per node it cannot read the
tokens, and the row is the construction on the graph structure (regmem.analysis.reachability_construction).
"""

from __future__ import annotations

import dataclasses
import functools
from dataclasses import dataclass
from pathlib import Path

from regmem.analysis import reachability_construction
from regmem.lab.experiments.plots import pyplot, save_figure
from regmem.lab.experiments.protocol import RunStore, execute_bracketed, run_grid, summarize
from regmem.lab.experiments.repro.am_dag_handset import handset_token_accuracy
from regmem.lab.experiments.repro.am_swap import KAPPA_1
from regmem.lab.experiments.repro.am_toys import ToyBudget, arm, arm_bars, toy_preset, train_toy
from regmem.lab.experiments.repro.record import Repro
from regmem.tasks.base import split_seed
from regmem.tasks.dag import DAGReachabilityConfig, sample_graphs

_DF = {"rotary": False, "read_kernel": "softmax"}


def dag_arms(depths: tuple[int, ...], short_conv: int) -> dict[str, tuple[str, dict]]:
    arms = {f"Transformer, {n} layer{'s' if n > 1 else ''}":
            ("attn", arm(f"attn-{n}", n_layers=n, rotary=False, short_conv=short_conv)) for n in depths}
    for kernel in ("linear", "exp", "softmax", "round2", "round"):
        arms[f"DeltaFormer, kappa_1 = {kernel}"] = (
            "deltaformer", arm(f"df-{kernel}", **_DF, **KAPPA_1[kernel], short_conv=short_conv))
    return arms


@dataclass(frozen=True)
class DAGSettings:
    num_nodes: int = 32
    parents_per_node: int = 1
    depths: tuple[int, ...] = (1, 2)  # Transformer layers (--full adds 4)
    short_conv: int = 2  # width of every mixer's causal short convolution; 0 = none (the runs before issue 30)
    steps: int = 600
    batch_size: int = 64
    d_model: int = 32
    n_heads: int = 4
    lrs: tuple[float, ...] = (0.003, 0.01, 0.03)  # with (0.003, 0.01) every arm's best was an edge
    extend_grid: int = 2  # points added past a grid edge where a cell's best lr lies (protocol.execute_bracketed)
    seeds: tuple[int, ...] = (0, 1)
    num_eval: int = 512
    workers: int = 2


FULL = DAGSettings(depths=(1, 2, 4), steps=2000, batch_size=128, lrs=(0.001, 0.003, 0.01), seeds=(42, 0, 1))
QUICK = DAGSettings(num_nodes=8, depths=(1,), steps=3, batch_size=8, d_model=16, lrs=(0.01,), seeds=(0,), num_eval=16,
                    workers=1)


def handset_accuracy(settings: DAGSettings, seed: int) -> float:
    """The hand-set construction's accuracy on the test split of `seed` (the sequences train_toy reports):
    on the task's tokens with one parent per node, on the graph structure with more (module docstring)."""
    config = DAGReachabilityConfig(num_nodes=settings.num_nodes, parents_per_node=settings.parents_per_node)
    if settings.parents_per_node == 1:
        return handset_token_accuracy(config, settings.num_eval, seed=split_seed(seed, "test"))
    graphs = sample_graphs(config, settings.num_eval, seed=split_seed(seed, "test"))  # the graphs train_toy reports
    correct = sum(int((reachability_construction(parents, node_ids=ids) == reachable).sum())
                  for parents, ids, reachable in zip(graphs.parent_lists(), graphs.node_ids, graphs.reachable,
                                                     strict=True))
    return correct / graphs.reachable.numel()


def run(settings: DAGSettings, out_dir: Path, *, log=print, progress: bool = True) -> dict:
    """Every arm over lrs and seeds (runs stored under `out_dir`/am-dag-runs) and the hand-set layer per seed;
    {"settings", "handset", "rows"}."""
    fields = {"num_nodes": settings.num_nodes, "parents_per_node": settings.parents_per_node}
    budget = ToyBudget(steps=settings.steps, batch_size=settings.batch_size, num_eval=settings.num_eval,
                       d_model=settings.d_model, n_heads=settings.n_heads)
    preset = toy_preset(f"am-dag-n{settings.num_nodes}", budget, fields, fields)
    arms = dag_arms(settings.depths, settings.short_conv)
    runs = [run for mixer, setting in arms.values()
             for run in run_grid(["dag"], [mixer], [setting], settings.lrs, settings.seeds)]
    records = execute_bracketed(runs, preset, RunStore(out_dir / "am-dag-runs", preset), extend=settings.extend_grid,
                                progress=progress, log=log,
                      train=functools.partial(train_toy, budget=budget), workers=settings.workers)
    rows = []
    for summary in summarize(records):
        label = next(name for name, (_, s) in arms.items() if s["label"] == summary.setting["label"])
        rows.append({"arm": label, **dataclasses.asdict(summary)})
    rows.sort(key=lambda r: list(arms).index(r["arm"]))
    handset = [handset_accuracy(settings, seed) for seed in settings.seeds]
    return {"settings": dataclasses.asdict(settings), "handset": handset, "rows": rows}


def _conv_words(short_conv: int) -> str:
    return f"a short convolution of width {short_conv}" if short_conv else "no short convolution"


def _handset_words(parents_per_node: int) -> str:
    if parents_per_node == 1:
        return "weights set by hand, linear kernels, short conv 2, on the task's tokens"
    return "linear kernels, no training, on the graph structure"


def format_report(result: dict) -> str:
    s = result["settings"]
    lines = [
        "arXiv:2505.19488 Sec. 3.3, Fig. 7: reachability from the first node of a DAG in topological order, "
        f"n = {s['num_nodes']} nodes in two trees ({s['parents_per_node']} parent(s) per node), label accuracy % on "
        "fresh test graphs. Paper: multi-layer Transformers struggle to reach 100 %; a one-layer DeltaFormer does very "
        "well (kappa_2 = softmax).",
        f"Ours: {s['steps']} steps x batch {s['batch_size']}, d_model {s['d_model']}, {s['n_heads']} heads, "
        f"{_conv_words(s['short_conv'])} on every mixer, lr grid "
        f"{', '.join(f'{lr:g}' for lr in s['lrs'])} (each arm at its best by mean validation accuracy over seeds "
        f"{', '.join(map(str, s['seeds']))}): test mean (min-max). kappa_1 = round2 rounds to two decimals (Fig. 4's "
        "caption), round to integers (Listing 2).",
        "",
        "| arm | best lr | accuracy % |",
        "|---|---:|---:|",
        f"| hand-set 1-layer DeltaFormer ({_handset_words(s['parents_per_node'])}) | - | "
        f"{100 * min(result['handset']):.1f} |",
    ]
    lines += [f"| {r['arm']} | {r['best_lr']:g} | {100 * r['mean']:.1f} ({100 * r['low']:.1f}-{100 * r['high']:.1f}) |"
              for r in result["rows"]]
    mean = {r["arm"]: r["mean"] for r in result["rows"]}
    transformers = {a: m for a, m in mean.items() if a.startswith("Transformer")}
    deltas = {a: m for a, m in mean.items() if a.startswith("DeltaFormer")}
    best_t, best_d = max(transformers, key=transformers.get), max(deltas, key=deltas.get)
    lines += [
        "",
        f"- Best Transformer: {best_t} at {100 * transformers[best_t]:.1f} %; best one-layer DeltaFormer: "
        f"{best_d.split('= ')[1]} at {100 * deltas[best_d]:.1f} %. DeltaFormer ahead: "
        f"{'yes' if deltas[best_d] > transformers[best_t] else 'no'}; 100 % (>= 99.5 %) reached by a trained model: "
        f"{'yes' if max(mean.values()) >= 0.995 else 'no'}.",
        f"- The hand-set construction labels every node right on all {s['num_eval']} evaluation graphs per seed "
        f"({'their token sequences' if s['parents_per_node'] == 1 else 'their structure'}): "
        f"{'yes' if min(result['handset']) == 1.0 else 'no'} (what one layer can express, not what training finds).",
    ]
    return "\n".join(lines)


def plot_dag(result: dict, path: Path) -> None:
    plt = pyplot()
    rows = result["rows"]
    fig, ax = plt.subplots(figsize=(7, 3.5))
    arm_bars(ax, rows, metric="label accuracy", chance=0.5, chance_label="chance (balanced labels)")
    ax.axvline(100 * min(result["handset"]), color="green", linestyle="--", label="hand-set construction")
    ax.set_title("DAG reachability (arXiv:2505.19488 Fig. 7)")
    ax.legend(loc="lower right", fontsize=7)
    save_figure(fig, path, dpi=120)


REPRO = Repro(
    name="am-dag",
    help="Associative memory Fig. 7: DAG reachability, Transformer of 1 and 2 layers vs DeltaFormer and the "
         "hand-set layer (resumable; --full: depths 1/2/4, 2000 steps, 3 lrs, 3 seeds)",
    variants={"default": DAGSettings(), "quick": QUICK, "full": FULL},
    run=run, format_report=format_report, plot=plot_dag,
)
