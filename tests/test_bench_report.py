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
