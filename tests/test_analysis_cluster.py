"""`run_analysis` on a 2-node Ray cluster (ray.cluster_utils.Cluster): the executors are
treated as not sharing the driver's disk, so the driver hands them the event logs and the
topology file; every CSV must hold the rows an independent computation expects (a
header-only CSV from a part file left on an executor's disk would fail here)."""

from __future__ import annotations

import csv
from collections import Counter

import pytest
from test_analysis_real import GROUP_SIZES, N_HOSTS, build_run

from topologies.baselines import ip_multicast, naive_unicast


def rows(path) -> int:
    with open(path, newline="") as f:
        return sum(1 for _ in csv.DictReader(f))


def expected_rows(topo, groups, edges) -> dict[str, int]:
    """Data rows of each CSV for the run of test_analysis_real.build_run."""
    scribe = Counter(int(x) for _, p, c in edges for x in topo.path_links(p, c))
    ip, uni = set(), set()
    for d in groups:
        ip.update(ip_multicast(topo, d["rp"], d["members"])[1].tolist())
        uni.update(naive_unicast(topo, d["rp"], d["members"])[1].tolist())
    n_groups = len(GROUP_SIZES)
    return {"delay_penalty_by_group.csv": n_groups, "delay_penalty_summary.csv": 2,
            "rdp_rank1.csv": GROUP_SIZES[0], "rdp_rank1_summary.csv": 2,
            "node_stress.csv": N_HOSTS, "node_stress_summary.csv": 4,
            "link_stress.csv": len(scribe) + len(ip) + len(uni),
            "link_stress_summary.csv": 6, "overlay_hops.csv": 0,
            "overlay_hops_summary.csv": 0, "messages_by_type.csv": 1, "probes.csv": 1,
            "groups.csv": n_groups}


@pytest.mark.slow
def test_analyze_on_two_node_cluster(tmp_path):
    from ray.cluster_utils import Cluster

    from analysis import run_analysis
    from emulator import runtime

    run_dir = tmp_path / "ts600-cluster"
    topo, groups, edges = build_run(run_dir)
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1})
    cluster.add_node(num_cpus=1)
    try:
        runtime.start_ray(cluster.address)
        assert runtime.spark_shape() == (2, 1)
        spark = runtime.start_spark("analysis-cluster-test", memory="1g", driver_memory="1g")
        run_analysis(run_dir, spark)
    finally:
        runtime.stop_ray()
        cluster.shutdown()
    for name, want in expected_rows(topo, groups, edges).items():
        assert rows(run_dir / "metrics" / name) == want, name
    hist = run_dir / "metrics"
    assert rows(hist / "node_stress_histogram.csv") > 0
    assert rows(hist / "link_stress_histogram.csv") > 0
