"""A scenario on a 2-node Ray cluster (ray.cluster_utils) whose nodes share no path.

Each node's processes see local paths under a root of their own (SCRIBE_EMU_NODE_ROOT,
emulator/storage.py), as on machines without a shared filesystem: a file a shard writes on
its node is not where the driver or the other node looks. With no `run.storage` the run
must hand its event logs to Spark through the object store and keep its checkpoints on
the driver; it must finish, analyse every row (row counts per table equal to the session's
reference run's Parquet: the same scenario on one machine, tests/runs.py) and replay a
phase after a shard is killed.

On the same cluster and Spark session, `run_analysis` of a hand-built run (that of
test_analysis_real.build_run): the executors do not share the driver's disk, so the driver
hands them the event logs and the topology file; every CSV must hold the rows an
independent computation expects (a header-only CSV from a part file left on an executor's
disk would fail here).

Then, on a 3-node cluster whose nodes share the disk, 4 shards (two on the first node, one
on each other; no driver hub: they push batches to each other, the two of the first node
over a local link, and the other nodes' pushes to either of them in one call to the first,
their gateway, which passes shard 1's on) with a named `run.storage`, where every shard
writes its logs: emulation only, shard 1 (behind the gateway) killed in the join phase
and the phase replayed, the logs must be the session's 1-shard reference logs row for
row.

The clusters and their Spark run in a child process (a Spark driver JVM stays attached to
the Ray it first connected to), once for these tests, in the background from the session's
start on (tests/conftest.py's ClusterChild).
"""

from __future__ import annotations

import csv
import json
import os
import signal
import sys
from collections import Counter
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent


def _config():
    """The reference run's scenario, one retry after a lost shard."""
    from runs import reference_config
    return reference_config(2, "run.retries=1")


def rows(path) -> int:
    with open(path, newline="") as f:
        return sum(1 for _ in csv.DictReader(f))


def expected_rows(topo, groups, edges, group_sizes, n_hosts) -> dict[str, int]:
    """Data rows of each CSV for the run of test_analysis_real.build_run."""
    from topologies.baselines import ip_multicast, naive_unicast

    scribe = Counter(int(x) for _, p, c in edges for x in topo.path_links(p, c))
    ip, uni = set(), set()
    for d in groups:
        ip.update(ip_multicast(topo, d["rp"], d["members"])[1].tolist())
        uni.update(naive_unicast(topo, d["rp"], d["members"])[1].tolist())
    n_groups = len(group_sizes)
    return {"delay_penalty_by_group.csv": n_groups, "delay_penalty_summary.csv": 2,
            "rdp_rank1.csv": group_sizes[0], "rdp_rank1_summary.csv": 2,
            "node_stress.csv": n_hosts, "node_stress_summary.csv": 4,
            "link_stress.csv": len(scribe) + len(ip) + len(uni),
            "link_stress_summary.csv": 6, "overlay_hops.csv": 0,
            "overlay_hops_summary.csv": 0, "messages_by_type.csv": 1, "probes.csv": 1,
            "groups.csv": n_groups}


def _analyse_hand_run(run_dir: Path) -> dict:
    """`run_analysis` of test_analysis_real's hand-built run on the cluster's Spark."""
    from analysis import run_analysis
    from runtime import ray_spark as runtime
    from scenarios.analysis_spark import jvm_conf
    from test_analysis_real import GROUP_SIZES, N_HOSTS, build_run

    topo, groups, edges = build_run(run_dir)
    shape = runtime.spark_shape()
    # the JIT compiler a run as small gets (`analysis.jit = auto`)
    run_analysis(run_dir, runtime.start_spark(memory="1g", driver_memory="1g",
                                              configs=jvm_conf("c1", None, None)))
    return {"shape": list(shape), "run_dir": str(run_dir),
            "expected": expected_rows(topo, groups, edges, GROUP_SIZES, N_HOSTS)}


def _killing_get(real_get, killed: list):
    """``Emulator._get`` that first kills shard 1's process (SIGKILL) at the join phase's
    first call, once (its pid goes to ``killed``): the run must replay that phase."""
    def get_and_kill(self, refs, what, *ids):
        import ray
        if what == "phase 'join'" and not killed:
            pid = ray.get(self._actors[1].__ray_call__.remote(lambda a: os.getpid()))
            os.kill(pid, signal.SIGKILL)
            killed.append(pid)
        return real_get(self, refs, what, *ids)
    return get_and_kill


def _cluster_run(tmp: Path) -> dict:
    """The scenario on the 2-node cluster, a shard killed in the join phase, then the hand
    run's analysis there; returns what the analysis counted per table, where the shards
    ran, what the run left, and what the hand run's CSVs must hold."""
    import ray
    from ray.cluster_utils import Cluster

    import analysis.run as analysis_run
    import emulator
    from emulator.driver import Emulator
    from emulator.storage import NODE_ROOT_ENV
    from runtime import ray_spark as runtime
    from scenarios import run_scenario

    roots = [tmp / "node0", tmp / "node1"]
    cluster = Cluster(initialize_head=True, head_node_args={
        "num_cpus": 1, "resources": {"node0": 1}, "env_vars": {NODE_ROOT_ENV: str(roots[0])}})
    cluster.add_node(num_cpus=1, resources={"node1": 1}, env_vars={NODE_ROOT_ENV: str(roots[1])})
    counted, nodes, killed = {}, [], []
    real_load, real_get = analysis_run.load_events, Emulator._get

    def counting_load(spark, *args, **kwargs):       # the real loader; counts its rows
        tables = real_load(spark, *args, **kwargs)
        counted.update({name: df.count() for name, df in tables.items()})
        return tables

    class OneShardPerNode(Emulator):
        def __init__(self, *args, **kwargs):
            kwargs["actor_options"] = [{"resources": {f"node{k}": 0.01}} for k in range(2)]
            super().__init__(*args, **kwargs)
            nodes.append(len(set(ray.get([a.node_id.remote() for a in self._actors]))))

    analysis_run.load_events = counting_load
    Emulator._get = _killing_get(real_get, killed)
    emulator.Emulator = OneShardPerNode
    try:
        try:
            run_dir = run_scenario(_config(), out=tmp / "cluster-run",
                                   address=cluster.address, progress=False)
        finally:
            emulator.Emulator, Emulator._get = Emulator, real_get
            analysis_run.load_events = real_load
        hand = _analyse_hand_run(tmp / "ts600-cluster")
    finally:
        runtime.stop_ray()
        cluster.shutdown()
    return {"counted": counted, "nodes": nodes, "killed": len(killed),
            "run_log": (run_dir / "run.log").read_text(),
            "state": json.loads((run_dir / "state.json").read_text()),
            "driver_files": sorted(str(p.relative_to(run_dir)) for p in run_dir.rglob("*")
                                   if p.is_file()),
            "node_files": sorted(str(p) for r in roots for p in r.rglob("*") if p.is_file()),
            "hand": hand}


def _three_node_run(tmp: Path) -> dict:
    """The reference scenario's emulation on 4 shards of a 3-node cluster sharing this
    disk, two on its first node, logs in a named run.storage; returns where the logs are,
    the nodes the shards ran on, their local-link peers and whether the run directory got an
    events folder."""
    import ray
    from ray.cluster_utils import Cluster

    import emulator
    from emulator.driver import Emulator
    from runs import reference_config
    from runtime import ray_spark as runtime
    from scenarios import run_scenario
    from scenarios import runner as runner_mod

    cluster = Cluster()
    seen, linked, killed = [], [], []
    real_get = Emulator._get

    class NodeRecorder(Emulator):   # shards 0 and 1 on node 0; notes where they ran
        def __init__(self, *args, **kwargs):
            kwargs["actor_options"] = [{"resources": {f"node{k}": 0.01}} for k in (0, 0, 1, 2)]
            super().__init__(*args, **kwargs)
            seen.append(len(set(ray.get([a.node_id.remote() for a in self._actors]))))
            linked.append(ray.get([a.link_peers.remote() for a in self._actors]))

    real_analyse, real_total = runner_mod._analyse, runner_mod._record_total
    emulator.Emulator = NodeRecorder
    Emulator._get = _killing_get(real_get, killed)
    runner_mod._analyse = lambda *a, **k: {}
    runner_mod._record_total = lambda *a, **k: None
    try:
        for n in range(3):
            cluster.add_node(num_cpus=1, resources={f"node{n}": 1})
        cfg = reference_config(4, "run.retries=1")
        cfg.run["storage"] = str(tmp / "storage")
        out = run_scenario(cfg, out=tmp / "run", progress=False, address=cluster.address)
    finally:
        emulator.Emulator, Emulator._get = Emulator, real_get
        runner_mod._analyse, runner_mod._record_total = real_analyse, real_total
        runtime.stop_ray()
        cluster.shutdown()
    return {"storage": str(tmp / "storage"), "nodes": seen, "linked": linked,
            "killed": len(killed), "run_log": (out / "run.log").read_text(),
            "events_in_run_dir": (out / "events").exists()}


@pytest.fixture(scope="module")
def cluster_child(request, warm_kernels, tmp_path_factory) -> dict:
    """What the child process found. It needs only the reference run's configuration, so
    it runs in the background (conftest.py's ClusterChild, after the kernel compile and
    the quick run), beside the tests before this module, which are `late`."""
    from conftest import background

    job = background("cluster_child", tmp_path_factory)
    request.getfixturevalue("reference_runs")
    return job.found()


@pytest.fixture(scope="module")
def reference_rows(reference_runs) -> dict[str, int]:
    from analysis.load import parquet_rows
    from analysis.schema import EVENT_TABLES
    return {t: parquet_rows(reference_runs[2], t) for t in EVENT_TABLES}


@pytest.mark.slow
@pytest.mark.late
def test_cluster_without_shared_disk_hands_logs_to_spark(cluster_child, reference_rows):
    print(json.dumps({k: {kk: vv for kk, vv in v.items() if kk != "run_log"}
                      if isinstance(v, dict) else v
                      for k, v in cluster_child.items()}))   # shown when an assertion fails
    cluster, reference = cluster_child["cluster"], reference_rows
    assert reference["message"] > 1_000 and reference["delivery"] > 0
    assert cluster["counted"] == reference          # every row of every table analysed
    assert cluster["killed"] == 1 and "retry 1 of 1" in cluster["run_log"]
    assert cluster["nodes"] and set(cluster["nodes"]) == {2}   # a shard on each node
    assert cluster["state"]["event_logs"] == {"handoff": True, "storage": None}
    # no event file anywhere; the checkpoints are on the driver (the shards sent them)
    assert not [f for f in cluster["node_files"] if "/events/" in f or "checkpoints" in f]
    assert not [f for f in cluster["driver_files"] if f.startswith("events")]
    assert "checkpoints/join/shard1.pkl" in cluster["driver_files"]
    assert "summary.json" in cluster["driver_files"]


if __name__ == "__main__":
    sys.path[:0] = [str(HERE), str(HERE.parent)]
    import tempfile
    tmp = Path(sys.argv[1])
    for part in ("two-nodes", "three-nodes"):
        (tmp / part).mkdir(parents=True, exist_ok=True)
    found = {"cluster": _cluster_run(tmp / "two-nodes"),
             "three_nodes": _three_node_run(tmp / "three-nodes")}
    # the executors' copies of the shipped topology files (in this process' TMPDIR)
    found["topology_copies"] = sorted(
        p.name for p in Path(tempfile.gettempdir()).glob("scribe-emu-*-topo-*.npz*"))
    print(json.dumps(found))


@pytest.mark.slow
@pytest.mark.late
def test_analyze_on_two_node_cluster(cluster_child):
    got = cluster_child["cluster"]["hand"]
    metrics = Path(got["run_dir"]) / "metrics"
    assert got["shape"] == [2, 1]          # two executors, one per node
    # the executors got the topology as a broadcast and wrote it to their machine's
    # temporary directory (the cluster's: the job's own), once per run and topology
    copies = cluster_child["topology_copies"]
    assert copies and all(c.endswith("-topo-0.npz") for c in copies), copies
    for name, want in got["expected"].items():
        assert rows(metrics / name) == want, name
    assert rows(metrics / "node_stress_histogram.csv") > 0
    assert rows(metrics / "link_stress_histogram.csv") > 0


@pytest.mark.slow
@pytest.mark.late
def test_three_node_cluster_gives_the_one_shard_logs(cluster_child, reference_runs):
    from runs import log_differences
    got = cluster_child["three_nodes"]
    # (a second emulator after the kill; shard 0 is node 0's gateway)
    assert len(got["nodes"]) >= 2 and set(got["nodes"]) == {3}, got["nodes"]
    assert all(peers == [[1], [0], [], []] for peers in got["linked"]), got["linked"]
    assert got["killed"] == 1 and "retry 1 of 1" in got["run_log"], got["run_log"][-2000:]
    assert not got["events_in_run_dir"]              # the shards wrote to run.storage
    assert log_differences(Path(got["storage"]), reference_runs[1]) == []
