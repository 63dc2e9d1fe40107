"""`regmem repro am-stress` (arXiv:2505.19488, Fig. 5): the quick run writes its report, JSON and plot; the rounding
kernel tracks every swap with keys of coherence below 1/8 and the linear kernel falls apart past n = d."""

import json

from regmem.lab.experiments.repro import REPROS, run_repro


def test_quick_am_stress_prints_the_claim_beside_the_measured_table(tmp_path):
    assert "am-stress" in REPROS
    lines = []
    paths = run_repro("am-stress", tmp_path, variant="quick", log=lines.append)
    assert {p.name for p in paths.values()} == {"am-stress.md", "am-stress.json", "am-stress.png"}
    report = paths["report"].read_text()
    assert "Paper: Fig. 5" in report and report.strip() in "\n".join(lines)
    result = json.loads(paths["json"].read_text())
    assert [(c["n"], c["keys"]) for c in result["cells"]] == [
        (64, "orthonormal"), (64, "gaussian"), (256, "identity_hadamard"), (256, "gaussian"), (320, "optimised"),
        (320, "gaussian")]
    for cell in result["cells"]:
        assert f"| {cell['n']} | {cell['keys']} | {cell['coherence']:.3f} |" in report
        if cell["keys"] != "gaussian":
            assert cell["coherence"] < 1 / 8 and cell["round"] == 1.0
    linear = {c["n"]: c["linear"] for c in result["cells"] if c["keys"] != "gaussian"}
    assert linear[64] == 1.0 and linear[320] < 0.5
    assert all(c["holds"] for c in result["claims"])
    assert paths["plot"].read_bytes()[:4] == b"\x89PNG"
