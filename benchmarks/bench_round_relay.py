"""The driver's CPU per round at K shards: rounds started directly (one call per shard)
against rounds relayed through the shards (one call: `ShardActor.relay_round`).

The real Emulator and ShardActors run the engine's test protocol (tests/emu_protocols.py
`Flood`: every ping received sends `fanout` more to random nodes, up to `hops`) on a
600-router transit-stub topology, pings injected at every shard so that every round has
every shard due. Reported per K and mode: rounds, windows, the driver thread's CPU per round
and per window (``time.thread_time``: its own work and Ray's call submission and result
unpickling, not waiting), and wall time. The flood is short on purpose: on a 2-core box K
shard processes share the cores, and what is measured is the driver, not the shards.

    python benchmarks/bench_round_relay.py [--shards 16 32 64] [--hops 3] [--repeat 2]
        [--modes direct relayed] [--json PATH]
"""

from __future__ import annotations

import argparse
import functools
import os
import sys
import tempfile
import time
from pathlib import Path

_ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(_ROOT), str(_ROOT / "tests")]
os.environ["PYTHONPATH"] = os.pathsep.join([str(_ROOT), str(_ROOT / "tests"),
                                            os.environ.get("PYTHONPATH", "")])

import numpy as np  # noqa: E402
import ray  # noqa: E402
from report import add_json_option  # noqa: E402 (benchmarks/ is on sys.path)

from emu_protocols import FLOOD_DTYPE, PING, TYPE_NAMES, Flood  # noqa: E402
from emulator import Emulator, RouterLatency, new_messages  # noqa: E402
from topologies import make_topology  # noqa: E402


def measure(lat, shards: int, relay_above: int, hops: int, fanout: int) -> dict:
    """One flood on `shards` shards; the driver's counters of its `run`."""
    with tempfile.TemporaryDirectory() as tmp:
        emu = Emulator(lat.n_hosts, lat, functools.partial(Flood, fanout, hops),
                       shards=shards, seed=5, run_dir=tmp, type_names=TYPE_NAMES,
                       message_dtype=FLOOD_DTYPE, log_messages=False,
                       relay_above=relay_above)
        try:
            starts = np.arange(shards)          # one ping per shard (round robin nodes)
            emu.inject(new_messages(shards, FLOOD_DTYPE, time=np.zeros(shards, np.int64),
                                    src=starts, dst=starts, type=PING))
            t0 = time.perf_counter()
            st = emu.run("p")
            wall = time.perf_counter() - t0
        finally:
            emu.shutdown()
    return {"rounds": st["rounds"], "windows": st["windows"], "calls": st["shard_calls"],
            "messages": st["messages"], "driver_cpu_s": st["driver_cpu_s"], "wall_s": wall}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shards", type=int, nargs="+", default=[16, 32, 64])
    ap.add_argument("--hops", type=int, default=3)
    ap.add_argument("--fanout", type=int, default=2)
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--modes", nargs="+", choices=("direct", "relayed"),
                    default=["direct", "relayed"])
    add_json_option(ap, "round_relay_k64.json", "the figures (driver_cpu_ms_per_round_kK, "
                    "relayed, and ..._direct, per repeat)")
    a = ap.parse_args()
    topo = make_topology("ts600", 1, 1500)
    lat = RouterLatency.from_topology(topo)
    ray.init(address="local", num_cpus=os.cpu_count(), include_dashboard=False,
             logging_level="ERROR")
    print(f"load {os.getloadavg()[0]:.1f}, {os.cpu_count()} cores, flood fanout {a.fanout} "
          f"hops {a.hops}, ts600 with 1,500 hosts")
    print("| K | rounds started | rounds | windows | driver calls | messages | "
          "driver CPU ms/round | driver CPU ms/window | wall s |")
    print("|---|---|---|---|---|---|---|---|---|")
    figures: dict = {}
    for k in a.shards:
        for _ in range(a.repeat):
            for mode in a.modes:
                above = 0 if mode == "relayed" else 1 << 30
                r = measure(lat, k, above, a.hops, a.fanout)
                tail = "" if mode == "relayed" else "_direct"
                for name, per in (("round", r["rounds"]), ("window", r["windows"])):
                    figures.setdefault(f"driver_cpu_ms_per_{name}_k{k}{tail}", []).append(
                        1000 * r["driver_cpu_s"] / max(per, 1))
                print(f"| {k} | {mode} | {r['rounds']} | {r['windows']} | {r['calls']} | "
                      f"{r['messages']:,} | {1000 * r['driver_cpu_s'] / max(r['rounds'], 1):.2f} | "
                      f"{1000 * r['driver_cpu_s'] / max(r['windows'], 1):.3f} | "
                      f"{r['wall_s']:.1f} |", flush=True)
    ray.shutdown()
    if a.json:
        from report import write_record
        write_record(a.json, "bench_round_relay", figures)


if __name__ == "__main__":
    main()
