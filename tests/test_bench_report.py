"""BENCHMARKS.md's tables are what the benchmarks' records give (benchmarks/report.py):
the page cannot drift from the measurements, and a changed record changes the page."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
REPORT = ROOT / "benchmarks" / "report.py"


def check(page: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(REPORT), "--check", "--page", str(page)],
                          capture_output=True, text=True, cwd=ROOT, timeout=120)


def test_benchmarks_page_matches_its_records():
    res = check(ROOT / "BENCHMARKS.md")
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-2000:]


def test_a_hand_edited_table_is_caught(tmp_path):
    text = (ROOT / "BENCHMARKS.md").read_text()
    start = text.index("<!-- report:end_to_end -->")
    row = next(ln for ln in text[start:].splitlines()
               if ln.startswith("| ") and "---" not in ln and "workload" not in ln)
    page = tmp_path / "BENCHMARKS.md"
    page.write_text(text.replace(row, row.replace(" s ", " s (edited) ", 1), 1))
    assert page.read_text() != text
    res = check(page)
    assert res.returncode != 0 and "edited" in res.stdout + res.stderr


def test_cost_model_reproduces_its_record_from_the_runs_it_names(tmp_path):
    """benchmarks/cost_model.py: a run's terms add up (CPU + windows x exchange + rounds x
    the driver's CPU per round), no exchange at K = 1, a local link's when K fits one
    machine, a Ray push's beyond it; and the committed prediction is what the model gives
    from the runs its record keeps (K = 64's rows are in scale_10k_k64)."""
    import json

    sys.path.insert(0, str(ROOT / "benchmarks"))
    import cost_model

    st = {"cpu_s": [0.4, 0.3], "windows": 100, "rounds": 10, "driver_cpu_s": 0.02,
          "messages": 5, "wall_s": 1.0}
    one = cost_model.predict_phase({**st, "cpu_s": [0.4]}, 16, 50.0, 1000.0)
    local = cost_model.predict_phase(st, 16, 50.0, 1000.0)
    remote = cost_model.predict_phase(st, 1, 50.0, 1000.0)
    assert one["sync_s"] == 0 and abs(local["sync_s"] - 100 * 50e-6) < 1e-12
    assert abs(remote["sync_s"] - 0.1) < 1e-12
    assert abs(remote["predicted_s"] - (0.4 + 0.1 + 10 * 0.002)) < 1e-12
    k64 = json.loads((ROOT / "benchmarks/results/scale_10k_k64.json").read_text())
    run = tmp_path / "k64.json"
    run.write_text(json.dumps(k64))
    out = tmp_path / "model.json"
    assert cost_model.main([str(run), "--machines", "4", "--cores", "16",
                            "--json", str(out)]) == 0
    got = json.loads(out.read_text())["figures"]
    want = json.loads((ROOT / "benchmarks/results/cost_model_k64.json").read_text())["figures"]
    for key in ("join_predicted_s_k64", "multicast_predicted_s_k64"):
        assert abs(got[key] - want[key]) < 1e-3, key
