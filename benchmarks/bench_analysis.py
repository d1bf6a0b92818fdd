"""Benchmark of the Spark analysis at full paper scale on a real ts5050 topology.

Builds synthetic-but-realistic event logs (100,000 nodes, 1,500 Zipf groups with
gsize(r) = floor(N r^-1.25 + 0.5), ~395,000 members), runs `analysis.run_analysis` on local
RayDP Spark and prints the time of each metric section.

Synthetic logs (what differs from a real run is only where the hops go):
- each group's RP is a random node; its tree is a random recursive tree over its members
  (member i hangs under the RP or a uniformly chosen earlier member), so tree edges =
  members, and hops join random hosts: the worst case for the number of distinct
  (source router, destination router) pairs, which drives the route expansion cost;
- message rows: one JOIN hop (type 61, child -> parent, phase join) and one DATA hop (68,
  parent -> child, phase multicast) per tree edge, plus ~15 Pastry join-protocol hops per
  node (types 10-17, random endpoints) so the message table has a few million rows;
- delivery: one per member, delay = sum of host latencies along its tree path;
- tree_edge, membership, group, host, route (one Pastry route per node join and per
  Scribe JOIN), message_type;
- with --churn-messages K > 0: a stream of K messages to the groups of rank >= 100 with 2 % of
  the nodes failing mid-stream, half of them recovering 3 s later (publish, node_event;
  failed members miss the messages while down, members whose tree parent failed miss those
  of the next 2 s, as if their repair JOIN took that long: a rough but sized load).

Usage: .venv/bin/python benchmarks/bench_analysis.py [--out DIR] [--nodes N] [--groups G]
       [--seed S] [--churn-messages K] [--keep]
       .venv/bin/python benchmarks/bench_analysis.py --runs RUN_DIR... [--out DIR]
The second form times `cli.py analyze` (a fresh process: Ray, Spark start, analysis,
report) on a copy of each given run directory (made by `cli.py scenario`) and prints the
Spark start, the analysis sections and the whole command's wall time.
"""

from __future__ import annotations

import argparse
import json
import platform
import shutil
import sys
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from report import add_json_option

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

PARTS = 4   # files per table, like 4 shards


def zipf_sizes(n: int, groups: int) -> np.ndarray:
    r = np.arange(1, groups + 1, dtype=np.float64)
    return np.floor(n * r ** -1.25 + 0.5).astype(np.int64)


def write_table(run_dir: Path, table: str, phase: str, columns: dict) -> None:
    out = run_dir / "events" / table / "topo=0"
    out.mkdir(parents=True, exist_ok=True)
    n = len(next(iter(columns.values())))
    bounds = np.linspace(0, n, PARTS + 1).astype(np.int64)
    for k in range(PARTS):
        lo, hi = bounds[k], bounds[k + 1]
        cols = {"phase": pa.array(np.full(hi - lo, phase, dtype=object), pa.string())}
        cols.update({c: pa.array(v[lo:hi]) for c, v in columns.items()})
        pq.write_table(pa.table(cols), out / f"{phase}-shard{k}-0.parquet")


def build_trees(topo, sizes: np.ndarray, rng: np.random.Generator):
    """Per group: RP, members, parent of each member, delay RP -> member along the tree."""
    n = topo.n_hosts
    g_all, rp_all, par_all, mem_all, delay_all = [], [], [], [], []
    for g, size in enumerate(sizes.tolist()):
        members = rng.choice(n, size=size, replace=False).astype(np.int64)
        rp = int(rng.integers(n))
        members = members[members != rp]
        m = len(members)
        # random recursive tree: index 0 is the RP, member i (index i + 1) picks an earlier one
        pick = np.floor(rng.random(m) * (np.arange(m) + 1)).astype(np.int64)
        nodes = np.concatenate([[rp], members])
        parent = nodes[pick]
        edge = topo.latency(parent, members)
        # delay to the root: add the parent's edge delays up the chain (depth ~ e ln m steps)
        up = pick - 1                       # index into members of the parent, -1 = RP
        delay = edge.copy()
        cur = up.copy()
        while (cur >= 0).any():
            live = cur >= 0
            delay[live] += edge[cur[live]]
            cur[live] = up[cur[live]]
        g_all.append(np.full(m, g, np.int64))
        rp_all.append(rp)
        par_all.append(parent)
        mem_all.append(members)
        delay_all.append(delay)
    return (np.concatenate(g_all), np.array(rp_all, np.int64), np.concatenate(par_all),
            np.concatenate(mem_all), np.concatenate(delay_all))


def build_run(run_dir: Path, n: int, n_groups: int, seed: int, churn_messages: int,
              cache_dir: Path) -> dict:
    from topologies import make_topology

    t0 = time.perf_counter()
    topo = make_topology("ts5050", seed, n, cache_dir=cache_dir)
    (run_dir / "topology").mkdir(parents=True, exist_ok=True)
    topo.save(run_dir / "topology" / "topo-0.npz")
    t_topo = time.perf_counter() - t0
    rng = np.random.default_rng(seed)
    sizes = zipf_sizes(n, n_groups)
    group, rp, parent, member, delay = build_trees(topo, sizes, rng)
    def i32(a):
        return np.asarray(a, np.int32)

    write_table(run_dir, "host", "setup", {"node": i32(np.arange(n)),
                                           "router": i32(topo.host_router),
                                           "id_hex": np.array([f"{i:032x}" for i in range(n)],
                                                              dtype=object)})
    write_table(run_dir, "group", "create", {
        "group": i32(np.arange(n_groups)), "rank": i32(np.arange(1, n_groups + 1)),
        "size": i32(sizes), "rp": i32(rp), "creator": i32(rp),
        "id_hex": np.array(["0" * 32] * n_groups, dtype=object)})
    write_table(run_dir, "membership", "join", {"group": i32(group), "member": i32(member)})
    e = len(member)
    write_table(run_dir, "tree_edge", "multicast", {
        "group": i32(group), "parent": i32(parent), "child": i32(member),
        "variant": np.full(e, "scribe", dtype=object)})
    publish = 100_000_000 + group.astype(np.int64) * 1000
    # Pastry join-protocol hops: ~15 per node between random hosts
    n_pastry = 15 * n
    p_src = rng.integers(n, size=n_pastry)
    p_dst = rng.integers(n, size=n_pastry)
    p_time = np.sort(rng.integers(0, 50_000_000, size=n_pastry))
    p_arr = p_time + topo.latency(p_src, p_dst)
    write_table(run_dir, "message", "join", {
        "time": np.concatenate([p_time, np.full(e, 60_000_000)]),
        "arrival": np.concatenate([p_arr, np.full(e, 60_050_000)]),
        "type": np.concatenate([rng.integers(10, 18, size=n_pastry),
                                np.full(e, 61)]).astype(np.int16),
        "src": i32(np.concatenate([p_src, member])), "dst": i32(np.concatenate([p_dst, parent])),
        "group": i32(np.concatenate([np.full(n_pastry, -1), group]))})
    write_table(run_dir, "message", "multicast", {
        "time": publish, "arrival": publish + topo.latency(parent, member),
        "type": np.full(e, 68, np.int16), "src": i32(parent), "dst": i32(member),
        "group": i32(group)})
    write_table(run_dir, "delivery", "multicast", {
        "group": i32(group), "member": i32(member), "source": i32(rp[group]),
        "publish_time": publish, "time": publish + delay,
        "hops": rng.integers(1, 12, size=e).astype(np.int16), "seqno": np.zeros(e, np.int64),
        "variant": np.full(e, "scribe", dtype=object)})
    n_routes = n + e
    write_table(run_dir, "route", "join", {
        "origin": i32(np.concatenate([np.arange(n), member])),
        "root": i32(np.concatenate([rng.integers(n, size=n), rp[group]])),
        "type": np.concatenate([np.full(n, 12), np.full(e, 61)]).astype(np.int16),
        "start": np.zeros(n_routes, np.int64), "end": np.full(n_routes, 1000, np.int64),
        "hops": rng.binomial(5, 0.6, size=n_routes).astype(np.int16),
        "path_us": rng.integers(10_000, 400_000, size=n_routes)})
    names = {10: "pastry_join_start", 11: "pastry_join_req", 12: "pastry_join",
             13: "pastry_join_rows", 14: "pastry_join_leafs", 15: "pastry_join_nbrs",
             16: "pastry_announce", 17: "pastry_join_done", 61: "scribe_join",
             66: "scribe_mcast", 68: "scribe_data"}
    write_table(run_dir, "message_type", "setup", {
        "type": np.array(list(names), np.int16), "name": np.array(list(names.values()),
                                                                  dtype=object)})
    # the analysis takes the type codes from message_type and Pastry's b from config.toml
    (run_dir / "config.toml").write_text("[pastry]\nb = 4\n")
    stream = 0
    if churn_messages:
        stream = build_churn(run_dir, topo, rng, group, rp, parent, member, delay,
                             churn_messages, n_groups)
    return {"topology_s": round(t_topo, 2), "members": int(e),
            "message_rows": int(n_pastry + 2 * e), "route_rows": int(n_routes),
            "churn_expected": stream, "build_s": round(time.perf_counter() - t0, 2)}


def build_churn(run_dir, topo, rng, group, rp, parent, member, delay, k, n_groups) -> int:
    """K messages, 1 s apart, to every group of rank >= 100; 2 % of the nodes fail at the
    middle of the stream, half of them recover 3 s later."""
    n = topo.n_hosts
    sel = group >= 99
    g, m, d, p = group[sel], member[sel], delay[sel], parent[sel]
    t_msg = 200_000_000 + np.arange(k, dtype=np.int64) * 1_000_000
    fail_t = int(t_msg[k // 2])
    failed = rng.choice(n, size=n // 50, replace=False)
    back = failed[: len(failed) // 2]
    dead = np.zeros(n, bool)
    dead[failed] = True
    groups = np.arange(99, n_groups)
    write_table(run_dir, "publish", "churn", {
        "group": np.repeat(groups, k).astype(np.int32),
        "source": rp[np.repeat(groups, k)].astype(np.int32),
        "time": np.tile(t_msg, len(groups)), "variant": np.full(len(groups) * k, "scribe",
                                                                dtype=object)})
    write_table(run_dir, "node_event", "churn", {
        "node": np.concatenate([failed, back]).astype(np.int32),
        "time": np.concatenate([np.full(len(failed), fail_t),
                                np.full(len(back), fail_t + 3_000_000)]).astype(np.int64),
        "event": np.array(["fail"] * len(failed) + ["recover"] * len(back), dtype=object)})
    rows = np.repeat(np.arange(len(m)), k)
    t_pub = np.tile(t_msg, len(m))
    back_mask = np.zeros(n, bool)
    back_mask[back] = True
    # a failed member gets nothing from the failure on; a recovered one (which re-joined,
    # in this model at once) gets the messages published after its recovery again
    lost = dead[m[rows]] & (t_pub >= fail_t) & ~(back_mask[m[rows]]
                                                 & (t_pub >= fail_t + 3_000_000))
    # members below a failed parent are cut off until their repair JOIN lands (2 s here)
    lost |= dead[p[rows]] & (t_pub >= fail_t) & (t_pub < fail_t + 2_000_000)
    keep = ~lost
    rows, t_pub = rows[keep], t_pub[keep]
    write_table(run_dir, "delivery", "churn", {
        "group": g[rows].astype(np.int32), "member": m[rows].astype(np.int32),
        "source": rp[g[rows]].astype(np.int32), "publish_time": t_pub,
        "time": t_pub + d[rows], "hops": np.full(len(rows), 4, np.int16),
        "seqno": np.zeros(len(rows), np.int64), "variant": np.full(len(rows), "scribe",
                                                                   dtype=object)})
    return int(len(m) * k)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=Path("/tmp/scribe-emu-bench-analysis"))
    ap.add_argument("--nodes", type=int, default=100_000)
    ap.add_argument("--groups", type=int, default=1500)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--churn-messages", type=int, default=0)
    ap.add_argument("--cores", type=int, default=2)
    ap.add_argument("--memory", default="4GB")
    ap.add_argument("--keep", action="store_true", help="keep the run directory")
    add_json_option(ap)
    ap.add_argument("--runs", type=Path, nargs="+", help="time `cli.py analyze` on copies "
                    "of these run directories instead")
    args = ap.parse_args(argv)
    if args.runs:
        return time_analyze(args.runs, args.out, args.json)

    run_dir = args.out / "run"
    shutil.rmtree(run_dir, ignore_errors=True)
    info = build_run(run_dir, args.nodes, args.groups, args.seed, args.churn_messages,
                     args.out / "cache")
    print(f"logs built: {json.dumps(info)}", flush=True)

    from analysis import AnalysisOptions, run_analysis
    from runtime.ray_spark import start_spark, stop_ray, stop_spark

    t0 = time.perf_counter()
    spark = start_spark("bench-analysis", executors=1, cores=args.cores, memory=args.memory)
    t_spark = time.perf_counter() - t0
    try:
        options = AnalysisOptions(churn_phases=("churn",)) if args.churn_messages else None
        t0 = time.perf_counter()
        summary = run_analysis(run_dir, spark, options=options,
                               scenario_meta={"scenario": "bench_analysis"})
        wall = time.perf_counter() - t0
    finally:
        stop_spark()
        stop_ray()
    timing = summary["timing"]
    print(f"machine: {platform.node()} {platform.machine()}, {__import__('os').cpu_count()} "
          f"cores; python {platform.python_version()}")
    print(f"spark start: {t_spark:.1f} s; run_analysis wall: {wall:.1f} s")
    for k, v in timing.items():
        print(f"  {k}: {v:.1f} s")
    ls = summary["link_stress"]
    print("link stress totals:", {k: v["total"] for k, v in ls.items()})
    print("RAD p50 / RMD p50:", summary["delay_penalty"]["rad"]["p50"],
          summary["delay_penalty"]["rmd"]["p50"])
    if "churn" in summary:
        print("churn:", json.dumps(summary["churn"]))
    if args.json:
        from report import write_record
        write_record(args.json, f"bench_analysis, synthetic {args.nodes:,} nodes", {
            "spark_start_s": t_spark, "analysis_s": wall,
            **{f"{k}_s": v for k, v in timing.items()}})
    if not args.keep:
        shutil.rmtree(run_dir, ignore_errors=True)
    return 0


def time_analyze(runs: list[Path], out: Path, json_path: Path | None = None) -> int:
    """`cli.py analyze` on a copy of each run directory: Spark start, sections, wall."""
    import subprocess
    print(f"machine: {platform.node()} {platform.machine()}, "
          f"{__import__('os').cpu_count()} cores; load {__import__('os').getloadavg()[0]:.1f}")
    figures: dict = {}
    for run in runs:
        copy = out / f"analyze-{run.name}"
        shutil.rmtree(copy, ignore_errors=True)
        shutil.copytree(run, copy, ignore=shutil.ignore_patterns("checkpoints"))
        t0 = time.perf_counter()
        done = subprocess.run([sys.executable, str(ROOT / "cli.py"), "analyze", str(copy)],
                              capture_output=True, text=True)
        wall = time.perf_counter() - t0
        if done.returncode:
            print(f"{run.name}: analyze failed: {done.stderr.strip().splitlines()[-1:]}")
            continue
        timing = json.loads((copy / "summary.json").read_text())["timing"]
        sections = {k[len("analysis_"):]: v for k, v in timing.items()
                    if k.startswith("analysis_")}
        print(f"{run.name}: analyze wall {wall:.1f} s; Spark start "
              f"{timing.get('spark_start', float('nan')):.1f} s; analysis "
              f"{sections.pop('total'):.1f} s ({json.dumps(sections)}); "
              f"load {__import__('os').getloadavg()[0]:.1f}", flush=True)
        figures.update({f"{run.name}_analyze_wall_s": wall,
                        f"{run.name}_spark_start_s": timing.get("spark_start"),
                        f"{run.name}_analysis_s": timing.get("analysis_total")})
    if json_path:
        from report import write_record
        write_record(json_path, "bench_analysis --runs",
                     {k: v for k, v in figures.items() if v is not None})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
