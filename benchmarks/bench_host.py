"""How fast is this host today? Three fixed workloads, to put beside a benchmark table.

The development VM's speed is not constant: on 2026-11-26 the same code's FreePastry
workload took 7.7-8.4 s in one session and 19-20 s in the next on a fresh VM of the same
size (BENCHMARKS.md). Absolute targets ("<= 10 s") only compare across sessions with the
host's speed beside them, so each BENCHMARKS.md section records this script's line:

- ``python``: a pure-Python loop of 10 M steps (the interpreter: handler glue, the driver);
- ``numpy``: sorting 10 M int64 (memory bandwidth and vector code);
- ``numba``: a compiled walk of 10 M dependent look-ups through a random cycle over 4 M
  entries (the kernels' table look-ups: memory latency, which no compiler can hide).

Each is the best of ``--repeat`` runs (the least disturbed by other load). Fixed work:
about a second per repeat on the development VM.

    python benchmarks/bench_host.py [--repeat 5]
"""

from __future__ import annotations

import argparse
import os
import time

import numba
import numpy as np


def _python_loop(n: int = 10_000_000) -> int:
    total = 0
    for i in range(n):
        total += i & 7
    return total


@numba.njit(cache=True)
def _numba_walk(nxt, steps: int) -> int:
    i = 0
    for _ in range(steps):
        i = nxt[i]
    return i


def _random_cycle(n: int, rng) -> np.ndarray:
    """nxt such that 0 -> nxt[0] -> ... visits all n entries once (one random cycle)."""
    order = rng.permutation(n)
    nxt = np.empty(n, np.int64)
    nxt[order] = np.roll(order, -1)
    return nxt


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
    data = rng.integers(0, 1 << 40, 10_000_000)
    nxt = _random_cycle(4_000_000, rng)
    _numba_walk(nxt, 10)   # compiled (or loaded from the cache) outside the timing
    return {"python": _best(_python_loop, repeat),
            "numpy": _best(lambda: np.sort(data), repeat),
            "numba": _best(lambda: _numba_walk(nxt, 10_000_000), repeat)}


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
