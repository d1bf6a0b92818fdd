"""Benchmarks of topologies/: generation + all-pairs tables (time, peak memory), latency
lookups per second, IP-multicast baseline for the Zipf groups of the paper scenario.

    .venv/bin/python benchmarks/bench_topology.py [--seed 3] [--hosts 100000] [--groups 1500]
        [--json PATH]

Prints a Markdown table. Peak memory = growth of the process's max RSS during a step.
"""
from __future__ import annotations

import argparse
import resource
import time

import numpy as np
from report import add_json_option

from topologies import attach_hosts, generate_transit_stub
from topologies.baselines import ip_multicast, naive_unicast


def max_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def zipf_group_sizes(n_nodes: int, n_groups: int) -> np.ndarray:
    """gsize(r) = floor(N r^-1.25 + 0.5), r = 1..n_groups."""
    r = np.arange(1, n_groups + 1, dtype=np.float64)
    return np.floor(n_nodes * r ** -1.25 + 0.5).astype(np.int64)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--seed", type=int, default=3)
    ap.add_argument("--hosts", type=int, default=100_000)
    ap.add_argument("--groups", type=int, default=1500)
    ap.add_argument("--pairs", type=int, default=1_000_000)
    add_json_option(ap, "topology.json")
    args = ap.parse_args()
    rows = []

    rss0 = max_rss_mb()
    t = time.perf_counter()
    g = generate_transit_stub(preset="ts5050", seed=args.seed)
    t_gen = time.perf_counter() - t
    topo = attach_hosts(g, args.hosts, seed=args.seed)
    t = time.perf_counter()
    routes = topo.routes
    t_tab = time.perf_counter() - t
    table_mb = (routes.dist.nbytes + routes.pred.nbytes) / 2 ** 20
    rows.append(("ts5050 generation", f"{t_gen:.2f} s", f"{g.n_routers} routers, "
                 f"{g.n_edges} links, mean link delay {g.edge_delay_us.mean() / 1000:.1f} ms"))
    rows.append(("ts5050 all-pairs tables", f"{t_tab:.2f} s",
                 f"tables {table_mb:.0f} MB (int32 delay + int16 pred); peak RSS growth "
                 f"{max_rss_mb() - rss0:.0f} MB"))

    rng = np.random.default_rng(0)
    a = rng.integers(0, args.hosts, args.pairs)
    b = rng.integers(0, args.hosts, args.pairs)
    topo.latency(a[:1000], b[:1000])
    t = time.perf_counter()
    lat = topo.latency(a, b)
    t_lat = time.perf_counter() - t
    rows.append((f"latency, batch of {args.pairs:,} host pairs", f"{t_lat * 1000:.0f} ms",
                 f"{args.pairs / t_lat / 1e6:.1f} M lookups/s (mean {lat.mean() / 1000:.0f} ms)"))

    t = time.perf_counter()
    for i in range(1000):
        topo.path_links(int(a[i]), int(b[i]))
    t_pl = time.perf_counter() - t
    rows.append(("path_links, 1,000 single calls", f"{t_pl * 1000:.0f} ms",
                 f"{1000 / t_pl:,.0f} paths/s"))
    t = time.perf_counter()
    pair, link = topo.route_links(topo.host_router[a[:100_000]], topo.host_router[b[:100_000]])
    t_rl = time.perf_counter() - t
    rows.append(("route_links, 100,000 router pairs", f"{t_rl * 1000:.0f} ms",
                 f"{len(link):,} link rows"))

    sizes = zipf_group_sizes(args.hosts, args.groups)
    t = time.perf_counter()
    n_links = 0
    for size in sizes:
        members = rng.choice(args.hosts, size=int(size), replace=False)
        _, ids, _ = ip_multicast(topo, int(members[0]), members)
        n_links += len(ids)
    t_ipm = time.perf_counter() - t
    rows.append((f"IP multicast, {args.groups} Zipf groups of {args.hosts:,} hosts "
                 f"({int(sizes.sum()):,} members)", f"{t_ipm:.2f} s",
                 f"{n_links:,} tree links in all (incl. member sampling)"))
    members = rng.choice(args.hosts, size=args.hosts, replace=False)
    t = time.perf_counter()
    naive_unicast(topo, int(members[0]), members)
    rows.append(("naive unicast, one group of 100,000 members",
                 f"{(time.perf_counter() - t) * 1000:.0f} ms", ""))

    t = time.perf_counter()
    d = topo.describe()
    rows.append(("describe() (all pairs)", f"{time.perf_counter() - t:.2f} s",
                 f"policy routes longer than min-delay: "
                 f"{d['policy_routes_longer_than_min_delay']:.1%}"))
    print("| step | time | notes |\n|---|---|---|")
    for r in rows:
        print(f"| {r[0]} | {r[1]} | {r[2]} |")
    if args.json:
        from report import write_record
        write_record(args.json, f"bench_topology, ts5050, {args.hosts:,} hosts", {
            "generation_s": t_gen, "all_pairs_s": t_tab, "all_pairs_mb": table_mb,
            "latency_m_per_s": args.pairs / t_lat / 1e6, "path_links_ms": t_pl * 1000,
            "route_links_ms": t_rl * 1000, "ip_multicast_s": t_ipm,
            "rows": [{"step": r[0], "time": r[1], "notes": r[2]} for r in rows]})


if __name__ == "__main__":
    main()
