"""`run_analysis` on a 2-node Ray cluster (ray.cluster_utils.Cluster): the executors are
treated as not sharing the driver's disk, so the driver hands them the event logs and the
topology file; every CSV must hold the rows an independent computation expects (a
header-only CSV from a part file left on an executor's disk would fail here).

The cluster and its Spark run in a child process: a Spark driver JVM stays attached to the
Ray it first connected to, so the other modules' sessions could not start after it in the
same process.
"""

from __future__ import annotations

import csv
import json
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent


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


def analyse_on_cluster(run_dir: Path) -> dict:
    """Child process: build the run, analyse it on a 2-node cluster, return what to check."""
    from ray.cluster_utils import Cluster
    from test_analysis_real import GROUP_SIZES, N_HOSTS, build_run

    from analysis import run_analysis
    from emulator import runtime

    topo, groups, edges = build_run(run_dir)
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1})
    cluster.add_node(num_cpus=1)
    try:
        runtime.start_ray(cluster.address)
        shape = runtime.spark_shape()
        spark = runtime.start_spark("analysis-cluster-test", memory="1g", driver_memory="1g")
        run_analysis(run_dir, spark)
    finally:
        runtime.stop_ray()
        cluster.shutdown()
    return {"shape": list(shape),
            "expected": expected_rows(topo, groups, edges, GROUP_SIZES, N_HOSTS)}


@pytest.mark.slow
def test_analyze_on_two_node_cluster(tmp_path):
    run_dir = tmp_path / "ts600-cluster"
    done = subprocess.run([sys.executable, __file__, str(run_dir)], cwd=HERE,
                          capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    got = json.loads(done.stdout.strip().splitlines()[-1])
    assert got["shape"] == [2, 1]          # two executors, one per node
    for name, want in got["expected"].items():
        assert rows(run_dir / "metrics" / name) == want, name
    assert rows(run_dir / "metrics" / "node_stress_histogram.csv") > 0
    assert rows(run_dir / "metrics" / "link_stress_histogram.csv") > 0


if __name__ == "__main__":
    sys.path[:0] = [str(HERE), str(HERE.parent)]
    print(json.dumps(analyse_on_cluster(Path(sys.argv[1]))))
