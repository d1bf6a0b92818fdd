"""The driver's own work per round at K shards, without Ray: what `Emulator.run` does
around its one call (relayed rounds) besides the call itself.

Per round: the earliest times every shard is told (`earliest_causes`: the driver's bound,
exact for the EXACT_CAUSES earliest shards, O(K x EXACT_CAUSES); and, for comparison, the
exact one over every shard, O(K^2) numpy over the reach matrix), the shards due, and
reading the K shards' joined heads into the driver's per-shard state with the driver's own
`heads.RoundTally.add` (emulator/heads.py), `bound_left` included after a round that ended
early (every head here says it left, the costlier case). Random lookahead matrix; every
shard due. Reported: microseconds of wall time per round (one process, no other work), to
set beside Ray's own cost per call (benchmarks/bench_round_call.py) and the driver CPU per
round measured on real shards (benchmarks/bench_round_relay.py).

    python benchmarks/bench_driver_round.py [--shards 16 32 64 256 1000] [--json PATH]
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from report import add_json_option  # noqa: E402 (benchmarks/ is on sys.path)

from emulator import heads  # noqa: E402
from emulator.driver import EXACT_CAUSES, earliest_causes, reach_matrix  # noqa: E402

STATS = {"events": 3, "busy_s": 0.1, "cpu_s": 0.1, "wait_s": 0.1, "windows": 1,
         "done_until": 500_000, "left": True, "promises": 5, "wants": 1,
         "sent_min": {3: 510_000}, "pushed": [(1, 400_000, 420_000)], "reached": 502_000}


def per_round_us(k: int, rounds: int, exact: int | None) -> float:
    """Microseconds per round; ``exact``: the bound's EXACT_CAUSES (None: exact for all)."""
    rng = np.random.default_rng(1)
    reach = reach_matrix(rng.integers(2_000, 50_000, (k, k)).astype(np.int64))
    reach_min = reach.min(axis=0)
    next_at = rng.integers(400_000, 600_000, k).astype(np.int64)
    joined = heads.join([heads.head(s, 600_000 + s, STATS) for s in range(k)])
    inbox: list[list] = [[] for _ in range(k)]
    start = next_at.copy()
    tally = heads.RoundTally(next_at)
    t0 = time.perf_counter()
    for _ in range(rounds):
        next_at[:] = start          # (every round from the same state)
        earliest = earliest_causes(next_at, reach, reach_min, exact)
        due = np.flatnonzero(earliest < 1_000_000).tolist()
        arg = earliest.tobytes()                          # what the call carries
        stimuli = {s: inbox[s] for s in due if inbox[s]}
        if heads.count(joined) != len(due):
            raise SystemExit("every shard is due here")
        for s in due:
            inbox[s] = []
        tally.add(joined)
    del arg, stimuli
    return 1e6 * (time.perf_counter() - t0) / rounds


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shards", type=int, nargs="+", default=[16, 32, 64, 256, 1000])
    add_json_option(ap, "driver_round.json")
    a = ap.parse_args()
    print(f"load {os.getloadavg()[0]:.1f}")
    print(f"| K | driver's own work per round, us (bound exact for {EXACT_CAUSES} shards, "
          "as the driver) | the same with the exact bound over every shard |")
    print("|---|---|---|")
    figures = {}
    for k in a.shards:
        n = 2000 if k <= 64 else 200
        ours, exact = per_round_us(k, n, EXACT_CAUSES), per_round_us(k, n, None)
        figures.update({f"us_per_round_k{k}": ours, f"exact_us_per_round_k{k}": exact})
        print(f"| {k} | {ours:.0f} | {exact:.0f} |", flush=True)
    if a.json:
        from report import write_record
        write_record(a.json, "bench_driver_round", figures)


if __name__ == "__main__":
    main()
