"""`regmem bench gpu` on the CPU at small shapes: the same pass and tables the GPU run writes."""

import json

import pytest
import torch

from regmem.lab.bench.cases import Shape
from regmem.lab.bench.gpu import FLA_KERNELS, LEADING_CASES, SKIPPED_CASES, gpu_table, run_gpu, time_call
from regmem.lab.cli import main

SMALL = {"op_shape": Shape(B=1, T=32, H=2, K=8, V=8, chunk_size=16), "op_dtype": torch.float32,
         "layer_shape": {"batch": 1, "seq_len": 32, "d_model": 32, "heads": 2}, "reps": 1}


def test_a_cpu_pass_times_every_asked_op_and_mixer_and_checks_the_targets():
    result = run_gpu("cpu", cases=["linear_attn", "deltaformer", "kernel_regression"],
                     mixers=["attn", "gated_deltanet", "hope"], compile_mixers=["attn"], compile_backend="eager",
                     budget_s=600, progress=lambda *_: None, **SMALL)
    ops = {r["op"]: r for r in result["ops"]}
    assert ops["sdpa (causal)"]["ms"] > 0 and ops["linear_attn"]["ms"] > 0 and ops["deltaformer"]["ms"] > 0
    assert ops["kernel_regression"]["error"].startswith("not run: a T x T Cholesky")
    layers = {r["mixer"]: r for r in result["layers"]}
    assert all(layers[m]["ms"] > 0 and layers[m]["tokens_per_s"] > 0 for m in ("attn", "gated_deltanet", "hope"))
    assert layers["attn"]["sync_free"] == "n/a" and layers["attn"]["compile_ms"] > 0
    assert "compile_ms" not in layers["hope"]
    table = gpu_table(result)
    assert "| Hope's training step over Gated DeltaNet's, eager (issue 29) |" in table
    assert "graph_ms" not in layers["hope"]  # CUDA graphs need CUDA: the CPU pass leaves the column empty
    assert ("| Hope's training step over Gated DeltaNet's, both replayed from CUDA graphs (issue 29) | not measured "
            "| 20x | – |") in table
    assert "| local-linear layer over attention's (issue 31) | not measured | 6x | – |" in table  # not asked for
    assert result["meta"]["device"] == "cpu" and json.dumps(result)  # JSON-serialisable as written


def test_the_graphed_column_and_its_target_compare_graphed_steps():
    result = run_gpu("cpu", cases=[], mixers=["gated_deltanet", "hope"], compile_mixers=[], budget_s=600,
                     progress=lambda *_: None, **SMALL)
    layers = {r["mixer"]: r for r in result["layers"]}
    layers["gated_deltanet"]["graph_ms"], layers["hope"]["graph_ms"] = 5.0, 60.0  # as a CUDA pass records them
    layers["hope"]["ms"] = 50 * layers["gated_deltanet"]["ms"]
    table = gpu_table(result)
    assert "| hope |" in table and "| 60.00 | 12.0x |" in table
    assert "| Hope's training step over Gated DeltaNet's, eager (issue 29) | 50.0x | 20x | no |" in table
    assert ("| Hope's training step over Gated DeltaNet's, both replayed from CUDA graphs (issue 29) | 12.0x | 20x "
            "| yes |") in table
    assert "both compiled and replayed from CUDA graphs (issue 29) | not measured | 20x | – |" in table
    layers["gated_deltanet"]["compile_graph_ms"], layers["hope"]["compile_graph_ms"] = 2.0, 30.0
    assert "both compiled and replayed from CUDA graphs (issue 29) | 15.0x | 20x | yes |" in gpu_table(result)
    layers["hope"]["graph_error"] = "RuntimeError: capture failed"
    del layers["hope"]["graph_ms"]
    table = gpu_table(result)
    assert "| – (RuntimeError: capture failed) |" in table
    assert "both replayed from CUDA graphs (issue 29) | not measured | 20x | – |" in table


def test_rows_past_the_budget_say_so_instead_of_running():
    result = run_gpu("cpu", cases=["linear_attn", "delta_rule"], mixers=["attn", "linear"], compile_mixers=[],
                     budget_s=0, progress=lambda *_: None, **SMALL)
    assert all(r["error"].startswith("not run: the budget's share") for r in result["ops"][1:])
    assert all(r["error"].startswith("not run: the budget's share") for r in result["layers"])
    assert "| linear_attn | – (not run: the budget's share for ops was spent) |" in gpu_table(result)


def test_a_failing_row_records_its_error_and_the_pass_goes_on(monkeypatch):
    import regmem.lab.bench.gpu as gpu

    real = gpu.op_step

    def broken(case, *args):
        if case.name == "linear_attn":
            raise RuntimeError("no kernel for this dtype\nsecond line")
        return real(case, *args)
    monkeypatch.setattr(gpu, "op_step", broken)
    result = run_gpu("cpu", cases=["linear_attn", "delta_rule"], mixers=[], compile_mixers=[], budget_s=600,
                     progress=lambda *_: None, **SMALL)
    assert result["ops"][1]["error"] == "RuntimeError: no kernel for this dtype"
    assert result["ops"][2]["ms"] > 0


def test_regmem_triton_kernels_are_timed_where_the_torch_form_failed(monkeypatch):
    """At the GPU shape a torch form can run out of memory where the op's Triton kernel fits: the kernel's column is
    still timed, and the issue's target judged on it."""
    import regmem.lab.bench.gpu as gpu

    real = gpu.op_step

    def torch_runs_out_of_memory(case, tokens, options, kwargs, *args):
        if case.name == "least_squares_cg" and kwargs.get("backend") == "torch":
            raise RuntimeError("CUDA out of memory (a stand-in)")
        return real(case, tokens, options, kwargs, *args)
    monkeypatch.setattr(gpu, "op_step", torch_runs_out_of_memory)
    result = run_gpu("cpu", cases=["least_squares_cg"], mixers=[], compile_mixers=[], budget_s=600,
                     progress=lambda *_: None, **SMALL)
    row = result["ops"][1]
    assert row["error"].startswith("RuntimeError: CUDA out of memory") and row["triton_ms"] > 0
    target = next(line for line in gpu_table(result).splitlines() if "solver='cg', fwd+bwd over SDPA" in line)
    assert "not measured" not in target


def test_the_issues_cases_come_first_and_fla_kernels_name_real_cases():
    from regmem.lab.bench.cases import CASES

    assert set(LEADING_CASES) <= set(CASES) and set(FLA_KERNELS) <= set(CASES) and set(SKIPPED_CASES) <= set(CASES)


def test_time_call_reports_the_first_call_apart():
    calls = []
    first, ms = time_call(lambda: calls.append(1), torch.device("cpu"), reps=3)
    assert len(calls) == 4 and first >= 0 and ms >= 0


def test_bad_names_raise():
    with pytest.raises(ValueError, match="cases/mixers: unknown names"):
        run_gpu("cpu", cases=["flash"], mixers=[], compile_mixers=[])


def test_the_command_refuses_cuda_without_a_gpu_and_writes_its_table_on_cpu(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(SystemExit):
        main(["bench", "gpu", "--out-dir", str(tmp_path)])
    assert "argument --device: torch sees no CUDA device" in capsys.readouterr().err
    import regmem.lab.bench.gpu as gpu

    monkeypatch.setattr(gpu, "OP_SHAPE", SMALL["op_shape"])
    monkeypatch.setattr(gpu, "LAYER_SHAPE", SMALL["layer_shape"])
    main(["bench", "gpu", "--device", "cpu", "--ops", "linear_attn", "--mixers", "attn", "--no-compile",
          "--reps", "1", "--out-dir", str(tmp_path)])
    md = next(tmp_path.glob("*-gpu.md")).read_text()
    assert "| linear_attn |" in md and "| attn |" in md


def test_fla_rows_run_after_regmem_rows_on_the_same_tensors(monkeypatch):
    """A stand-in `fla.ops.linear_attn` (fla does not import without a GPU): the fla column is timed after every
    regmem row, on the case's tensors, and a refusal becomes the row's fla error."""
    import sys
    import types

    from regmem.ops import linear_attn
    from regmem.ops.linear_attn import fla_backend

    seen = []

    def chunk_linear_attn(q, k, v, normalize):
        seen.append((q.shape, normalize))
        return linear_attn(q, k, v)  # (o, state), as fla's kernels return

    def chunk_simple_gla(q, k, v, g, scale, initial_state, output_final_state):  # what backend="fla" calls
        seen.append(("regmem on fla", g, scale))
        return linear_attn(q, k, v, scale=scale, initial_state=initial_state, output_final_state=True)

    def chunk_delta_rule(*args, **kwargs):
        raise RuntimeError("Triton >= 3.4.0 and < 3.7.1 on Hopper GPUs produces incorrect results")
    for parent in ("fla", "fla.ops"):
        monkeypatch.setitem(sys.modules, parent, types.ModuleType(parent))
    for module, fn in (("linear_attn", chunk_linear_attn), ("delta_rule", chunk_delta_rule),
                       ("simple_gla", chunk_simple_gla)):
        monkeypatch.setitem(sys.modules, f"fla.ops.{module}", types.SimpleNamespace(**{fn.__name__: fn}))
    monkeypatch.setattr(fla_backend, "check_cuda", lambda q: None)  # CPU tensors stand in for CUDA ones
    order = []
    result = run_gpu("cpu", cases=["linear_attn", "delta_rule", "hla2"], mixers=[], compile_mixers=[], fla=True,
                     budget_s=600, progress=order.append, **SMALL)
    ops = {r["op"]: r for r in result["ops"]}
    assert ops["linear_attn"]["fla_ms"] > 0 and seen[0] == ((1, 32, 2, 8), False)
    # regmem's op on fla's kernel is timed next, through the op's frame (q scaled there, so fla gets scale 1)
    assert ops["linear_attn"]["regmem_fla_ms"] > 0 and ("regmem on fla", None, 1.0) in seen
    assert "with backend='fla' over fla's own call" in gpu_table(result)
    assert ops["delta_rule"]["fla_error"].startswith("RuntimeError: Triton >= 3.4.0")
    assert "regmem_fla_ms" not in ops["delta_rule"]  # fla's own call failed: nothing to compare with
    assert "fla_ms" not in ops["hla2"] and "fla_error" not in ops["hla2"]  # fla has no kernel for it
    assert [i for i, line in enumerate(order) if "(fla)" in line] == [5, 6]  # after the header, sdpa, 3 regmem rows
    assert "| linear_attn |" in gpu_table(result) and "x |" in gpu_table(result).split("| linear_attn |")[1][:80]
