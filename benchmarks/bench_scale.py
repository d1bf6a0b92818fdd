"""Scale-out: a scenario's emulation phases at K = 1, 2, 4, ... shards.

For each K, runs the scenario's emulation (no Spark analysis) on a local
Ray cluster of `--cluster-nodes` simulated nodes (`ray.cluster_utils.Cluster`; shards are
spread over them) and reports per phase: windows, shard calls, driver time per window
(the driver's own loop work, not waiting for shards; and its thread's CPU time, which
leaves out waiting for a core when K shard processes share a few), synchronisation share
(wall time outside the busiest shard), the busiest shard's CPU seconds in the phase and all
shards' (thread CPU of `advance`: below its wall time when shards wait for a core), the
longest any shard waited for its peers to take its outboxes (`deliver`), messages/s, and the peak
resident memory of the largest shard process. Since the shards synchronise among
themselves (emulator/shard_actor.py), "windows" are the busiest shard's windows and
"rounds" the driver's (with how many ended early because every shard went idle); "peer
wait" is the longest any shard waited for its peers' promises and for them to take its
pushes; "host busy cores" is the whole machine's CPU time in the phase (from /proc/stat,
every process: shards, the driver, Ray's daemons) over its wall time, which tells a phase
short of cores from one that waits. "cells" are the grid cells each shard processed
(`ShardEngine.cells`): every shard pays its handlers' fixed cost once per cell it has
messages in, so after the table each phase's shard CPU is fitted, over every shard of every
K run, as CPU = a x cells + b x events (least squares): a is that fixed cost per cell,
b the cost per message, and K = 2's ceiling against K = 1 on two cores follows from them
(why K = 2 is not twice as fast).

    python benchmarks/bench_scale.py [--scenario paper_zipf_1500] [--nodes 100000]
        [--groups 1500] [--shards 1 2 4 8 16 32 64] [--cluster-nodes 4]
        [--bootstrap oracle|protocol] [--set KEY=VALUE ...] [--phases join multicast]
        [--relay-above N] [--ray-pushes] [--profile-shards DIR] [--json PATH]

`--bootstrap protocol` with `--phases bootstrap` measures the Pastry join protocol (e.g. the
faithful arrival process: `--set pastry.join_rate_per_s=50 ...`); `--cluster-nodes 1` is
one Ray node, as `python cli.py scenario` starts on a laptop. `--json PATH` writes the
table and, per phase, `PHASE_wall_s_kK`, `PHASE_sync_ms_per_window_kK`, ...,
`PHASE_speedup_k2` (K = 1 over K = 2) and the fit `PHASE_fit_a_ms` / `PHASE_fit_b_us` as a
record of benchmarks/report.py (BENCHMARKS.md).
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import tempfile
import time
from pathlib import Path

_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(_ROOT))
os.environ["PYTHONPATH"] = os.pathsep.join([str(_ROOT), os.environ.get("PYTHONPATH", "")])

import numpy as np  # noqa: E402
import ray  # noqa: E402
from report import add_json_option  # noqa: E402 (benchmarks/ is on sys.path)

import emulator  # noqa: E402
import runtime.ray_spark  # noqa: E402
from scenarios import load_scenario, run_scenario, runner  # noqa: E402

PHASES = ("join", "multicast")     # the default phases reported
_EMULATOR = emulator.Emulator      # the real one: each K subclasses it afresh


def _host_busy_s() -> float:
    """CPU seconds the whole machine has spent busy since boot (not idle, not waiting for
    I/O), from /proc/stat; 0.0 where there is none."""
    try:
        with open("/proc/stat") as f:
            t = [int(x) for x in f.readline().split()[1:]]
    except OSError:
        return 0.0
    return (sum(t[:8]) - t[3] - t[4]) / os.sysconf("SC_CLK_TCK")


def measure(args, k: int, address: str) -> dict:
    """One emulation with K shards; per-phase driver stats and peak shard memory."""
    phases: dict[str, dict] = {}
    peak = []

    class Measured(_EMULATOR):
        def __init__(self, *a, **kw):
            if args.relay_above is not None:
                kw["relay_above"] = args.relay_above
            if args.ray_pushes:
                kw["local_links"] = False
            super().__init__(*a, **kw)

        def run(self, phase, until=None, progress=None):
            if args.profile_shards and not phases:
                self.profile_rounds()
            c0 = ray.get([a.counters.remote() for a in self._actors])
            busy0 = _host_busy_s()
            st = super().run(phase, until=until, progress=progress)
            busy = _host_busy_s() - busy0
            c1 = ray.get([a.counters.remote() for a in self._actors])
            done = list(zip(c0, c1, strict=True))
            phases[phase] = dict(st, host_busy_s=busy,
                                 cells=[b["cells"] - a["cells"] for a, b in done],
                                 shard_events=[b["events"] - a["events"] for a, b in done])
            w = max(st["windows"], 1)
            # (a long run's phases show as they end, before the table)
            print(f"K = {k}, {phase}: {st['windows']:,} windows, {st['wall_s']:.2f} s, "
                  f"driver CPU {1000 * st.get('driver_cpu_s', 0.0) / w:.3f} ms/window",
                  flush=True)
            return st

        def shutdown(self):
            peak.append(max(ray.get([a.peak_rss_bytes.remote() for a in self._actors])))
            if args.profile_shards:
                self.dump_profiles(Path(args.profile_shards).resolve() / f"K{k}")
            super().shutdown()

    emulator.Emulator = Measured
    runner._analyse = lambda *a, **kw: {}    # emulation only: the analysis is benchmarked apart
    runner._record_total = lambda *a, **kw: None
    cfg = load_scenario(args.scenario, nodes=args.nodes, groups=args.groups, topologies=1,
                        shards=k, bootstrap=args.bootstrap, sets=args.set)
    with tempfile.TemporaryDirectory(dir=args.tmp) as tmp:
        t0 = time.perf_counter()
        run_scenario(cfg, out=Path(tmp) / "run", address=address, progress=False)
        total = time.perf_counter() - t0
    return {"k": k, "phases": phases, "peak_rss": peak[0] if peak else 0, "total_s": total,
            "load": os.getloadavg()[0]}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--scenario", default="paper_zipf_1500")
    ap.add_argument("--nodes", type=int, default=100_000)
    ap.add_argument("--groups", type=int, default=1500)
    ap.add_argument("--shards", type=int, nargs="+", default=[1, 2, 4, 8, 16, 32, 64])
    ap.add_argument("--cluster-nodes", type=int, default=4)
    ap.add_argument("--tmp", default=None, help="directory for the temporary run dirs")
    ap.add_argument("--bootstrap", choices=("oracle", "protocol"), default="oracle")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                    help="a scenario config override, as `cli.py scenario --set` (repeatable)")
    ap.add_argument("--phases", nargs="+", default=list(PHASES), help="phases to report")
    ap.add_argument("--relay-above", type=int, default=None,
                    help="start rounds of more shards than this through the shards' relay "
                         "calls (default: the engine's RELAY_ABOVE; a large value: never)")
    ap.add_argument("--ray-pushes", action="store_true",
                    help="every push between shards a Ray call, also between shards of one "
                         "machine (default: those go over local links)")
    ap.add_argument("--profile-shards", default=None, metavar="DIR",
                    help="profile every shard's rounds (CPU clock, cProfile) and write "
                         "DIR/K<k>/shard<i>-<phase>.prof; compare two K with "
                         "benchmarks/split_profile.py (the times then include the "
                         "profiler's cost)")
    add_json_option(ap, "scale_100k_k1_k2.json")
    a = ap.parse_args()
    if a.tmp is not None:
        Path(a.tmp).mkdir(parents=True, exist_ok=True)
    from ray.cluster_utils import Cluster
    cluster = Cluster()
    cpus = os.cpu_count() or 2
    # the simulated nodes share this box's memory: together they get the object store the
    # emulator's own Ray would (cluster_utils' default, 150 MiB a node, spilled the
    # create phase's shared tables to disk and restored them)
    store = max(runtime.ray_spark.object_store_bytes() // a.cluster_nodes, 150 << 20)
    for i in range(a.cluster_nodes):
        # no dashboard, as the emulator's own Ray (runtime.ray_spark.start_ray): on two cores
        # its agent and modules took a few % of a core from the shards in the join
        cluster.add_node(num_cpus=max(1, cpus // a.cluster_nodes) if i else cpus,
                         include_dashboard=False, object_store_memory=store)
    rows = []
    try:
        for k in a.shards:
            r = measure(a, k, cluster.address)
            rows.append(r)
            print(k, {p: {x: r["phases"][p].get(x) for x in ("rounds", "windows", "wall_s",
                                                              "driver_s")}
                      for p in a.phases if p in r["phases"]}, flush=True)
            ray.shutdown()
    finally:
        ray.shutdown()           # the cluster refuses to stop a node the driver is on
        cluster.shutdown()
    load = os.getloadavg()
    relay_above = a.relay_above if a.relay_above is not None else emulator.driver.RELAY_ABOVE
    print(f"\n{platform.node()}, {cpus} cores, load {load[0]:.1f}/{load[1]:.1f}, "
          f"{a.scenario} --nodes {a.nodes} --groups {a.groups} --topologies 1, "
          f"{a.bootstrap} bootstrap{''.join(' --set ' + x for x in a.set)}, "
          f"relay above {relay_above} shards, "
          f"{a.cluster_nodes} simulated Ray nodes\n")
    print("| K | phase | messages | rounds (early) | windows | shard calls | wall s | "
          "driver ms/window | driver CPU ms/window | driver ms/round | sync % | "
          "shard CPU s, max / sum | peer wait s, max | bare promises / asks per window | "
          "msg/s | peak shard RSS MB | "
          "host busy cores | cells, max / sum | run s | load |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        for p in a.phases:
            st = r["phases"].get(p)
            if not st:
                continue
            w = max(st["windows"], 1)
            rounds = st.get("rounds", st["windows"])
            print(f"| {r['k']} | {p} | {st['messages']:,} | {rounds:,} "
                  f"({st.get('rounds_ended_early', 0):,}) | {st['windows']:,} | "
                  f"{st.get('shard_calls', 0):,} | {st['wall_s']:.2f} | "
                  f"{1000 * st.get('driver_s', 0.0) / w:.3f} | "
                  f"{1000 * st.get('driver_cpu_s', 0.0) / w:.3f} | "
                  f"{1000 * st.get('driver_s', 0.0) / max(rounds, 1):.3f} | "
                  f"{100 * st['sync_s'] / max(st['wall_s'], 1e-9):.0f} | "
                  f"{max(st.get('cpu_s', [0.0])):.2f} / {sum(st.get('cpu_s', [])):.2f} | "
                  f"{max(st.get('wait_s', st.get('push_s', [0.0]))):.2f} | "
                  f"{st.get('promise_pushes', 0) / w:.1f} / {st.get('promise_wants', 0) / w:.1f} | "
                  f"{st['messages'] / max(st['wall_s'], 1e-9):,.0f} | "
                  f"{r['peak_rss'] / 2**20:,.0f} | "
                  f"{st['host_busy_s'] / max(st['wall_s'], 1e-9):.2f} | "
                  f"{max(st['cells']):,} / {sum(st['cells']):,} | "
                  f"{r['total_s']:.0f} | {r['load']:.1f} |")
    fits = {}
    for p in a.phases:
        fit = cell_cost_fit([r["phases"][p] for r in rows if p in r["phases"]])
        if fit:
            fits[p] = fit
            print(f"\n{p}: shard CPU = {1e3 * fit['per_cell_s']:.3f} ms x cells + "
                  f"{1e6 * fit['per_event_s']:.3f} us x events (least squares over "
                  f"{fit['points']} shards; residual {100 * fit['residual']:.0f} % of the "
                  f"CPU); K = 2 on two free cores at most {fit['k2_ceiling']:.2f}x K = 1")
    if a.json:
        from report import write_record
        write_record(a.json, f"bench_scale {a.scenario} {a.nodes:,} nodes",
                     json_figures(rows, a.phases, fits))


def json_figures(rows: list[dict], phases, fits: dict) -> dict:
    """The run's figures for benchmarks/report.py: per phase and K the wall, windows,
    rounds, sync share and per window, driver CPU per window, shard CPU; K = 2 against
    K = 1; the cell-cost fit; and every row of the table."""
    fig: dict = {}
    walls: dict[int, float] = {}
    for r in rows:
        k = r["k"]
        for p in phases:
            st = r["phases"].get(p)
            if not st:
                continue
            w = max(st["windows"], 1)
            fig.update({
                f"{p}_wall_s_k{k}": st["wall_s"], f"{p}_windows_k{k}": st["windows"],
                f"{p}_rounds_k{k}": st.get("rounds", st["windows"]),
                f"{p}_messages_k{k}": st["messages"],
                f"{p}_sync_pct_k{k}": 100 * st["sync_s"] / max(st["wall_s"], 1e-9),
                f"{p}_sync_ms_per_window_k{k}": 1000 * st["sync_s"] / w,
                f"{p}_driver_cpu_ms_per_window_k{k}": 1000 * st.get("driver_cpu_s", 0.0) / w,
                f"{p}_shard_cpu_s_max_k{k}": max(st.get("cpu_s", [0.0])),
                f"{p}_shard_cpu_s_sum_k{k}": sum(st.get("cpu_s", [])),
                f"{p}_cells_sum_k{k}": sum(st["cells"]),
            })
            walls[k] = walls.get(k, 0.0) + st["wall_s"]
    for p in phases:
        if f"{p}_wall_s_k1" in fig and f"{p}_wall_s_k2" in fig:
            fig[f"{p}_speedup_k2"] = fig[f"{p}_wall_s_k1"] / max(fig[f"{p}_wall_s_k2"], 1e-9)
    if 1 in walls and 2 in walls:
        fig["both_speedup_k2"] = walls[1] / max(walls[2], 1e-9)
    for p, fit in fits.items():
        fig[f"{p}_fit_a_ms"] = 1e3 * fit["per_cell_s"]
        fig[f"{p}_fit_b_us"] = 1e6 * fit["per_event_s"]
        fig[f"{p}_k2_ceiling"] = fit["k2_ceiling"]
    fig["rows"] = [{"k": r["k"], "total_s": r["total_s"], "load": r["load"],
                    "peak_shard_rss_mb": r["peak_rss"] / 2**20,
                    "phases": {p: {x: v for x, v in st.items()
                                   if isinstance(v, (int, float, list))}
                               for p, st in r["phases"].items()}} for r in rows]
    return fig


def cell_cost_fit(phase_rows) -> dict | None:
    """Least-squares fit of each shard's CPU in a phase as a x cells + b x events, over
    every shard of the runs given (``phase_rows``: a phase's stats per K, with per-shard
    ``cpu_s``, ``cells`` and ``shard_events``), and the speed-up that K = 2 can have over
    K = 1 on two free cores by that model: a whole-grid shard (C cells, E events) against
    two that each see the cells C2 of the K = 2 run and half the events. None without a
    K = 1 and a K = 2 run or with fewer than 3 shards. O(shards)."""
    x, y = [], []
    for st in phase_rows:
        for cpu, c, e in zip(st.get("cpu_s", []), st.get("cells", []),
                             st.get("shard_events", []), strict=False):
            x.append((c, e))
            y.append(cpu)
    by_k = {len(st.get("cells", [])): st for st in phase_rows}
    if len(y) < 3 or 1 not in by_k or 2 not in by_k:
        return None
    (a, b), *_ = np.linalg.lstsq(np.asarray(x, float), np.asarray(y, float), rcond=None)
    pred = np.asarray(x, float) @ np.array([a, b])
    one, two = by_k[1], by_k[2]
    t1 = a * one["cells"][0] + b * one["shard_events"][0]
    t2 = max(a * c + b * e for c, e in zip(two["cells"], two["shard_events"], strict=True))
    return {"per_cell_s": float(a), "per_event_s": float(b), "points": len(y),
            "residual": float(np.abs(pred - y).sum() / max(sum(y), 1e-9)),
            "k2_ceiling": float(t1 / max(t2, 1e-12))}


if __name__ == "__main__":
    main()
