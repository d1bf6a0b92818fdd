"""FreePastry's own workload on the emulator: the number to beat is 85 s.

FreePastry 2.1's direct simulator runs this in ~85 s on this machine class: 10,000 nodes
join by the protocol (arrivals over 10 s), ts5050, 10 groups of 1,000 subscribers, one
multicast each. Here: the same as a scenario (written to ``<out>/bench_peer.toml``), run by
the scenario runner's own per-topology code on Ray with the scenarios' automatic shard count
(one shard for 10,000 nodes; ``--shards K`` to choose), without the Spark
analysis (not part of the comparison). Prints the emulation time of each phase and the
share of its messages in passes the Python loop dispatched (the compiled cell loop handed
them back, or left them to it), the table-quality check's time and the message counts, and
writes them to ``<out>/bench.json``.

``--rate R``: arrivals per second instead (the faithful bootstrap's sparse traffic at 10/s:
a few messages a cell over half a million cells).

Usage: ``python benchmarks/bench_peer.py --out /work/runs/NAME [--nodes 10000] [--shards K]
[--rate R]``
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

from report import add_json_option

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
# the shard actors unpickle the stack factory: they must import this checkout too
os.environ["PYTHONPATH"] = os.pathsep.join(
    [str(ROOT)] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p])

TOML = """description = "FreePastry workload: {nodes} protocol joins in 10 s, {groups} x {size}"

[run]
nodes = {nodes}
groups = {groups}
topologies = 1
seed = 1
shards = {shards}

[topology]
source = "ts5050"
lan_us = 1000
partition = "locality"

[groups]
kind = "fixed"
size = {size}

[pastry]
bootstrap = "protocol"
join_rate_per_s = {rate}   # (default: every arrival within 10 s, as FreePastry's workload)

[phases]
order = ["bootstrap", "create", "join", "multicast"]

[analysis]
warmup = "off"           # no Spark: the analysis is not part of the comparison
"""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, required=True, help="run directory to create")
    ap.add_argument("--nodes", type=int, default=10_000)
    ap.add_argument("--groups", type=int, default=10)
    ap.add_argument("--size", type=int, default=1_000)
    ap.add_argument("--shards", type=int, default=0,
                    help="shard actors (default 0: the scenarios' automatic count, one per "
                         "CPU and at most one per 100,000 nodes: the join builds the "
                         "overlay)")
    ap.add_argument("--rate", type=float, default=0.0,
                    help="arrivals per second (default 0: nodes / 10, FreePastry's 10 s)")
    add_json_option(ap, "freepastry_workload.json")
    a = ap.parse_args()

    from scenarios import phases, run_scenario, runner
    from scenarios.config import load_scenario

    a.out.mkdir(parents=True, exist_ok=False)
    toml = a.out / "bench_peer.toml"
    toml.write_text(TOML.format(nodes=a.nodes, groups=a.groups, size=a.size, shards=a.shards,
                               rate=a.rate or a.nodes / 10))
    cfg = load_scenario(str(toml))
    run_dir = a.out / "run"
    quality_s = []
    inner = phases._overlay_quality

    def timed_quality(topo_run, oracle):
        # (the oracle it compares with is computed beside the join: a wait for it counts)
        t0 = time.perf_counter()
        q = inner(topo_run, oracle)
        quality_s.append(time.perf_counter() - t0)
        return q

    # the scenario runner itself, emulation only (the Spark analysis is not part of the
    # comparison), as benchmarks/bench_scale.py
    phases._overlay_quality = timed_quality
    runner._analyse = lambda *args, **kw: {}
    runner._record_total = lambda *args, **kw: None
    t0 = time.perf_counter()
    run_scenario(cfg, out=run_dir, progress=False)
    total = time.perf_counter() - t0
    state = json.loads((run_dir / "state.json").read_text())   # the runner's record
    out = {"nodes": a.nodes, "shards": cfg.shards, "total_s": round(total, 2),
           "quality_check_s": round(quality_s[0], 2) if quality_s else None,
           "phases": state["phases"], "timing": state["timing"],
           "quality": state["quality"].get("0")}
    (a.out / "bench.json").write_text(json.dumps(out, indent=1, default=float))
    for ph, st in out["phases"].items():
        print(f"{ph:10s} emulation {st['emulation_s']:8.2f} s  wall {st['wall_s']:8.2f} s  "
              f"messages {st['messages']:>10,}  windows {st['windows']:>6,}  "
              f"{st['messages'] / max(st['emulation_s'], 1e-9):>9,.0f} msg/s  "
              f"{100 * st.get('python_messages', 0) / max(st['messages'], 1):5.1f} % by the "
              f"Python loop")
    print(f"table-quality check {out['quality_check_s']} s; total {out['total_s']} s")
    if a.json:
        from report import write_record
        ph = out["phases"]
        figures = {"emulation_s": sum(st["emulation_s"] for st in ph.values()),
                   "bootstrap_emulation_s": ph.get("bootstrap", {}).get("emulation_s"),
                   "quality_check_s": out["quality_check_s"], "total_s": out["total_s"],
                   "shards": out["shards"],
                   **{f"{p}_emulation_s": st["emulation_s"] for p, st in ph.items()},
                   **{f"{p}_messages": st["messages"] for p, st in ph.items()},
                   **{f"{p}_python_share": st.get("python_messages", 0) / max(st["messages"], 1)
                      for p, st in ph.items()}}
        write_record(a.json, "bench_peer (FreePastry's workload)",
                     {k: v for k, v in figures.items() if v is not None})


if __name__ == "__main__":
    main()
