"""Compile the protocol's numba kernels into their cache: a small faithful bootstrap and a
small keep-alive run (benchmarks/protocol_digest.py's two workloads, in this process).

tests/conftest.py starts this in the background, at low priority, when a test session
begins: a fresh checkout (CI) has no numba cache, and the Pastry kernels take minutes of
one core to compile (`handler_kernels.on_runs` alone ~1 minute), which the first protocol
tests would otherwise pay on the critical path, while the first test modules (the
analysis, on Spark) leave a core idle. It only fills the cache: a test compiles what is
not there yet itself, with the same result. Shared arrays are read-only in-process as on
Ray (`emulator.kernels.read_only`), so what compiles here is what the Ray runs load.
"""

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "benchmarks")]

from protocol_digest import run_faithful, run_workload  # noqa: E402

if __name__ == "__main__":
    run_faithful(60, 1)
    run_workload(60, 1)
