"""Compile the protocols' numba kernels into their cache: Scribe's tree-repair world (a
protocol-built overlay with keep-alives, hop acks, heartbeats, failures and multicasts:
tests/test_scribe_repair.py's ``repair_run``), then a small faithful bootstrap and a small
keep-alive run (benchmarks/protocol_digest.py's two workloads), all in this process.

tests/conftest.py starts this in the background, at low priority, when a test session
begins: a fresh checkout (CI) has no numba cache, and the kernels take minutes of one core
to compile (Pastry's `handler_kernels.on_runs` alone ~1 minute), which the
first protocol tests would otherwise pay on the critical path, while the first test
modules (the analysis, on Spark) leave a core idle. The repair world goes first: it
reaches nearly every kernel (Pastry's join, keep-alive and hop-ack paths and Scribe's
compiled passes; 78 s from an empty cache beside a busy core, then 0.5 s), and the churn
scenario of the analysis tests, among the first to run, needs Scribe's. It only fills the
cache: a test compiles what is not there yet itself, with the same result. Shared arrays
are read-only in-process as on Ray (`emulator.kernels.read_only`), so what compiles here
is what the Ray runs load.
"""

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "benchmarks"), str(ROOT / "tests")]

from protocol_digest import run_faithful, run_workload  # noqa: E402

from test_scribe_repair import repair_run  # noqa: E402

if __name__ == "__main__":
    repair_run(1)
    run_faithful(60, 1)
    run_workload(60, 1)
