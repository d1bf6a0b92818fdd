"""How fast is this host today? Three fixed workloads, to put beside a benchmark table.

The development VM's speed is not constant: on 2026-11-26 the same code's FreePastry
workload took 7.7-8.4 s in one session and 19-20 s in the next on a fresh VM of the same
size (BENCHMARKS.md). Absolute targets ("<= 10 s") only compare across sessions with the
host's speed beside them, so each BENCHMARKS.md section records this script's line:

- ``python``: a pure-Python loop (the interpreter: handler glue, the driver);
- ``numpy``: sorting 2 M int64 (memory bandwidth and vector code);
- ``numba``: a compiled loop of dependent integer operations (the kernels).

Each is the best of ``--repeat`` runs (the least disturbed by other load). O(1) work:
about a second per repeat.

    python benchmarks/bench_host.py [--repeat 5]
"""

from __future__ import annotations

import argparse
import os
import time

import numba
import numpy as np


def _python_loop(n: int = 3_000_000) -> int:
    total = 0
    for i in range(n):
        total += i & 7
    return total


@numba.njit(cache=True)
def _numba_loop(n: int) -> int:
    x = np.int64(1)
    for i in range(n):
        x = (x * 6364136223846793005 + i) & 0xFFFFFFFFFFFF
    return x


def _best(fn, repeat: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def measure(repeat: int = 5) -> dict[str, float]:
    """{"python": s, "numpy": s, "numba": s}: the best of `repeat` runs of each workload."""
    rng = np.random.default_rng(0)
    data = rng.integers(0, 1 << 40, 2_000_000)
    _numba_loop(10)   # compiled (or loaded from the cache) outside the timing
    return {"python": _best(_python_loop, repeat),
            "numpy": _best(lambda: np.sort(data), repeat),
            "numba": _best(lambda: _numba_loop(50_000_000), repeat)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    if args.repeat < 1:
        ap.error("--repeat must be at least 1")
    t = measure(args.repeat)
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(f"host: python {t['python']:.3f} s, numpy {t['numpy']:.3f} s, "
          f"numba {t['numba']:.3f} s (best of {args.repeat}; load {load:.2f}, "
          f"{os.cpu_count()} CPUs)")


if __name__ == "__main__":
    main()
