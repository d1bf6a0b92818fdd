"""docs/ARCHITECTURE.md's cost model of a phase at K shards, applied to measured runs: what
a deployment of M machines with P free cores each would take, from a `bench_scale.py` run
on any machine (even 64 shard processes sharing 2 cores).

    python benchmarks/cost_model.py RUN.json [RUN.json ...] [--machines 4] [--cores 16]
        [--sync SYNC.json] [--json PATH]

RUN.json: a record `bench_scale.py --json` wrote (its ``rows``: per K and phase, each
shard's thread CPU, the windows, the driver's rounds and its CPU). SYNC.json: the record of
`bench_sync.py` (default benchmarks/results/sync_per_window.json), the exchange's cost per
window between two shards of one machine (local links) and between machines (Ray pushes).

A phase at K shards over M machines, each shard on a core of its own:

    T(K) ~= max_k CPU_k + n_w * s + n_r * d

CPU_k: shard k's CPU in the phase (the thread's CPU clock, which a shared machine does not
inflate the way it does wall time); n_w: windows (the busiest shard's, summed over
rounds); s: one window's exchange, a local link's when every shard is on one machine,
else a Ray push's (a window waits for its slowest peer); n_r: the driver's rounds; d: the
driver's CPU per round, measured in the same run. It is a lower bound: it takes the
busiest shard as the critical path, where a window really waits for whichever shard is
busiest in that window. Where the run itself had a core per shard (K <= the cores it ran
on), the measured wall is printed beside the model, and their ratio is how much that
imbalance adds. O(runs x phases x K).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

_HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(_HERE))

from report import add_json_option  # noqa: E402 (benchmarks/ is on sys.path)

SYNC_RECORD = _HERE / "results" / "sync_per_window.json"


def exchange_us(sync_record: dict) -> tuple[float, float]:
    """(within one machine, between machines): the medians of a window's exchange over the
    record's runs, local links and Ray pushes (us)."""
    fig = sync_record["figures"]
    return (statistics.median(fig["local_links_median_us"]),
            statistics.median(fig["ray_pushes_median_us"]))


def predict_phase(st: dict, cores: int, local_us: float, remote_us: float) -> dict:
    """The model's terms and T for one phase's stats ``st`` (a bench_scale row's phase) with
    its K shards placed ``cores`` to a machine: no exchange at K = 1, a local link's when
    they fit one machine, else a Ray push's."""
    cpu = st.get("cpu_s", [])
    k = len(cpu)
    windows, rounds = st["windows"], st.get("rounds", st["windows"])
    s_us = 0.0 if k <= 1 else local_us if k <= cores else remote_us
    d_s = st.get("driver_cpu_s", 0.0) / max(rounds, 1)
    work = max(cpu, default=0.0)
    sync = windows * s_us * 1e-6
    driver = rounds * d_s
    return {"shards": len(cpu), "cpu_max_s": work, "cpu_sum_s": sum(cpu), "windows": windows,
            "rounds": rounds, "s_us": s_us, "d_ms": 1e3 * d_s, "work_s": work,
            "sync_s": sync, "driver_s": driver, "predicted_s": work + sync + driver,
            "messages": st.get("messages", 0), "measured_wall_s": st.get("wall_s")}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("runs", type=Path, nargs="+", help="records bench_scale.py --json wrote")
    ap.add_argument("--machines", type=int, default=4, help="machines of the deployment")
    ap.add_argument("--cores", type=int, default=16, help="free cores per machine")
    ap.add_argument("--ran-on-cores", type=int, default=2,
                    help="cores the runs had (the measured wall is compared with the model "
                         "only for K up to this)")
    ap.add_argument("--sync", type=Path, default=SYNC_RECORD,
                    help="bench_sync.py's record (the exchange per window)")
    add_json_option(ap)
    a = ap.parse_args(argv)
    local_us, remote_us = exchange_us(json.loads(a.sync.read_text()))
    print(f"deployment: {a.machines} machine(s) x {a.cores} cores; exchange per window "
          f"{local_us:.0f} us within a machine, {remote_us:.0f} us between machines\n")
    print("| run | K | phase | messages | shard CPU s, max / sum | windows | rounds | "
          "driver ms/round | T = CPU + n_w s + n_r d (s) | measured wall s | measured / T |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    figures: dict = {"machines": a.machines, "cores": a.cores, "local_us": local_us,
                     "remote_us": remote_us}
    for path in a.runs:
        rec = json.loads(path.read_text())
        for row in rec["figures"]["rows"]:
            k = row["k"]
            if k > a.machines * a.cores:
                raise SystemExit(f"{path}: K = {k} does not fit {a.machines} x {a.cores} cores")
            for phase, st in row["phases"].items():
                if "cpu_s" not in st:
                    continue
                p = predict_phase(st, a.cores, local_us, remote_us)
                wall = p["measured_wall_s"]
                fair = wall is not None and k <= a.ran_on_cores
                ratio = wall / p["predicted_s"] if fair and p["predicted_s"] else None
                print(f"| {path.stem} | {k} | {phase} | {p['messages']:,} | "
                      f"{p['cpu_max_s']:.2f} / {p['cpu_sum_s']:.2f} | {p['windows']:,} | "
                      f"{p['rounds']:,} | {p['d_ms']:.3f} | {p['work_s']:.2f} + "
                      f"{p['sync_s']:.2f} + {p['driver_s']:.2f} = {p['predicted_s']:.2f} | "
                      f"{wall:.2f}{'' if fair else ' (shared cores)'} | "
                      f"{'' if ratio is None else f'{ratio:.2f}'} |")
                figures[f"{phase}_predicted_s_k{k}"] = p["predicted_s"]
                figures[f"{phase}_cpu_max_s_k{k}"] = p["cpu_max_s"]
                figures[f"{phase}_windows_k{k}"] = p["windows"]
                if ratio is not None:
                    figures[f"{phase}_measured_over_model_k{k}"] = ratio
    if a.json:
        from report import write_record
        write_record(a.json, f"cost model, {a.machines} x {a.cores} cores", figures)
    return 0


if __name__ == "__main__":
    sys.exit(main())
