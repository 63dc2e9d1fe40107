"""`regmem analyze snr` and `regmem bench snr` (arXiv:2505.19488, Sec. 2.1): a quick run writes the report, the
JSON and the plot, flags eq. 17's missing e^2, and the estimator's timing lands in a bench table.
`regmem analyze context-growth` (Vignette 3, Sec. 2.2.2): a quick run writes its three files, eq. 47 is eq. 46 for
square W_k, eq. 48 is flagged, the softmax memory's update decays like 1/t, and after a switch of maps the running
mean needs ~t0 tokens where DeltaNet needs a constant few."""

import json

from regmem.lab.cli import main


def test_analyze_snr_quick_writes_report_json_and_plot(tmp_path, capsys):
    main(["analyze", "snr", "--quick", "--out-dir", str(tmp_path), "--seed", "1"])
    report = (tmp_path / "snr.md").read_text()
    result = json.loads((tmp_path / "snr.json").read_text())
    assert (tmp_path / "snr.png").stat().st_size > 0
    assert len(result["grid"]) == 12 and result["settings"]["seed"] == 1
    flagged = {r["kernel"] for r in result["grid"] if r["flag"]}
    assert flagged == {"solu"}  # only eq. 17 is off, by e^2
    assert report.count("eq. 17 misses e^2") == 3
    assert {r["N"]: r["exp"] for r in result["min_head_dim"]}[10_000] == 32
    assert set(result["op_curves"]) == {"linear_attn", "delta_rule", "least_squares", "softmax_attn", "hla2",
                                            "deltaformer"}
    assert "wrote" in capsys.readouterr().out


def test_bench_snr_times_the_estimator(tmp_path, capsys):
    main(["bench", "snr", "--kernels", "linear", "--trials", "2", "--min-run-time", "0", "--out-dir", str(tmp_path)])
    (json_file,) = tmp_path.glob("*-snr.json")
    (row,) = json.loads(json_file.read_text())["rows"]
    assert row["N"] == 4096 and row["d_k"] == 64 and row["trials"] == 2 and row["seconds"] > 0
    assert "| linear | 4096 | 64 |" in next(tmp_path.glob("*-snr.md")).read_text()


def test_analyze_context_growth_quick_writes_report_json_and_plot(tmp_path, capsys):
    main(["analyze", "context-growth", "--quick", "--out-dir", str(tmp_path), "--seed", "1"])
    report = (tmp_path / "context-growth.md").read_text()
    result = json.loads((tmp_path / "context-growth.json").read_text())
    assert (tmp_path / "context-growth.png").stat().st_size > 0
    assert result["settings"]["seed"] == 1
    assert all(r["eq46_vs_eq47"] < 1e-12 for r in result["single_head"]["rows"])
    assert all(r["distance"][-1] < 0.1 * r["distance"][0] for r in result["single_head"]["rows"])
    assert all(r["eq48_vs_eq46"] > 0.05 and r["linear_values_vs_m"] < 1e-12 for r in result["multi_head"]["rows"])
    assert "| no (erratum: eq. 46 is the minimiser) |" in report
    assert abs(result["softmax"]["update_slope"] + 1) < 0.1
    assert abs(result["softmax"]["unnormalized_slope"] - 0.5) < 0.15
    for row in result["switch"]["rows"]:
        assert row["deltanet"] < 32 and 0.8 * row["t0"] < row["running_mean"] < 1.25 * row["t0"]
    assert "wrote" in capsys.readouterr().out
