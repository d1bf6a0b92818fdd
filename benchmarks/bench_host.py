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

``--parallel N`` also runs each workload in N processes at once (each repeat started
together) and prints how many cores' worth of work they got done: N x (one process's time)
/ (the slowest of the N's time). Two shards of one emulation cannot go faster than that
against one shard, whatever the engine does: it is the host's ceiling for K = N against
K = 1. A VM whose vCPUs share a physical core (SMT siblings) or whose host is
busy shows it here.

    python benchmarks/bench_host.py [--repeat 5] [--parallel 2]
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import time

import numba
import numpy as np
from report import add_json_option


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


def _workloads() -> dict:
    rng = np.random.default_rng(0)
    data = rng.integers(0, 1 << 40, 10_000_000)
    nxt = _random_cycle(4_000_000, rng)
    _numba_walk(nxt, 10)   # compiled (or loaded from the cache) outside the timing
    return {"python": _python_loop,
            "numpy": lambda: np.sort(data),
            "numba": lambda: _numba_walk(nxt, 10_000_000)}


def measure(repeat: int = 5, barrier=None) -> dict[str, float]:
    """{"python": s, "numpy": s, "numba": s}: the best of `repeat` runs of each workload.
    With `barrier` (shared by processes measuring at once), every repeat starts together."""
    def wait():
        if barrier is not None:
            barrier.wait()
    out = {}
    for name, fn in _workloads().items():
        out[name] = _best(lambda fn=fn: (wait(), fn()), repeat) if barrier else _best(fn, repeat)
    return out


def _measure_into(repeat, barrier, results) -> None:
    results.put(measure(repeat, barrier))


def parallel_cores(n: int, repeat: int = 5) -> dict[str, float]:
    """Per workload, the cores' worth of work `n` processes get done at once:
    n x (the time alone) / (the slowest process's time with all n running).
    O(n x repeat) runs of each workload; the barrier's own wait is inside the timing but
    is microseconds against a workload's ~1 s."""
    alone = measure(repeat)
    ctx = multiprocessing.get_context("fork")
    barrier, results = ctx.Barrier(n), ctx.Queue()
    procs = [ctx.Process(target=_measure_into, args=(repeat, barrier, results)) for _ in range(n)]
    for p in procs:
        p.start()
    together = [results.get() for _ in procs]
    for p in procs:
        p.join()
    return {k: n * alone[k] / max(t[k] for t in together) for k in alone}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--parallel", type=int, default=0, metavar="N",
                    help="also run each workload in N processes at once")
    add_json_option(ap, "host.json")
    args = ap.parse_args()
    if args.repeat < 1:
        ap.error("--repeat must be at least 1")
    if args.parallel < 0 or args.parallel == 1:
        ap.error("--parallel must be 2 or more (0: not run)")
    t = measure(args.repeat)
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(f"host: python {t['python']:.3f} s, numpy {t['numpy']:.3f} s, "
          f"numba {t['numba']:.3f} s (best of {args.repeat}; load {load:.2f}, "
          f"{os.cpu_count()} CPUs)")
    figures = {f"{k}_s": v for k, v in t.items()}
    if args.parallel:
        c = parallel_cores(args.parallel, args.repeat)
        print(f"{args.parallel} processes at once got the work of: python {c['python']:.2f}, "
              f"numpy {c['numpy']:.2f}, numba {c['numba']:.2f} cores")
        figures.update({f"parallel_{k}_cores": v for k, v in c.items()},
                       parallel=args.parallel)
    if args.json:
        from report import write_record
        write_record(args.json, "bench_host", figures)


if __name__ == "__main__":
    main()
