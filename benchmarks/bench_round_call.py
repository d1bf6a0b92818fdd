"""The driver's CPU per shard call of a round, by how the round's arguments travel.

Each round the driver (emulator/driver.py) calls `run_round` on every shard that may have
work, with the round's number, era, limit, phase and the K earliest times, and gets back
(next event, stats). This measures the driver thread's CPU time per such call and its
result (``time.thread_time``: the driver's own work, not waiting for a core) on K real
Ray actors in this process's Ray, for the earliest times passed as a numpy array, raw
bytes, a list, or one shared object-store copy, and for the result as a stats dict (the
old head), the raw-bytes head of emulator/heads.py (read with numpy, as the driver does),
or a bare int.

    python benchmarks/bench_round_call.py [--shards 16] [--rounds 200] [--json PATH]
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import numpy as np
import ray

_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(_ROOT))
os.environ["PYTHONPATH"] = os.pathsep.join([str(_ROOT), os.environ.get("PYTHONPATH", "")])
from report import add_json_option  # noqa: E402 (benchmarks/ is on sys.path)

from emulator import heads  # noqa: E402

STATS = {"events": 10, "busy_s": 0.1, "cpu_s": 0.1, "wait_s": 0.1, "windows": 3,
         "done_until": 123_456, "left": True, "promises": 5, "wants": 1,
         "sent_min": {3: 1234, 5: 5678}, "pushed": [(1, 2, 3), (4, 5, 6)], "reached": 1234}


@ray.remote
class Shard:
    def run_round(self, number, era, limit, phase, earliest, *injected):
        return 1_234_567, dict(STATS)

    def head(self, number, era, limit, phase, earliest, *injected):
        return heads.head(7, 1_234_567, STATS)

    def bare(self, number, era, limit, phase, earliest, *injected):
        return 1


def per_call_us(shards, rounds, method, make_arg) -> float:
    """Driver thread CPU per call (us), `rounds` rounds of one call per shard."""
    c0 = time.thread_time()
    for r in range(rounds):
        arg = make_arg()
        got = ray.get([getattr(s, method).remote(r, 1, 1_000_000, "join", arg)
                       for s in shards])
        if method == "head":
            heads.read(heads.join(got))
    return (time.thread_time() - c0) / rounds / len(shards) * 1e6


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shards", type=int, default=16)
    ap.add_argument("--rounds", type=int, default=200)
    add_json_option(ap, "round_call.json")
    args = ap.parse_args()
    ray.init(address="local", num_cpus=2, include_dashboard=False, logging_level="ERROR")
    shards = [Shard.options(max_concurrency=2).remote() for _ in range(args.shards)]
    ray.get([s.bare.remote(0, 0, 0, "", b"") for s in shards])
    earliest = np.arange(args.shards, dtype=np.int64)
    cases = [("numpy array, stats dict", "run_round", lambda: earliest),
             ("raw bytes, stats dict", "run_round", earliest.tobytes),
             ("list, stats dict", "run_round", earliest.tolist),
             ("object-store copy, stats dict", "run_round", lambda: ray.put(earliest)),
             ("raw bytes, head bytes read with numpy", "head", earliest.tobytes),
             ("raw bytes, int", "bare", earliest.tobytes)]
    load = os.getloadavg()[0]
    print(f"K = {args.shards}, {args.rounds} rounds, load {load:.1f}")
    print("| earliest times, result | driver CPU us per call, run 1 | run 2 |")
    print("|---|---|---|")
    figures: dict = {"cases": {}}
    for label, method, make in cases:
        runs = [per_call_us(shards, args.rounds, method, make) for _ in range(2)]
        figures["cases"][label] = runs
        print(f"| {label} | {runs[0]:.0f} | {runs[1]:.0f} |")
    ray.shutdown()
    if args.json:
        from report import write_record
        every = [x for runs in figures["cases"].values() for x in runs]
        figures["driver_cpu_us_per_call_range"] = [min(every), max(every)]
        write_record(args.json, f"bench_round_call, K = {args.shards}", figures)


if __name__ == "__main__":
    main()
