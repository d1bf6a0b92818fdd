"""Pastry benchmarks: oracle bootstrap time/memory, protocol bootstrap (LocalEmulator),
routed next-hop decisions per second. Usage:
    python benchmarks/bench_pastry.py --oracle 10000 50000 100000 --protocol 2000 --routes 200000
    python benchmarks/bench_pastry.py --oracle --protocol 2000 5000 10000 [--rate R] [--profile N]
    ... [--json PATH]   (the figures as a record of benchmarks/report.py)
Uses the synthetic network of actors/pastry/synthetic.py (5050 routers)."""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from report import add_json_option  # noqa: E402 (benchmarks/ is on sys.path)

from actors.pastry.oracle import oracle_state  # noqa: E402
from actors.pastry.quality import route_paths, table_quality  # noqa: E402
from actors.pastry.synthetic import synthetic_network  # noqa: E402

FIGURES: dict = {}      # what --json writes


def _size(n: int) -> str:
    return f"{n // 1000}k" if n % 1000 == 0 else str(n)


def bench_oracle(n, routers):
    net = synthetic_network(n, routers, seed=1)
    t = time.perf_counter()
    st = oracle_state(np.arange(n), net["node_ids_hi"], net["node_ids_lo"], net["host_router"],
                      net["router_dist_us"], net["lan_us"])
    dt = time.perf_counter() - t
    print(f"oracle N={n}: {dt:.1f} s, state {st.nbytes() / 1e6:.0f} MB")
    FIGURES[f"oracle_s_{_size(n)}"] = dt
    FIGURES[f"state_mb_{_size(n)}"] = st.nbytes() / 1e6
    return net, st


def bench_routes(net, st, k):
    rng = np.random.default_rng(0)
    n = len(net["node_ids_hi"])
    kh = rng.integers(0, 2**64, k, dtype=np.uint64)
    kl = rng.integers(0, 2**64, k, dtype=np.uint64)
    t = time.perf_counter()
    _, hops, _ = route_paths(st, net["node_ids_hi"], net["node_ids_lo"],
                             rng.integers(0, n, k), kh, kl)
    dt = time.perf_counter() - t
    print(f"routes N={n}: {k} routes, {hops.sum()} hops in {dt:.2f} s = "
          f"{hops.sum() / dt:,.0f} hops/s, mean hops {hops.mean():.2f}")
    FIGURES.setdefault("hops_per_s", []).append(float(hops.sum() / dt))


def bench_protocol(n, routers, rate, quality=True):
    """Protocol bootstrap on the real engine in one process (LocalEmulator, one shard): wall
    and CPU seconds, per joined node, cells, messages; table quality against the oracle
    (optional: the oracle costs)."""
    from actors.messages import MSG_DTYPE
    from actors.pastry.protocol import Pastry
    from actors.pastry.quality import stack_states
    from emulator.latency import RouterLatency
    from emulator.local import LocalEmulator
    from scenarios.config import protocol_params
    net = synthetic_network(n, routers, seed=2)
    rate = rate or n / 10.0
    lat = RouterLatency(net["host_router"], net["router_dist_us"], net["lan_us"])
    t, c = time.perf_counter(), time.process_time()
    params, _ = protocol_params(n, pastry={"bootstrap": "protocol", "join_rate_per_s": rate})
    emu = LocalEmulator(lat, lambda: Pastry(None, params), shared=net, log_messages=False,
                        message_dtype=MSG_DTYPE)
    emu.run("bootstrap")
    dt, dc = time.perf_counter() - t, time.process_time() - c
    counters = [e.counters() for e in emu.engines]
    joined = sum(x["counts"].get("pastry_joined", 0) for x in counters) + 1
    cells = sum(x["cells"] for x in counters)
    msgs = sum(sum(x["sent_by_type"].values()) for x in counters)
    # messages of the passes the compiled cell loop handed back to the Python loop
    python = sum(x["python_events"] for x in counters) / max(sum(x["events"] for x in counters), 1)
    line = (f"protocol N={n} rate={rate:.0f}/s: {dt:.1f} s wall, {dc:.1f} s CPU, "
            f"{1e3 * dc / joined:.2f} ms CPU per joined node, {cells} cells, {msgs} messages "
            f"({msgs / joined:.0f} per node), {msgs / dc:,.0f} msg/s CPU, "
            f"{100 * python:.1f} % of them by the Python loop")
    if quality:
        g = stack_states(emu.call("export_state"), n)
        q = table_quality(g, net["node_ids_hi"], net["node_ids_lo"], net["host_router"],
                          net["router_dist_us"], net["lan_us"])
        line += ", quality " + ", ".join(f"{k} {v:.3f}" for k, v in q.items())
    print(line, flush=True)
    FIGURES[f"protocol_cpu_s_{_size(n)}"] = dc
    FIGURES[f"protocol_cpu_ms_per_node_{_size(n)}"] = 1e3 * dc / joined
    FIGURES[f"protocol_python_share_{_size(n)}"] = python
    return dc / joined


def profile_protocol(n, routers, rate, top=20):
    import cProfile
    import pstats
    pr = cProfile.Profile()
    pr.enable()
    bench_protocol(n, routers, rate, quality=False)
    pr.disable()
    pstats.Stats(pr).sort_stats("tottime").print_stats(top)


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--oracle", type=int, nargs="*", default=[10000])
    ap.add_argument("--protocol", type=int, nargs="*", default=[])
    ap.add_argument("--rate", type=float, default=0.0,
                    help="joins per second; 0: N/10 (every node arrives within 10 s)")
    ap.add_argument("--routes", type=int, default=100000)
    ap.add_argument("--routers", type=int, default=5050)
    ap.add_argument("--no-quality", action="store_true")
    ap.add_argument("--profile", type=int, default=0, help="cProfile a protocol run of N")
    add_json_option(ap, "pastry_oracle.json")
    a = ap.parse_args()
    for n in a.oracle:
        net, st = bench_oracle(n, a.routers)
        bench_routes(net, st, a.routes)
    for n in a.protocol:
        bench_protocol(n, min(a.routers, 500), a.rate, quality=not a.no_quality)
    if a.profile:
        profile_protocol(a.profile, min(a.routers, 500), a.rate)
    if a.json:
        from report import write_record
        write_record(a.json, "bench_pastry", FIGURES)
