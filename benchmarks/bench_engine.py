"""Engine throughput: a flooding protocol with realistic fan-out on a ts5050 topology.

Measures, for K shards (round-robin and locality partitions), messages processed per second
in total and per shard, synchronisation rounds, wall time not spent inside shards (the
per-round overhead), for small batches (few seeds) and large ones (many seeds at once).

    python benchmarks/bench_engine.py [--nodes 50000] [--shards 1 2 4] [--seeds 20 5000]
        [--json PATH]
"""

from __future__ import annotations

import argparse
import functools
import os
import platform
import sys
import time
from pathlib import Path

import numpy as np

_ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(_ROOT), str(_ROOT / "tests")]
# Ray workers unpickle the test protocol by module name: give them the same path
os.environ["PYTHONPATH"] = os.pathsep.join([str(_ROOT), str(_ROOT / "tests"),
                                            os.environ.get("PYTHONPATH", "")])

from report import add_json_option  # noqa: E402 (benchmarks/ is on sys.path)

from emu_protocols import FLOOD_DTYPE, PING, TYPE_NAMES, Flood  # noqa: E402
from emulator import Emulator, RouterLatency, new_messages  # noqa: E402
from runtime.ray_spark import start_ray  # noqa: E402
from topologies import make_topology  # noqa: E402
from topologies.partition import partition_routers  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--nodes", type=int, default=50_000)
    ap.add_argument("--shards", type=int, nargs="+", default=[1, 2, 4])
    ap.add_argument("--seeds", type=int, nargs="+", default=[20, 5000])
    ap.add_argument("--fanout", type=int, default=4)
    ap.add_argument("--messages", type=int, default=2_000_000, help="about this many per run")
    add_json_option(ap, "engine_flood.json")
    a = ap.parse_args()
    start_ray()
    topo = make_topology("ts5050", 1, a.nodes)
    lat = RouterLatency.from_topology(topo)
    rows = []
    for seeds in a.seeds:
        hops = max(1, int(np.log(a.messages / seeds) / np.log(a.fanout)))
        for k in a.shards:
            for part in (["round-robin"] if k == 1 else ["round-robin", "locality"]):
                ns = None if part == "round-robin" else \
                    partition_routers(topo, k)[topo.host_router]
                emu = Emulator(a.nodes, lat, functools.partial(Flood, a.fanout, hops), shards=k,
                               node_shard=ns, seed=1, type_names=TYPE_NAMES, log_messages=False,
                               message_dtype=FLOOD_DTYPE)
                src = np.arange(seeds) * (a.nodes // seeds)
                emu.inject(new_messages(seeds, FLOOD_DTYPE, time=src % 1000, src=src, dst=src,
                                        type=PING))
                t0 = time.perf_counter()
                st = emu.run("bench")
                wall = time.perf_counter() - t0
                emu.shutdown()
                busy = np.array(st["busy_s"])
                rows.append((seeds, k, part, st["messages"], wall, st["messages"] / wall,
                             st["messages"] / wall / k, st["windows"],
                             emu.lookahead_us if k > 1 else None,
                             1000 * (wall - busy.max()) / max(st["windows"], 1),
                             100 * (wall - busy.max()) / wall))
                print(rows[-1], flush=True)
    print(f"\n{platform.node()} {platform.processor() or platform.machine()}, "
          f"{a.nodes} nodes, ts5050, fan-out {a.fanout}\n")
    print("| seeds | K | partition | messages | wall s | msg/s total | msg/s per shard | rounds "
          "| lookahead us | overhead ms/round | sync % |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r[0]} | {r[1]} | {r[2]} | {r[3]:,} | {r[4]:.2f} | {r[5]:,.0f} | {r[6]:,.0f} | "
              f"{r[7]:,} | {r[8] or '-'} | {r[9]:.2f} | {r[10]:.0f} |")
    if a.json:
        from report import write_record
        keys = ("seeds", "k", "partition", "messages", "wall_s", "msg_per_s", "msg_per_s_shard",
                "rounds", "lookahead_us", "overhead_ms_per_round", "sync_pct")
        figures = {f"msg_per_s_k{r[1]}_seeds{r[0]}" + ("" if r[2] == "round-robin" else
                                                       f"_{r[2]}"): r[5] for r in rows}
        figures["rows"] = [dict(zip(keys, r, strict=True)) for r in rows]
        write_record(a.json, f"bench_engine, {a.nodes:,} nodes", figures)


if __name__ == "__main__":
    main()
