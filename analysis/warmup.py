"""Warm Spark up on a tiny run while the emulation still runs.

Why: on a fresh Spark session the first analysis of a run pays seconds that a second one
does not (benchmarks/bench_analysis.py --runs shows it on a fresh process): the JVM loads
and JIT-compiles Spark's scan, shuffle, Arrow and codegen paths, Spark's Python workers
fork and import the kernels, each worker reads the topology file, and the driver imports
matplotlib and draws its first figure. None of that depends on the run's
data, so the scenario runner starts Spark in a background thread when the emulation begins
and analyses a six-node run written here (the real run's own topology file, every event
table of the schema with a few rows) while the shards work; the run's own analysis then
starts warm. The warm-up's outputs are thrown away; nothing of it reaches the run's
results (it runs in its own directory, and the analysis is a pure function of its inputs).

`write_warmup_run` is O(1) work (a few rows per table); `warm_up` costs one analysis of a
six-node run, a few seconds of CPU once Spark is up.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from analysis.protocol import SCRIBE_CREATE, SCRIBE_DATA, SCRIBE_JOIN, SCRIBE_MCAST
from analysis.schema import ARROW_TYPES, EVENT_TABLES

# the warm-up run's type codes (any codes do: the analysis resolves names through the type
# table the run carries)
_CODES = {SCRIBE_CREATE: 60, SCRIBE_JOIN: 61, SCRIBE_MCAST: 66, SCRIBE_DATA: 68}

# every group: RP 0, members 1..4, tree 0->1, 0->2, 2->3, 2->4 (hosts of the real topology);
# eight groups, so that the grouped maps' buckets reach every Python worker of a small
# machine's executors (each worker then loads the topology and the kernels)
_EDGES = [(0, 1), (0, 2), (2, 3), (2, 4)]
_MEMBERS = [1, 2, 3, 4]
_GROUPS = 8
_HOSTS = 6


def _table(table: str, phase: str, columns: dict[str, list]) -> pa.Table:
    """Rows of event table `table` with exactly the documented schema (analysis/schema.py)."""
    schema = EVENT_TABLES[table]
    n = len(next(iter(columns.values())))
    arrays = {"phase": pa.array([phase] * n, pa.string())}
    for c, t in schema.items():
        if c != "phase":
            arrays[c] = pa.array(columns[c], getattr(pa, ARROW_TYPES[t])())
    return pa.table(arrays)


def _event_rows(host_router: list[int]) -> dict[str, tuple[str, dict[str, list]]]:
    """{table: (phase, columns)}: each group's tree, one multicast, the members' routes."""
    groups = list(range(_GROUPS))
    per_edge = [g for g in groups for _ in _EDGES]
    per_member = [g for g in groups for _ in _MEMBERS]
    members = _MEMBERS * _GROUPS
    parents, children = [p for p, _ in _EDGES] * _GROUPS, [c for _, c in _EDGES] * _GROUPS
    n_e, n_m = len(per_edge), len(per_member)
    return {
        "host": ("setup", {"node": list(range(_HOSTS)), "router": host_router,
                           "id_hex": [f"{i:032x}" for i in range(_HOSTS)]}),
        "message_type": ("setup", {"type": list(_CODES.values()), "name": list(_CODES)}),
        "group": ("create", {"group": groups, "rank": [g + 1 for g in groups],
                             "size": [len(_MEMBERS)] * _GROUPS, "rp": [0] * _GROUPS,
                             "creator": [0] * _GROUPS,
                             "id_hex": [f"{g + 10:032x}" for g in groups]}),
        "membership": ("join", {"group": per_member, "member": members}),
        "tree_edge": ("join", {"group": per_edge, "parent": parents, "child": children,
                               "variant": ["scribe"] * n_e}),
        "message": ("multicast", {"time": [1_000] * n_e, "arrival": [50_000] * n_e,
                                  "type": [_CODES[SCRIBE_DATA]] * n_e, "src": parents,
                                  "dst": children, "group": per_edge}),
        "delivery": ("multicast", {"group": per_member, "member": members,
                                   "source": [0] * n_m, "publish_time": [1_000] * n_m,
                                   "time": [50_000 + 10_000 * m for m in members],
                                   "hops": [1] * n_m, "seqno": [0] * n_m,
                                   "variant": ["scribe"] * n_m}),
        "route": ("join", {"origin": members, "root": [0] * n_m,
                           "type": [_CODES[SCRIBE_JOIN]] * n_m, "start": [0] * n_m,
                           "end": [90_000] * n_m, "hops": [2] * n_m,
                           "path_us": [80_000] * n_m}),
    }


def write_warmup_run(run_dir: Path, topology_file: Path) -> Path:
    """A six-node run directory on `topology_file` (a `Topology.save` file with at least six
    hosts, linked, not copied): every event table with a few rows of one group's tree,
    multicast and routes. Returns run_dir."""
    from analysis.physical import topology_numbers

    numbers = topology_numbers(topology_file)
    if int(numbers["n_hosts"]) < _HOSTS:
        raise ValueError(f"{topology_file}: {numbers['n_hosts']} hosts; the warm-up run "
                         f"needs {_HOSTS}")
    import numpy as np
    with np.load(topology_file) as z:
        host_router = z["host_router"][:_HOSTS].astype(int).tolist()
    (run_dir / "topology").mkdir(parents=True, exist_ok=True)
    link = run_dir / "topology" / "topo-0.npz"
    try:
        os.symlink(Path(topology_file).resolve(), link)
    except OSError:
        shutil.copyfile(topology_file, link)
    (run_dir / "config.toml").write_text('scenario = "warmup"\nnodes = 6\n\n[pastry]\nb = 4\n')
    for table, (phase, columns) in _event_rows(host_router).items():
        out = run_dir / "events" / table / "topo=0"
        out.mkdir(parents=True, exist_ok=True)
        pq.write_table(_table(table, phase, columns), out / f"{phase}-shard0.parquet")
    return run_dir


def warm_up(spark, topology_file: Path) -> float:
    """Analyse a six-node warm-up run on `topology_file` with `spark` (then delete it);
    returns the seconds it took."""
    import time

    from analysis.run import run_analysis

    t0 = time.perf_counter()
    root = Path(tempfile.mkdtemp(prefix="scribe-emu-warmup-"))
    try:
        run_analysis(write_warmup_run(root / "warmup", topology_file), spark)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return time.perf_counter() - t0
