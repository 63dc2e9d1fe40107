"""`regmem repro ttr-mqar`: Fig. 3 of *Test-time regression* (arXiv:2501.12352, Sec. 6).

One test-time-regression layer whose keys come from a length-2 short convolution (keys only), no MLP,
d_model = D_k (one head), trained on MQAR with P key-value pairs. The paper's claim (d_model 64): linear attention
solves MQAR when P <= d_model (P = 64) but not when P > d_model (P = 128: 128 keys cannot be orthogonal in 64
dimensions), while RLS, which accounts for the key covariance, solves it in both cases — memory capacity, not
sequence length, limits recall.

The paper gives no training settings (Sec. 6). The default run is scaled to fit 10 minutes on 2
CPU cores: d_model 32 with P = d_model / 2 and P = d_model (seq_len 4P), zoology's generator with vocabulary 512,
one learning rate, AdamW with warm-up and cosine decay, early stop at 99% held-out accuracy. `FULL` is
the paper's d_model 64, P in {64, 128} (hours on this CPU; `regmem repro ttr-mqar --full`). The RLS
layer trains with 30 conjugate-gradient steps per token (MesaNet's solver; `rls_solver="cholesky"` is exact and
~3x slower here); both settings are printed with the results.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path

from regmem.lab.experiments.presets import Preset
from regmem.lab.experiments.repro.record import Repro
from regmem.lab.experiments.runs import Run, train_and_evaluate


def claim(mixer: str, pairs: int, d_model: int) -> str:
    """The paper's claim for a layer at P pairs, by the ratio P / d_model (Sec. 6)."""
    if mixer == "rls":
        return "solves MQAR" + (" even with P > d_model" if pairs > d_model else "")
    if mixer == "linear":
        return "solves MQAR (P <= d_model)" if pairs <= d_model else "cannot solve it perfectly (P > d_model)"
    return ""


@dataclass(frozen=True)
class MQARSettings:
    cells: tuple[tuple[int, int], ...] = ((16, 64), (32, 128))  # (P pairs, seq_len), seq_len >= 4P
    mixers: tuple[str, ...] = ("linear", "rls")
    d_model: int = 32
    vocab_size: int = 512  # zoology: must exceed seq_len
    steps: int = 1500
    batch_size: int = 64
    lr: float = 1e-2
    num_eval: int = 128
    seed: int = 0
    rls_solver: str = "cg"  # MesaNet's 30 CG steps: ~3x faster than the exact Cholesky chunk form on CPU here


FULL = MQARSettings(cells=((64, 256), (128, 512)), d_model=64, vocab_size=1024, steps=5000)  # the paper's scale
QUICK = MQARSettings(cells=((8, 32), (16, 64)), d_model=16, vocab_size=128, steps=4, batch_size=8, num_eval=8)


def preset_for(settings: MQARSettings, pairs: int, seq_len: int) -> Preset:
    key_conv = {"short_conv": 2, "short_conv_on": "k", "qk_norm": True}  # the paper's length-2 key conv
    return Preset(
        name="ttr-mqar", d_model=settings.d_model, n_layers=1, n_heads=1, ffn="none",
        task={"vocab_size": settings.vocab_size, "seq_len": seq_len, "num_kv_pairs": pairs,
              "random_non_queries": False},
        steps=settings.steps, batch_size=settings.batch_size, lr=settings.lr,
        num_train=settings.steps * settings.batch_size, num_eval=settings.num_eval,
        eval_every=max(settings.steps // 10, 1),
        mixer_kwargs={name: {**key_conv, **({"solver": settings.rls_solver} if name == "rls" else {})}
                      for name in settings.mixers},
    )


def run(settings: MQARSettings, out_dir: Path, *, log=print, progress: bool = True) -> dict:
    """Trains every mixer at every (P, seq_len) cell (one run each, nothing stored under `out_dir`);
    {"settings", "rows"}."""
    rows = []
    for pairs, seq_len in settings.cells:
        preset = preset_for(settings, pairs, seq_len)
        for mixer in settings.mixers:
            log(f"[ttr-mqar] {mixer}, P={pairs}, seq_len={seq_len}")
            fields = train_and_evaluate(Run("mqar", mixer, seed=settings.seed), preset, progress=progress).row()
            rows.append({"mixer": mixer, "pairs": pairs, "seq_len": seq_len, **fields})
            log(f"[ttr-mqar]   accuracy {fields['accuracy']:.3f} in {fields['train_seconds']:.0f}s")
    return {"settings": asdict(settings), "rows": rows}


def format_report(result: dict) -> str:
    s = result["settings"]
    lines = [
        "TTR Fig. 3 (Sec. 6): MQAR with one memory layer + a length-2 key convolution, no MLP "
        "(paper: d_model 64, P in {64, 128})",
        f"d_model = D_k = {s['d_model']} (one head), vocab {s['vocab_size']}, {s['steps']} steps x batch "
        f"{s['batch_size']}, lr {s['lr']}, seed {s['seed']}; RLS trained with solver={s['rls_solver']!r}",
        "",
        "| layer | P | seq_len | accuracy | steps | paper's claim | train s |",
        "|---|---:|---:|---:|---:|---|---:|",
        *(f"| {r['mixer']} | {r['pairs']} | {r['seq_len']} | {r['accuracy']:.3f} | {r['steps']} | "
          f"{claim(r['mixer'], r['pairs'], s['d_model'])} | {r['train_seconds']:.0f} |" for r in result["rows"]),
    ]
    return "\n".join(lines)


def plot_rows(result: dict, path: Path) -> None:
    from regmem.lab.experiments.plots import plt, save_figure

    fig, ax = plt.subplots(figsize=(5.5, 4), dpi=120)
    labels = [f"P={r['pairs']}\nT={r['seq_len']}" for r in result["rows"] if r["mixer"] == result["rows"][0]["mixer"]]
    mixers = list(dict.fromkeys(r["mixer"] for r in result["rows"]))
    width = 0.8 / len(mixers)
    for i, mixer in enumerate(mixers):
        acc = [r["accuracy"] for r in result["rows"] if r["mixer"] == mixer]
        ax.bar([j + i * width for j in range(len(acc))], acc, width, label=mixer)
    ax.set_xticks([j + 0.4 - width / 2 for j in range(len(labels))], labels)
    ax.set_ylim(0, 1.02)
    ax.set_ylabel("MQAR accuracy")
    ax.set_title(f"TTR Fig. 3: one layer + key conv, d_model {result['settings']['d_model']}")
    ax.legend(loc="lower left")
    ax.grid(alpha=0.3, axis="y")
    save_figure(fig, path)


REPRO = Repro(
    name="ttr-mqar",
    help="Test-time regression Fig. 3: one layer + key conv on MQAR, linear attention vs RLS at P <= d_model and "
         "P > d_model (about 8 minutes; --full: the paper's d_model 64, P 64/128, hours)",
    variants={"default": MQARSettings(), "quick": QUICK, "full": FULL},
    run=run, format_report=format_report, plot=plot_rows,
)
